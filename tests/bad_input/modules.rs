//! nn modules and helpers: forward with the wrong feature size or dtype,
//! bad layer sizes (zero, or too large to allocate), non-integer embedding
//! indices, metric inputs that do not fit, initialiser shapes.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::nn::{
    accuracy, argmax_rows, init, Dropout, Embedding, Forward, LayerNorm, Linear, Mlp, Sequential,
};
use retrograd::{DType, Error, Graph, Tensor};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn rng() -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(0)
}

fn input(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::ones(shape, dtype).unwrap()
}

pub fn cases(t: &mut Table) {
    t.add("Linear: 5 input features into a layer of 4", || {
        let layer = setup(
            Linear::builder(4, 3)
                .dtype(DType::F32)
                .build_with(&mut rng()),
        )?;
        let g = Graph::new();
        let x = g.constant(input(&[2, 5], DType::F32));
        expect_err!(
            layer.forward(&x),
            Error::ShapeMismatch { .. },
            ["[2, 5]", "[3, 4]"]
        )
    });
    t.add("Linear: a 0-d input", || {
        let layer = setup(
            Linear::builder(4, 3)
                .dtype(DType::F32)
                .build_with(&mut rng()),
        )?;
        let g = Graph::new();
        let x = g.constant(Tensor::scalar(1.0f32));
        expect_err!(
            layer.forward(&x),
            Error::InvalidArgument { .. } | Error::ShapeMismatch { .. },
            ["matmul"]
        )
    });
    t.add("Linear: f64 input into f32 weights", || {
        let layer = setup(
            Linear::builder(4, 3)
                .dtype(DType::F32)
                .build_with(&mut rng()),
        )?;
        let g = Graph::new();
        let x = g.constant(input(&[2, 4], DType::F64));
        expect_err!(
            layer.forward(&x),
            Error::DTypeMismatch { .. },
            ["f32", "f64"]
        )
    });
    t.add("Linear: zero features", || {
        expect_err!(
            Linear::builder(0, 3)
                .dtype(DType::F32)
                .build_with(&mut rng()),
            Error::InvalidArgument { .. },
            ["Linear"]
        )
    });
    t.add("Linear: a weight too large to address", || {
        expect_err!(
            Linear::builder(1 << 31, 1 << 31)
                .dtype(DType::F32)
                .build_with(&mut rng()),
            Error::ShapeOverflow { .. },
            ["2147483648"]
        )
    });
    t.add("Linear: a weight whose element count overflows", || {
        expect_err!(
            Linear::builder(usize::MAX, 2)
                .dtype(DType::F64)
                .build_with(&mut rng()),
            Error::ShapeOverflow { .. },
            [&usize::MAX.to_string()]
        )
    });
    t.add("Linear: an empty batch gives an empty output", || {
        let layer = setup(
            Linear::builder(4, 3)
                .dtype(DType::F32)
                .build_with(&mut rng()),
        )?;
        let g = Graph::new();
        let x = g.constant(input(&[0, 4], DType::F32));
        let y = setup(layer.forward(&x))?;
        ensure(y.shape() == [0, 3], || format!("shape {:?}", y.shape()))
    });
    t.add("Mlp: one size only", || {
        expect_err!(
            Mlp::builder(&[64]).build().map(|_| ()),
            Error::InvalidArgument { .. },
            ["Mlp", "[64]"]
        )
    });
    t.add("Mlp: a zero-sized hidden layer", || {
        expect_err!(
            Mlp::builder(&[4, 0, 2]).build().map(|_| ()),
            Error::InvalidArgument { .. },
            ["Linear"]
        )
    });
    t.add("Mlp: dropout 1.5", || {
        expect_err!(
            Mlp::builder(&[4, 3, 2]).dropout(1.5).build().map(|_| ()),
            Error::InvalidArgument { .. },
            ["1.5"]
        )
    });
    t.add("Mlp: 10 features into a 64-input network", || {
        let mlp = setup(Mlp::builder(&[64, 8, 10]).build())?;
        let g = Graph::new();
        let x = g.constant(input(&[3, 10], DType::F32));
        expect_err!(
            mlp.forward(&x),
            Error::ShapeMismatch { .. },
            ["[3, 10]", "[8, 64]"]
        )
    });
    t.add("Sequential: an empty stack is the identity", || {
        let g = Graph::new();
        let x = g.constant(input(&[2], DType::F32));
        let y = setup(Sequential::new().forward(&x))?;
        ensure(y.value() == x.value(), || "identity".into())
    });
    t.add("Embedding: a fractional index", || {
        let e = setup(
            Embedding::builder(3, 2)
                .dtype(DType::F32)
                .build_with(&mut rng()),
        )?;
        let g = Graph::new();
        let x = g.constant(Tensor::vector(&[0.0f32, 1.5]));
        expect_err!(
            e.forward(&x),
            Error::InvalidArgument { .. },
            ["Embedding", "1.5"]
        )
    });
    for bad in [3.0f32, -1.0, f32::NAN, f32::INFINITY] {
        t.add(format!("Embedding: index {bad} of 3 rows"), move || {
            let e = setup(
                Embedding::builder(3, 2)
                    .dtype(DType::F32)
                    .build_with(&mut rng()),
            )?;
            let g = Graph::new();
            let x = g.constant(Tensor::vector(&[bad]));
            expect_err!(
                e.forward(&x),
                Error::InvalidArgument { .. } | Error::IndexOutOfRange { .. },
                ["Embedding", &bad.to_string()]
            )
        });
    }
    t.add("Embedding: zero rows", || {
        expect_err!(
            Embedding::builder(0, 2)
                .dtype(DType::F32)
                .build_with(&mut rng())
                .map(|_| ()),
            Error::InvalidArgument { .. },
            ["Embedding"]
        )
    });
    t.add("Embedding: padding index out of range", || {
        expect_err!(
            Embedding::builder(3, 2)
                .padding_idx(Some(3))
                .dtype(DType::F32)
                .build_with(&mut rng())
                .map(|_| ()),
            Error::IndexOutOfRange { .. } | Error::InvalidArgument { .. },
            ["Embedding", "3"]
        )
    });
    t.add("LayerNorm: an input whose last dimension differs", || {
        let ln = setup(LayerNorm::new(&[4], DType::F32))?;
        let g = Graph::new();
        let x = g.constant(input(&[2, 3], DType::F32));
        expect_err!(
            ln.forward(&x),
            Error::ShapeMismatch { .. } | Error::InvalidArgument { .. },
            ["layer_norm", "[2, 3]", "[4]"]
        )
    });
    t.add(
        "LayerNorm: an input of lower rank than the normalized shape",
        || {
            let ln = setup(LayerNorm::new(&[2, 3], DType::F32))?;
            let g = Graph::new();
            let x = g.constant(input(&[3], DType::F32));
            expect_err!(
                ln.forward(&x),
                Error::ShapeMismatch { .. } | Error::InvalidArgument { .. },
                ["layer_norm", "[3]", "[2, 3]"]
            )
        },
    );
    t.add("LayerNorm: an empty normalized shape", || {
        expect_err!(
            LayerNorm::new(&[], DType::F32).map(|_| ()),
            Error::InvalidArgument { .. },
            ["LayerNorm"]
        )
    });
    t.add("LayerNorm: a negative eps", || {
        expect_err!(
            LayerNorm::with_options(&[3], -1.0, true, DType::F32).map(|_| ()),
            Error::InvalidArgument { .. },
            ["LayerNorm", "eps"]
        )
    });
    t.add("Dropout: p = 1 for a layer", || {
        expect_err!(
            Dropout::new(1.0, 0).map(|_| ()),
            Error::InvalidArgument { .. },
            ["Dropout"]
        )
    });
    t.add("argmax_rows: a vector", || {
        expect_err!(
            argmax_rows(&Tensor::vector(&[1.0, 2.0])),
            Error::InvalidArgument { .. },
            ["argmax_rows", "[2]"]
        )
    });
    t.add("argmax_rows: rows without columns", || {
        expect_err!(
            argmax_rows(&input(&[3, 0], DType::F32)),
            Error::InvalidArgument { .. },
            ["argmax_rows"]
        )
    });
    t.add("accuracy: fewer labels than rows", || {
        expect_err!(
            accuracy(&input(&[3, 2], DType::F32), &[0, 1]),
            Error::InvalidArgument { .. },
            ["accuracy"]
        )
    });
    t.add(
        "accuracy: no rows is NaN or an error, not a panic",
        || match accuracy(&input(&[0, 2], DType::F32), &[]) {
            Ok(v) => ensure(v.is_nan() || v == 0.0, || format!("accuracy {v}")),
            Err(e) => crate::harness::check_error(
                &e,
                |e| matches!(e, Error::InvalidArgument { .. }),
                &["accuracy"],
            ),
        },
    );
    t.add("init::fans: a vector", || {
        expect_err!(
            init::fans(&[3]),
            Error::InvalidArgument { .. },
            ["init::fans", "[3]"]
        )
    });
    t.add("init::fans: dimensions whose product overflows", || {
        expect_err!(
            init::fans(&[2, 2, usize::MAX, 2]),
            Error::ShapeOverflow { .. },
            ["init::fans"]
        )
    });
    t.add("init::kaiming_uniform: a zero fan", || {
        expect_err!(
            init::kaiming_uniform(
                &[3, 0],
                init::FanMode::FanIn,
                init::Nonlinearity::Relu,
                DType::F32,
                &mut rng()
            ),
            Error::InvalidArgument { .. },
            ["init", "[3, 0]"]
        )
    });
    t.add("init::normal: a negative std", || {
        expect_err!(
            init::normal(&[2], 0.0, -1.0, DType::F32, &mut rng()),
            Error::InvalidArgument { .. },
            ["init::normal", "-1"]
        )
    });
    t.add("init::uniform: NaN bounds", || {
        expect_err!(
            init::uniform(&[2], f64::NAN, 1.0, DType::F32, &mut rng()),
            Error::InvalidArgument { .. },
            ["uniform"]
        )
    });
}
