//! The vectorisable `tanh`: branch-free Cephes, within 2 ulp, so tanh loops
//! vectorise. The functions live with [`Element`](crate::Element), in
//! `tensor::math`; this module keeps their public path.

pub use crate::tensor::math::{tanh_f32, tanh_f64};
