//! Pooling layers: [`MaxPool2d`], [`AvgPool2d`], [`AdaptiveAvgPool2d`]
//! (no parameters), each a module around its `Var` method.

use crate::error::Result;
use crate::graph::Var;
use crate::nn::{Forward, Module, Parameter};
use crate::ops::nn::{AvgPool2dOptions, MaxPool2dOptions, Spatial};

/// PyTorch's `nn.MaxPool2d`: [`Var::max_pool2d`] with fixed options.
///
/// ```
/// use retrograd::{Graph, MaxPool2dOptions, Tensor, nn::{MaxPool2d, Forward, Module}};
/// let pool = MaxPool2d::new(MaxPool2dOptions::new(2));
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec((0..16).map(f64::from).collect(), &[1, 1, 4, 4])?);
/// assert_eq!(pool.forward(&x)?.value().to_f64_vec(), vec![5.0, 7.0, 13.0, 15.0]);
/// assert_eq!(pool.num_parameters(), 0);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    options: MaxPool2dOptions,
}

impl MaxPool2d {
    /// The layer for these options.
    pub fn new(options: MaxPool2dOptions) -> Self {
        MaxPool2d { options }
    }

    /// Its options.
    pub fn options(&self) -> &MaxPool2dOptions {
        &self.options
    }
}

impl Module for MaxPool2d {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
}

impl Forward for MaxPool2d {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_max_pool2d(&self.options)
    }
}

/// PyTorch's `nn.AvgPool2d`: [`Var::avg_pool2d`] with fixed options.
///
/// ```
/// use retrograd::{AvgPool2dOptions, Graph, Tensor, nn::{AvgPool2d, Forward, Module}};
/// let pool = AvgPool2d::new(AvgPool2dOptions::new(2));
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec((0..16).map(f64::from).collect(), &[1, 4, 4])?);
/// assert_eq!(pool.forward(&x)?.value().to_f64_vec(), vec![2.5, 4.5, 10.5, 12.5]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvgPool2d {
    options: AvgPool2dOptions,
}

impl AvgPool2d {
    /// The layer for these options.
    pub fn new(options: AvgPool2dOptions) -> Self {
        AvgPool2d { options }
    }

    /// Its options.
    pub fn options(&self) -> &AvgPool2dOptions {
        &self.options
    }
}

impl Module for AvgPool2d {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
}

impl Forward for AvgPool2d {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_avg_pool2d(&self.options)
    }
}

/// PyTorch's `nn.AdaptiveAvgPool2d`: [`Var::adaptive_avg_pool2d`] to a
/// fixed output size (one number or `[h, w]`).
///
/// ```
/// use retrograd::{Graph, Tensor, nn::{AdaptiveAvgPool2d, Forward, Module}};
/// let pool = AdaptiveAvgPool2d::new(1);
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec((0..8).map(f64::from).collect(), &[1, 2, 2, 2])?);
/// let y = pool.forward(&x)?;
/// assert_eq!(y.shape(), &[1, 2, 1, 1]);
/// assert_eq!(y.value().to_f64_vec(), vec![1.5, 5.5]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool2d {
    output_size: [usize; 2],
}

impl AdaptiveAvgPool2d {
    /// The layer pooling to `output_size`.
    pub fn new(output_size: impl Spatial<2>) -> Self {
        AdaptiveAvgPool2d {
            output_size: output_size.spatial(),
        }
    }

    /// The output size.
    pub fn output_size(&self) -> [usize; 2] {
        self.output_size
    }
}

impl Module for AdaptiveAvgPool2d {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
}

impl Forward for AdaptiveAvgPool2d {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_adaptive_avg_pool2d(self.output_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Sequential;
    use crate::{Graph, Tensor};

    #[test]
    fn layers_match_their_functions_and_compose() {
        let g = Graph::new();
        let x = g.variable(
            Tensor::from_vec(
                (0..50).map(|i| (i as f64 * 0.7).sin()).collect(),
                &[1, 2, 5, 5],
            )
            .unwrap(),
        );
        let mp = MaxPool2dOptions::new(3).stride(2).padding(1);
        assert_eq!(
            MaxPool2d::new(mp.clone()).forward(&x).unwrap().value(),
            x.max_pool2d(&mp).value()
        );
        let ap = AvgPool2dOptions::new(2).ceil_mode(true);
        assert_eq!(AvgPool2d::new(ap.clone()).options(), &ap);
        let mut net = Sequential::new();
        net.push(MaxPool2d::new(MaxPool2dOptions::new(2).ceil_mode(true)));
        net.push(AvgPool2d::new(ap));
        net.push(AdaptiveAvgPool2d::new([1, 1]));
        let y = net.forward(&x).unwrap();
        assert_eq!(y.shape(), &[1, 2, 1, 1]);
        assert!(net.parameters().is_empty());
        let grad = y.sum().backward().unwrap().wrt(&x);
        assert_eq!(grad.shape(), &[1, 2, 5, 5]);
        assert!(AdaptiveAvgPool2d::new(0).forward(&x).is_err());
    }
}
