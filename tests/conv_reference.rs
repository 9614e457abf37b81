//! The convolutions against PyTorch float64: outputs and input, weight and
//! bias gradients of 19 conv1d / conv2d / conv_transpose2d configurations
//! (table: `tests/reference/conv_cases.rs`, written by
//! `tests/reference/conv_reference.py`), within 1e-12 relative.

#[path = "reference/conv_cases.rs"]
mod conv_cases;

use conv_cases::{bias_value, input_value, out_weight, values, weight_value, CasePadding, CASES};
use retrograd::ops::nn::{Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions, Padding};
use retrograd::{DType, Graph, Tensor};

fn t(shape: &[usize], f: fn(usize) -> f64) -> Tensor {
    Tensor::from_f64_slice(&values(shape.iter().product(), f), shape, DType::F64).unwrap()
}

fn close(name: &str, what: &str, got: &[f64], want: &[f64]) -> usize {
    assert_eq!(got.len(), want.len(), "{name}: {what} length");
    let mut bad = 0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if (g - w).abs() > 1e-12 * (1.0 + w.abs()) {
            if bad < 3 {
                eprintln!("{name}: {what}[{i}]: ours {g}, PyTorch {w}");
            }
            bad += 1;
        }
    }
    bad
}

#[test]
fn against_pytorch() {
    let mut failures = 0;
    for c in CASES {
        let g = Graph::new();
        let x = g.variable(t(c.input_shape, input_value));
        let w = g.variable(t(c.weight_shape, weight_value));
        let c_out = if c.op == "conv_transpose2d" {
            c.weight_shape[1] * c.groups
        } else {
            c.weight_shape[0]
        };
        let b = c.has_bias.then(|| g.variable(t(&[c_out], bias_value)));
        let out = match c.op {
            "conv1d" => {
                let pad = match c.padding {
                    CasePadding::Explicit(p) => Padding::Explicit([p[0]]),
                    CasePadding::Same => Padding::Same,
                    CasePadding::Valid => Padding::Valid,
                };
                let o = Conv1dOptions::new()
                    .stride([c.stride[0]])
                    .padding(pad)
                    .dilation([c.dilation[0]])
                    .groups(c.groups);
                x.try_conv1d(&w, b.as_ref(), &o)
            }
            "conv2d" => {
                let pad = match c.padding {
                    CasePadding::Explicit(p) => Padding::Explicit([p[0], p[1]]),
                    CasePadding::Same => Padding::Same,
                    CasePadding::Valid => Padding::Valid,
                };
                let o = Conv2dOptions::new()
                    .stride([c.stride[0], c.stride[1]])
                    .padding(pad)
                    .dilation([c.dilation[0], c.dilation[1]])
                    .groups(c.groups);
                x.try_conv2d(&w, b.as_ref(), &o)
            }
            _ => {
                let CasePadding::Explicit(p) = c.padding else {
                    panic!()
                };
                let o = ConvTranspose2dOptions::new()
                    .stride([c.stride[0], c.stride[1]])
                    .padding([p[0], p[1]])
                    .output_padding([c.output_padding[0], c.output_padding[1]])
                    .dilation([c.dilation[0], c.dilation[1]])
                    .groups(c.groups);
                x.try_conv_transpose2d(&w, b.as_ref(), &o)
            }
        };
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{}: error {e}", c.name);
                failures += 1;
                continue;
            }
        };
        if out.value().shape() != c.out_shape {
            eprintln!(
                "{}: shape {:?} vs {:?}",
                c.name,
                out.value().shape(),
                c.out_shape
            );
            failures += 1;
            continue;
        }
        let lw = g.constant(t(c.out_shape, out_weight));
        let loss = out.try_mul(&lw).unwrap().sum();
        let grads = loss.backward().unwrap();
        let mut bad = close(c.name, "out", &out.value().to_f64_vec(), c.out);
        bad += close(
            c.name,
            "grad_input",
            &grads.wrt(&x).to_f64_vec(),
            c.grad_input,
        );
        bad += close(
            c.name,
            "grad_weight",
            &grads.wrt(&w).to_f64_vec(),
            c.grad_weight,
        );
        if let Some(b) = &b {
            bad += close(c.name, "grad_bias", &grads.wrt(b).to_f64_vec(), c.grad_bias);
        }
        if bad > 0 {
            failures += 1;
        }
    }
    assert_eq!(failures, 0, "{failures} of {} cases disagree", CASES.len());
}
