//! Training runs for retrograd that survive interruption ([`train`]:
//! versioned training states, checkpoint directories, stop signals) and
//! data-parallel training over several processes ([`distributed`], over MPI
//! with the feature `mpi`).
#![warn(missing_docs)]

pub mod distributed;
pub mod train;
