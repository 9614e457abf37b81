//! Pictures of retrograd graphs ([`viz`]: Graphviz DOT, SVG, the page that
//! steps through the backward sweep), run logs and their charts
//! ([`runlog`]), and the expression front end that builds a graph from text
//! ([`expr`], feature `expr`).
#![warn(missing_docs)]

#[cfg(feature = "expr")]
pub mod expr;
pub mod runlog;
pub mod viz;
