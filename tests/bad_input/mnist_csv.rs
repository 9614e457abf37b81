//! The MNIST CSV loader on malformed input (the parser is the one digits
//! uses, so these cases check its 784-pixel, `0..=255` instance and the
//! messages that name the source, line and column), and the `Dataset`
//! calls the CNN example adds: an image shape that does not hold a row,
//! normalisation constants that are not usable, a split larger than the
//! dataset.

use std::io::Write;

use retrograd::data::{mnist, Dataset};
use retrograd::Error;

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn row(pixel: &str, label: &str) -> String {
    let mut fields = vec![pixel; mnist::NUM_PIXELS];
    fields.push(label);
    fields.join(",")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// `parse` of the bytes and of their gzip copy must be `Format` errors of
/// `mnist::parse` naming the source and `mentions`.
fn malformed(
    bytes: Vec<u8>,
    mentions: &'static [&'static str],
) -> impl Fn() -> crate::harness::Outcome {
    move || {
        let is_format = |e: &Error| {
            matches!(
                e,
                Error::Format {
                    op: "mnist::parse",
                    ..
                }
            )
        };
        crate::harness::expect_err(mnist::parse(&bytes, "mnist.csv"), is_format, mentions)?;
        crate::harness::expect_err(
            mnist::parse(&gzip(&bytes), "mnist.csv.gz"),
            is_format,
            &["mnist.csv.gz"],
        )
    }
}

pub fn cases(t: &mut Table) {
    let good = row("255", "4");
    t.add(
        "mnist: an empty file",
        malformed(Vec::new(), &["mnist.csv", "no rows"]),
    );
    t.add(
        "mnist: a digits row (65 columns)",
        malformed(
            format!("{},3", vec!["1"; 64].join(",")).into_bytes(),
            &["mnist.csv", "line 1", "expected 785", "found 65"],
        ),
    );
    t.add(
        "mnist: 786 columns on line 3",
        malformed(
            format!("{good}\n{good}\n{good},0\n").into_bytes(),
            &["line 3", "found 786"],
        ),
    );
    t.add(
        "mnist: a pixel of 256",
        malformed(
            row("256", "1").into_bytes(),
            &["line 1", "column 1", "256", "0..=255"],
        ),
    );
    t.add(
        "mnist: a pixel written as a float",
        malformed(row("0.5", "1").into_bytes(), &["column 1", "`0.5`"]),
    );
    t.add(
        "mnist: label 10",
        malformed(
            row("0", "10").into_bytes(),
            &["line 1", "label 10", "0..=9"],
        ),
    );
    t.add(
        "mnist: a missing label",
        malformed(row("0", "").into_bytes(), &["line 1", "column 785"]),
    );
    t.add(
        "mnist: invalid UTF-8 on line 2",
        malformed(
            [good.as_bytes(), b"\n\xff\xfe,1\n"].concat(),
            &["mnist.csv", "line 2"],
        ),
    );
    let rows = format!("{good}\n").repeat(20);
    t.add("mnist: truncated gzip", move || {
        let z = gzip(rows.as_bytes());
        for cut in [2, 10, z.len() / 2, z.len() - 4] {
            expect_err!(
                mnist::parse(&z[..cut], "cut.csv.gz"),
                Error::Format { .. },
                ["cut.csv.gz"]
            )
            .map_err(|e| format!("cut at {cut}: {e}"))?;
        }
        Ok(())
    });
    t.add("mnist: one good row parses as one image", move || {
        let ds = setup(mnist::parse(good.as_bytes(), "one.csv"))?;
        ensure(
            ds.len() == 1 && ds.feature_shape() == [1, 28, 28] && ds.features()[0] == 1.0,
            || format!("{} rows of shape {:?}", ds.len(), ds.feature_shape()),
        )
    });
    t.add("mnist::load: a missing file", || {
        expect_err!(
            mnist::load("/nonexistent/mnist_5k.csv.gz"),
            Error::Io { .. },
            ["mnist::load", "/nonexistent/mnist_5k.csv.gz"]
        )
    });
    for shape in [&[][..], &[1, 28, 27], &[usize::MAX, 2, 2]] {
        t.add(
            format!("Dataset::with_feature_shape: {shape:?} for 784 features"),
            move || {
                let ds = setup(Dataset::new(vec![0.0; 784], 784, vec![0], 1))?;
                expect_err!(
                    ds.with_feature_shape(shape),
                    Error::InvalidArgument { .. },
                    ["Dataset::with_feature_shape", "784"]
                )
            },
        );
    }
    for (mean, std) in [
        (0.0, 0.0),
        (0.0, -0.3),
        (f64::NAN, 0.3),
        (0.1, f64::INFINITY),
    ] {
        t.add(
            format!("Dataset::normalized: mean {mean}, std {std}"),
            move || {
                let ds = setup(Dataset::new(vec![0.5; 2], 1, vec![0, 0], 1))?;
                expect_err!(
                    ds.normalized(mean, std),
                    Error::InvalidArgument { .. },
                    ["Dataset::normalized", "std"]
                )
            },
        );
    }
    t.add(
        "Dataset::shuffled_split: more test examples than exist",
        || {
            let ds = setup(Dataset::new(vec![0.0; 3], 1, vec![0, 0, 0], 1))?;
            expect_err!(
                ds.shuffled_split(4, 0),
                Error::InvalidArgument { .. },
                ["shuffled_split", "4", "3"]
            )
        },
    );
}
