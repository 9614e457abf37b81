//! The CNN of `train_mnist_cnn`, shared with the `onnx` example (which
//! rebuilds it to load a checkpoint): per entry of `channels`, a 3x3
//! convolution (no bias when batch norm follows), batch norm, ReLU and 2x2
//! max pooling; then flatten, a `hidden`-wide linear layer, ReLU, dropout
//! (when `dropout > 0`) and the 10-way output layer.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use retrograd::data::mnist;
use retrograd::nn::{
    Activation, BatchNorm2d, Conv2d, Dropout, Flatten, Linear, MaxPool2d, Sequential,
};
use retrograd::ops::nn::{Conv2dOptions, MaxPool2dOptions};
use retrograd::{DType, Result};

/// The model, its weights drawn from a generator seeded with `seed`.
pub fn build(
    channels: &[usize],
    hidden: usize,
    batch_norm: bool,
    dropout: f64,
    seed: u64,
) -> Result<Sequential> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let same = Conv2dOptions::new().padding(1);
    let mut model = Sequential::new();
    let mut in_channels = 1;
    for &out in channels {
        // A convolution followed by batch norm needs no bias of its own.
        model.push(Conv2d::with_bias(
            in_channels,
            out,
            3,
            same,
            !batch_norm,
            DType::F32,
            &mut rng,
        )?);
        if batch_norm {
            model.push(BatchNorm2d::new(out, DType::F32)?);
        }
        model.push(Activation::Relu);
        model.push(MaxPool2d::new(MaxPool2dOptions::new(2)));
        in_channels = out;
    }
    let side = mnist::SIDE >> channels.len();
    model.push(Flatten::new());
    model.push(
        Linear::builder(in_channels * side * side, hidden)
            .dtype(DType::F32)
            .build_with(&mut rng)?,
    );
    model.push(Activation::Relu);
    if dropout > 0.0 {
        model.push(Dropout::new(dropout, seed ^ 0xd0)?);
    }
    model.push(
        Linear::builder(hidden, mnist::NUM_CLASSES)
            .dtype(DType::F32)
            .build_with(&mut rng)?,
    );
    Ok(model)
}
