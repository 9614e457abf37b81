//! Fusion at import: ONNX patterns that spell out one retrograd op are
//! run as that op (placeholder; patterns are added below).

use super::OnnxModel;
use crate::tensor::Tensor;

/// Rewrites known patterns among `m`'s steps.
pub(super) fn fuse(m: &mut OnnxModel, initializers: &[(usize, String, Tensor)]) {
    let _ = (m, initializers);
}
