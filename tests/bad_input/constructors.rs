//! Tensor constructors and accessors: wrong data lengths, shapes whose
//! element count or byte size overflows, zero-sized dimensions, `item` on
//! non-scalars, reads with the wrong dtype.

use retrograd::{DType, Error, Tensor};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

/// Shapes no buffer can hold: the element count overflows `usize`, or the
/// byte size overflows `isize::MAX` (what an allocation may ask for).
fn overflowing_shapes() -> Vec<(&'static str, Vec<usize>)> {
    vec![
        ("numel overflows usize", vec![usize::MAX, 2]),
        ("numel overflows usize in rank 3", vec![1 << 32, 1 << 32, 2]),
        ("f64 bytes overflow isize", vec![usize::MAX / 8 + 1]),
        ("bytes overflow isize", vec![1 << 62, 1]),
    ]
}

pub fn cases(t: &mut Table) {
    t.add("from_vec: fewer elements than the shape", || {
        expect_err!(
            Tensor::from_vec(vec![1.0f32; 5], &[2, 3]),
            Error::ElementCount {
                op: "from_vec",
                len: 5,
                ..
            },
            ["from_vec", "5", "[2, 3]"]
        )
    });
    t.add("from_vec: more elements than the shape", || {
        expect_err!(
            Tensor::from_vec(vec![1.0f64; 7], &[2, 3]),
            Error::ElementCount {
                op: "from_vec",
                len: 7,
                ..
            },
            ["from_vec", "7", "[2, 3]"]
        )
    });
    t.add("from_vec: a scalar shape with two elements", || {
        expect_err!(
            Tensor::from_vec(vec![1.0f64, 2.0], &[]),
            Error::ElementCount {
                op: "from_vec",
                len: 2,
                ..
            },
            ["from_vec", "[]"]
        )
    });
    t.add("from_vec: empty data for a scalar shape", || {
        expect_err!(
            Tensor::from_vec(Vec::<f32>::new(), &[]),
            Error::ElementCount {
                op: "from_vec",
                len: 0,
                ..
            },
            ["from_vec"]
        )
    });
    t.add("from_f64_slice: wrong length", || {
        expect_err!(
            Tensor::from_f64_slice(&[1.0, 2.0, 3.0], &[2, 2], DType::F32),
            Error::ElementCount { len: 3, .. },
            ["[2, 2]"]
        )
    });
    t.add("from_vec: overflowing shape", || {
        expect_err!(
            Tensor::from_vec(vec![1.0f32], &[usize::MAX, 3]),
            Error::ShapeOverflow { op: "from_vec", .. },
            ["from_vec", &format!("{}", usize::MAX)]
        )
    });
    for (what, shape) in overflowing_shapes() {
        for dtype in [DType::F32, DType::F64] {
            type Ctor = fn(&[usize], DType) -> retrograd::Result<Tensor>;
            let ctors: [(&str, Ctor); 5] = [
                ("zeros", Tensor::zeros),
                ("ones", Tensor::ones),
                ("full", |s, d| Tensor::full(s, 2.5, d)),
                ("randn", |s, d| Tensor::randn(s, d, 0)),
                ("rand", |s, d| Tensor::rand(s, d, 0)),
            ];
            for (name, ctor) in ctors {
                let shape = shape.clone();
                t.add(format!("{name}: {what} ({dtype}) {shape:?}"), move || {
                    let first = shape[0].to_string();
                    expect_err!(
                        ctor(&shape, dtype),
                        Error::ShapeOverflow { .. },
                        [name, first.as_str()]
                    )
                });
            }
        }
    }
    t.add("arange: more elements than memory can address", || {
        expect_err!(
            Tensor::arange(0.0, 1e300, 1.0, DType::F32),
            Error::ShapeOverflow { op: "arange", .. },
            ["arange"]
        )
    });
    t.add(
        "arange: 10^18 elements, more than the allocator gives",
        || {
            expect_err!(
                Tensor::arange(0.0, 1e18, 1.0, DType::F64),
                Error::ShapeOverflow { op: "arange", .. },
                ["arange"]
            )
        },
    );
    // Addressable in principle (2^60 bytes) but beyond any address space:
    // the allocator refuses, and that is a typed error, not an abort.
    for dtype in [DType::F32, DType::F64] {
        type Ctor = fn(&[usize], DType) -> retrograd::Result<Tensor>;
        let ctors: [(&str, Ctor); 4] = [
            ("zeros", Tensor::zeros),
            ("full", |s, d| Tensor::full(s, -1.0, d)),
            ("randn", |s, d| Tensor::randn(s, d, 0)),
            ("rand", |s, d| Tensor::rand(s, d, 0)),
        ];
        for (name, ctor) in ctors {
            t.add(
                format!("{name}: 2^58 elements ({dtype}), refused by the allocator"),
                move || {
                    expect_err!(
                        ctor(&[1 << 58], dtype),
                        Error::ShapeOverflow { .. },
                        [name, "288230376151711744"]
                    )
                },
            );
        }
    }
    t.add("arange: zero step", || {
        expect_err!(
            Tensor::arange(0.0, 1.0, 0.0, DType::F64),
            Error::InvalidArgument { op: "arange", .. },
            ["arange", "step 0"]
        )
    });
    t.add("arange: NaN bound", || {
        expect_err!(
            Tensor::arange(0.0, f64::NAN, 1.0, DType::F64),
            Error::InvalidArgument { op: "arange", .. },
            ["arange", "NaN"]
        )
    });
    t.add("arange: infinite end", || {
        expect_err!(
            Tensor::arange(0.0, f64::INFINITY, 1.0, DType::F64),
            Error::InvalidArgument { op: "arange", .. },
            ["arange", "inf"]
        )
    });
    t.add(
        "arange: step pointing away from end gives an empty tensor",
        || {
            let r = setup(Tensor::arange(0.0, 5.0, -1.0, DType::F64))?;
            ensure(r.shape() == [0], || format!("shape {:?}", r.shape()))
        },
    );
    t.add("uniform_with: reversed bounds", || {
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
        expect_err!(
            Tensor::uniform_with(&[2], 1.0, 0.0, DType::F32, &mut rng),
            Error::InvalidArgument { op: "uniform", .. },
            ["uniform", "[1, 0)"]
        )
    });
    t.add("uniform_with: NaN bound", || {
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
        expect_err!(
            Tensor::uniform_with(&[2], f64::NAN, 0.0, DType::F32, &mut rng),
            Error::InvalidArgument { op: "uniform", .. },
            ["uniform", "NaN"]
        )
    });
    // Zero-sized dimensions are valid shapes, however large the other dimensions.
    for shape in [
        vec![0],
        vec![3, 0],
        vec![0, usize::MAX],
        vec![usize::MAX, 0, 7],
    ] {
        t.add(
            format!("zeros: zero-sized shape {shape:?} works"),
            move || {
                for dtype in [DType::F32, DType::F64] {
                    let z = setup(Tensor::zeros(&shape, dtype))?;
                    ensure(z.shape() == shape.as_slice() && z.numel() == 0, || {
                        format!("shape {:?}, numel {}", z.shape(), z.numel())
                    })?;
                    let r = setup(Tensor::randn(&shape, dtype, 1))?;
                    ensure(r.numel() == 0, || format!("randn numel {}", r.numel()))?;
                    let v = setup(Tensor::from_vec(Vec::<f32>::new(), &shape))?;
                    ensure(v.to_vec::<f32>() == Ok(vec![]), || "to_vec of empty".into())?;
                }
                Ok(())
            },
        );
    }
    t.add("item: on a vector of two", || {
        expect_err!(
            Tensor::vector(&[1.0f32, 2.0]).try_item(),
            Error::NotAScalar { op: "item", .. },
            ["item", "[2]"]
        )
    });
    t.add("item: on an empty tensor", || {
        expect_err!(
            setup(Tensor::zeros(&[0, 4], DType::F64))?.try_item(),
            Error::NotAScalar { .. },
            ["item", "[0, 4]"]
        )
    });
    t.add("item: a one-element matrix is a documented scalar", || {
        let v = setup(setup(Tensor::from_vec(vec![4.5f32], &[1, 1]))?.try_item())?;
        ensure(v == 4.5, || format!("item {v}"))
    });
    t.add("to_vec: f64 read of an f32 tensor", || {
        expect_err!(
            Tensor::vector(&[1.0f32]).to_vec::<f64>(),
            Error::WrongDType {
                expected: DType::F64,
                found: DType::F32,
                ..
            },
            ["f32", "f64"]
        )
    });
    t.add("to_vec: f32 read of an f64 scalar", || {
        expect_err!(
            Tensor::scalar(1.0f64).to_vec::<f32>(),
            Error::WrongDType {
                expected: DType::F32,
                found: DType::F64,
                ..
            },
            ["f32", "f64"]
        )
    });
    t.add("as_slice: wrong dtype", || {
        expect_err!(
            Tensor::vector(&[1.0f64])
                .as_slice::<f32>()
                .map(|s| s.to_vec()),
            Error::WrongDType { .. },
            ["f32", "f64"]
        )
    });
    t.add("make_mut: wrong dtype", || {
        let mut x = Tensor::vector(&[1.0f32, 2.0]);
        expect_err!(
            x.make_mut::<f64>().map(|s| s.to_vec()),
            Error::WrongDType { .. },
            ["f32", "f64"]
        )
    });
    t.add("Tensor::reshape: wrong element count", || {
        expect_err!(
            Tensor::vector(&[1.0f32; 6]).reshape(&[4, 2]),
            Error::ElementCount { len: 6, .. },
            ["6", "[4, 2]"]
        )
    });
    t.add("Tensor::reshape: overflowing shape", || {
        expect_err!(
            Tensor::vector(&[1.0f32; 6]).reshape(&[usize::MAX, 3]),
            Error::ShapeOverflow { .. },
            ["reshape"]
        )
    });
    t.add(
        "Tensor::reshape: empty to a huge zero-sized shape works",
        || {
            let z = setup(setup(Tensor::zeros(&[0], DType::F32))?.reshape(&[usize::MAX, 0]))?;
            ensure(z.numel() == 0, || format!("numel {}", z.numel()))
        },
    );
    t.add("from_indices: index beyond 2^53", || {
        expect_err!(
            Tensor::from_indices(&[1, (1 << 53) + 1], &[2]),
            Error::IndexOutOfRange {
                op: "from_indices",
                ..
            },
            ["from_indices"]
        )
    });
    t.add("from_indices: wrong shape", || {
        expect_err!(
            Tensor::from_indices(&[1, 2], &[3]),
            Error::ElementCount { len: 2, .. },
            ["[3]"]
        )
    });
}
