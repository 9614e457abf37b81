//! Pooling layers: one [`Pool2d`] over any pooling's options, and under
//! PyTorch's name for each pooling op (`MaxPool2d`, `AvgPool2d`,
//! `AdaptiveAvgPool2d`, `LPPool2d`, ...): the names come from the ops'
//! own list, `ops::nn::pool::with_poolings!`, so a new pooling op brings
//! its layer with it.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter};
use crate::ops::nn::pool::options::*;

/// A pooling layer (no parameters): [`Pooling2d::pool`] with fixed
/// options. Each pooling op's layer is this under PyTorch's name.
///
/// ```
/// use retrograd::{Graph, MaxPool2dOptions, Tensor, nn::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d, Forward, Module}};
/// let pool = MaxPool2d::new(MaxPool2dOptions::new(2));
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec((0..16).map(f64::from).collect(), &[1, 1, 4, 4])?);
/// assert_eq!(pool.forward(&x)?.value().to_f64_vec(), vec![5.0, 7.0, 13.0, 15.0]);
/// assert_eq!(pool.num_parameters(), 0);
/// let avg = AvgPool2d::new(retrograd::AvgPool2dOptions::new(2));
/// assert_eq!(avg.forward(&x)?.value().to_f64_vec(), vec![2.5, 4.5, 10.5, 12.5]);
/// // Adaptive pooling takes its output size (one number or `[h, w]`).
/// let global = AdaptiveAvgPool2d::new(1);
/// assert_eq!(global.forward(&x)?.value().to_f64_vec(), vec![7.5]);
/// assert_eq!(global.options().output_size(), [1, 1]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool2d<O> {
    options: O,
}

impl<O: Pooling2d> Pool2d<O> {
    /// The layer for these options (or what converts into them).
    pub fn new(options: impl Into<O>) -> Self {
        Pool2d {
            options: options.into(),
        }
    }

    /// Its options.
    pub fn options(&self) -> &O {
        &self.options
    }
}

impl Pool2d<AdaptiveAvgPool2dOptions> {
    /// The output size.
    pub fn output_size(&self) -> [usize; 2] {
        self.options.output_size()
    }
}

impl<O: Pooling2d> Module for Pool2d<O> {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
}

impl<O: Pooling2d> Forward for Pool2d<O> {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.options.pool(x)
    }
}

/// One `pub type Layer = Pool2d<Options>;` per line of the pooling list.
macro_rules! pooling_layers {
    ($($file:ident: $($options:ident => $layer:ident),+;)*) => {
        $($(
            #[doc = concat!(
                "PyTorch's `nn.", stringify!($layer), "`: a [`Pool2d`] over [`",
                stringify!($options), "`]."
            )]
            pub type $layer = Pool2d<$options>;
        )+)*
    };
}
crate::ops::nn::pool::with_poolings!(pooling_layers);

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
        let lp = LpPool2dOptions::new(2.0, 2).ceil_mode(true);
        assert_eq!(
            LPPool2d::new(lp.clone()).forward(&x).unwrap().value(),
            x.lp_pool2d(&lp).value()
        );
    }
}
