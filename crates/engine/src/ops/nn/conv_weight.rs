//! The gradient of a convolution with respect to its weight, as an op of
//! its own ([`ConvWeight`], PyTorch's `torch.nn.grad.conv2d_weight`), so the
//! weight gradient is differentiable again: its derivatives are a
//! `ConvTranspose` (with respect to the input) and a `Conv` (with respect
//! to the output gradient): `conv_products.rs`.

use super::conv_products::{self as products, ConvProduct, Slot};
use super::conv_spec::{sample, ConvSpec};
use super::spatial::check_same_dtype;
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::kernels::nn::conv::{conv2d_weight_grad, ConvGeometry};
use crate::ops::OpAttributes;
use crate::ops::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// `gw = conv_weight(x, gy)`: the weight gradient of the convolution `spec`
/// with input `x` `[N, C_in, spatial...]` and output gradient `gy`
/// `[N, C_out, spatial'...]`; the output is `[C_out, C_in / groups, kernel...]`.
/// The kernel size is given, or (registry instance, `None`) the one whose
/// windows exactly cover the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvWeight {
    pub(super) spec: ConvSpec,
    pub(super) kernel: [usize; 2],
}

impl ConvWeight {
    fn name_str(&self) -> &'static str {
        self.spec.name("conv1d_weight", "conv2d_weight")
    }

    fn plan(&self, x: &Tensor, gy: &Tensor) -> Result<(Dims, ConvGeometry)> {
        let op = self.name_str();
        let input = self.spec.spatial_of(op, "the input", x)?;
        let output = self.spec.spatial_of(op, "the output gradient", gy)?;
        check_same_dtype(op, x, gy)?;
        let (n, cin, cout, groups) = (x.shape()[0], x.shape()[1], gy.shape()[1], self.spec.groups);
        if gy.shape()[0] != n {
            return Err(Error::shape_mismatch(op, x.shape(), gy.shape()));
        }
        if groups == 0 || cin % groups != 0 || cout % groups != 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "groups = {groups} must divide the channels of the input {:?} and of the output gradient {:?}",
                    x.shape(),
                    gy.shape()
                ),
            ));
        }
        let kernel = self.kernel;
        if self.spec.output_of(op, x.shape(), input, kernel)? != output {
            return Err(Error::invalid(
                op,
                format!(
                    "an input of shape {:?} and a kernel of size {kernel:?} do not give an output gradient of shape {:?}",
                    x.shape(),
                    gy.shape()
                ),
            ));
        }
        let mut shape = Dims::from_slice(&[cout, cin / groups]);
        if self.spec.spatial == 2 {
            shape.push(kernel[0]);
        }
        shape.push(kernel[1]);
        Ok((
            shape,
            self.spec.geometry(n, [cin, cout], input, output, kernel),
        ))
    }
}

impl ConvProduct for ConvWeight {
    const MAKES: Slot = Slot::W;
    fn spec(&self) -> &ConvSpec {
        &self.spec
    }
    fn with_spec(&self, spec: ConvSpec) -> Self {
        ConvWeight {
            spec,
            kernel: self.kernel,
        }
    }
}

impl StructuredOp for ConvWeight {
    const NAME: &'static str = "conv2d_weight";
    const INPUTS: &'static [&'static str] = &["input", "grad_output"];
    products::conv_product_rules!();
    /// Bilinear, with no bias: the tangents are derived.
    const LINEAR: &'static [usize] = &[0, 1];
    fn attributes(&self) -> OpAttributes {
        self.spec.attributes().ints("kernel", &self.kernel)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (x, gy) = (inputs[0], inputs[1]);
        let (shape, geo) = self.plan(x, gy)?;
        crate::with_dtype!("conv_weight", x.dtype(), T => {
            let (xs, gys) = (x.as_slice_of::<T>(), gy.as_slice_of::<T>());
            Ok(Tensor::build::<T>(shape, |out| conv2d_weight_grad(&geo, xs, gys, out)))
        })
    }
    fn facts(&self) -> OpFacts {
        let spatial = self.spec.spatial;
        let spec = ConvSpec {
            stride: [if spatial == 1 { 1 } else { 2 }, 1],
            pad_before: [if spatial == 1 { 0 } else { 1 }, 1],
            pad_after: [if spatial == 1 { 0 } else { 1 }, 1],
            dilation: [1, 2],
            groups: 2,
            ..ConvSpec::plain(spatial)
        };
        let kernel = [if spatial == 1 { 1 } else { 2 }, 2];
        OpFacts {
            arity: Some(2),
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(ConvWeight { spec, kernel })),
            // x [2, 4, (5,) 6] gives (3,) 6 output positions with this spec.
            sample_inputs: Some(if spatial == 1 {
                |seed| {
                    vec![
                        sample(&[2, 4, 6], seed, 1.0),
                        sample(&[2, 2, 6], seed + 3, 0.7),
                    ]
                }
            } else {
                |seed| {
                    vec![
                        sample(&[2, 4, 5, 6], seed, 1.0),
                        sample(&[2, 2, 3, 6], seed + 3, 0.7),
                    ]
                }
            }),
            ..OpFacts::opaque(Some(2))
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    // The registry's instances: a 3 (or 3x3) kernel, stride 1, no padding.
    reg.add_builtin(ConvWeight {
        spec: ConvSpec::plain(1),
        kernel: [1, 3],
    });
    reg.add_builtin(ConvWeight {
        spec: ConvSpec::plain(2),
        kernel: [3, 3],
    });
}
