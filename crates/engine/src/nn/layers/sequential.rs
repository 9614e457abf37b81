//! [`Sequential`]: modules applied one after another.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::nn::{join_name, Buffer, Forward, Module, Parameter, RandomStream};

/// Modules applied in order, the output of each the input of the next.
/// Parameters are named by position, as in PyTorch (`"0.weight"`, ...).
///
/// ```
/// use retrograd::{Graph, Tensor, nn::{Activation, Forward, Module, Sequential}};
/// let model = Sequential::new().with(Activation::Tanh).with(Activation::Relu);
/// let g = Graph::new();
/// let y = model.forward(&g.constant(Tensor::from_vec(vec![-1.0, 1.0], &[2])?))?;
/// assert_eq!(y.value().to_f64_vec(), vec![0.0, 1f64.tanh()]);
/// assert_eq!(model.len(), 2);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Forward>>,
}

impl Sequential {
    /// An empty sequence (the identity).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `layer` and returns the sequence (builder style).
    pub fn with(mut self, layer: impl Forward + 'static) -> Self {
        self.push(layer);
        self
    }

    /// Appends `layer`.
    pub fn push(&mut self, layer: impl Forward + 'static) {
        self.layers.push(Box::new(layer));
    }

    /// Appends an already boxed layer.
    pub fn push_boxed(&mut self, layer: Box<dyn Forward>) {
        self.layers.push(layer);
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[Box<dyn Forward>] {
        &self.layers
    }
}

impl Module for Sequential {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_parameters(&join_name(prefix, &i.to_string()), f);
        }
    }

    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_buffers(&join_name(prefix, &i.to_string()), f);
        }
    }

    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_random_streams(&join_name(prefix, &i.to_string()), f);
        }
    }

    fn set_training(&mut self, training: bool) {
        for layer in &mut self.layers {
            layer.set_training(training);
        }
    }
}

impl Forward for Sequential {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, Tensor};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// `x * w` with one parameter, to check naming and training propagation.
    struct ScaleBy {
        w: Parameter,
        training: Arc<AtomicBool>,
    }

    impl Forward for ScaleBy {
        fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
            x.try_mul(&x.graph().param(&self.w))
        }
    }

    impl Module for ScaleBy {
        fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
            f(&join_name(prefix, "w"), &self.w)
        }
        fn set_training(&mut self, training: bool) {
            self.training.store(training, Ordering::Relaxed);
        }
    }

    fn scale(v: f64) -> ScaleBy {
        ScaleBy {
            w: Parameter::new(Tensor::scalar(v)),
            training: Arc::new(AtomicBool::new(true)),
        }
    }

    #[test]
    fn names_nest_by_position_and_gradients_reach_every_layer() {
        let inner = Sequential::new().with(scale(2.0)).with(scale(3.0));
        let model = Sequential::new().with(scale(5.0)).with(inner);
        let names: Vec<String> = model.parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["0.w", "1.0.w", "1.1.w"]);
        assert_eq!(model.num_parameters(), 3);
        let g = Graph::new();
        let y = model.forward(&g.constant(Tensor::scalar(1.0))).unwrap();
        assert_eq!(y.value().item(), 30.0);
        let grads = y.backward().unwrap();
        let got: Vec<f64> = model
            .parameters()
            .iter()
            .map(|(_, p)| grads.of(p).item())
            .collect();
        assert_eq!(got, [6.0, 15.0, 10.0]);
    }

    #[test]
    fn state_dict_round_trip_through_the_trait() {
        let model = Sequential::new().with(scale(2.0)).with(scale(3.0));
        let saved = model.state_dict();
        model.parameters()[0].1.set(Tensor::scalar(9.0)).unwrap();
        model.load_state_dict(&saved).unwrap();
        assert_eq!(model.parameters()[0].1.value().item(), 2.0);
    }

    #[test]
    fn training_mode_reaches_nested_layers() {
        let (a, b) = (scale(1.0), scale(1.0));
        let (fa, fb) = (a.training.clone(), b.training.clone());
        let mut model = Sequential::new().with(a).with(Sequential::new().with(b));
        model.set_training(false);
        assert!(!fa.load(Ordering::Relaxed) && !fb.load(Ordering::Relaxed));
        model.set_training(true);
        assert!(fa.load(Ordering::Relaxed) && fb.load(Ordering::Relaxed));
    }
}
