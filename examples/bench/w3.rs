//! W3: convolutional networks, f32.
//!
//! - `w3`: one training step of model C1 (Conv2d(1,16,5,p2)-ReLU-MaxPool2 ->
//!   Conv2d(16,32,5,p2)-ReLU-MaxPool2 -> Flatten -> Linear(1568,128)-ReLU ->
//!   Linear(128,10); cross-entropy; Adam lr 1e-3) at batch 64 and 256 on
//!   fixed-seed normal inputs and labels. Median ms per step.
//! - `w3_conv`: a 3x3 conv2d, 64 -> 64 channels, padding 1, batch 32, 32x32
//!   images: forward and backward (gradients of the output's sum with
//!   respect to input and weight). Median ms.

use retrograd::ops::nn::Conv2dOptions;
use retrograd::{DType, Graph, Tensor};

use crate::report::{emit, time, Value};
use crate::Options;

pub fn run_conv(opts: &Options) {
    let (batch, size) = if opts.quick { (2, 8) } else { (32, 32) };
    let x = Tensor::randn(&[batch, 64, size, size], DType::F32, 1).expect("valid shape");
    let w = Tensor::randn(&[64, 64, 3, 3], DType::F32, 2).expect("valid shape");
    let conv = Conv2dOptions::new().padding(1);
    let pass = || {
        let g = Graph::new();
        let (xv, wv) = (g.variable(x.clone()), g.variable(w.clone()));
        let y = xv.conv2d(&wv, None, &conv);
        let grads = y.sum().backward().expect("backward");
        std::hint::black_box((grads.wrt(&xv), grads.wrt(&wv)));
    };
    pass();
    let stats = time(opts.repeats.max(3) * 2, pass);
    let flops = 3.0 * 2.0 * (batch * 64 * size * size * 64 * 9) as f64;
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", "w3_conv".into()),
            ("batch", batch.into()),
            ("unit", "ms_fwd_bwd".into()),
            ("gflops", Value::Num(flops / stats.median / 1e9)),
        ],
        Some(stats),
    );
}
