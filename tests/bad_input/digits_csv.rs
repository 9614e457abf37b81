//! The digits CSV loader on malformed input: wrong column counts,
//! non-numeric fields, pixels and labels out of range, empty files,
//! truncated or corrupt gzip, invalid UTF-8; and `Dataset`/`Batches`
//! construction with bad arguments.

use std::io::Write;

use retrograd::data::{digits, Batches, Dataset};
use retrograd::{DType, Error};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn row(pixel: &str, label: &str) -> String {
    let mut fields = vec![pixel; 64];
    fields.push(label);
    fields.join(",")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// `parse` must be a `Format` error naming the source and `mentions`.
fn malformed(
    bytes: Vec<u8>,
    mentions: &'static [&'static str],
) -> impl Fn() -> crate::harness::Outcome {
    move || {
        let r = digits::parse(&bytes, "test.csv");
        crate::harness::expect_err(r, |e| matches!(e, Error::Format { .. }), mentions)?;
        crate::harness::expect_err(
            digits::parse(&gzip(&bytes), "test.csv.gz"),
            |e| matches!(e, Error::Format { .. }),
            &["test.csv.gz"],
        )
    }
}

pub fn cases(t: &mut Table) {
    let good = row("3", "7");
    t.add(
        "digits: an empty file",
        malformed(Vec::new(), &["test.csv", "no rows"]),
    );
    t.add(
        "digits: blank lines only",
        malformed(b"\n\n  \n".to_vec(), &["test.csv", "no rows"]),
    );
    t.add(
        "digits: 64 columns",
        malformed(
            vec!["1"; 64].join(",").into_bytes(),
            &["test.csv", "line 1", "found 64"],
        ),
    );
    t.add(
        "digits: 66 columns on line 2",
        malformed(
            format!("{good}\n{good},1").into_bytes(),
            &["line 2", "found 66"],
        ),
    );
    t.add(
        "digits: a trailing comma",
        malformed(format!("{good},").into_bytes(), &["line 1", "found 66"]),
    );
    t.add(
        "digits: a non-numeric pixel",
        malformed(row("x", "1").into_bytes(), &["line 1", "column 1", "`x`"]),
    );
    t.add(
        "digits: an empty field",
        malformed(row("", "1").into_bytes(), &["line 1", "column 1"]),
    );
    t.add(
        "digits: a negative pixel",
        malformed(row("-1", "1").into_bytes(), &["column 1", "`-1`"]),
    );
    t.add(
        "digits: a fractional pixel",
        malformed(row("1.5", "1").into_bytes(), &["column 1", "`1.5`"]),
    );
    t.add(
        "digits: a pixel of 17",
        malformed(row("17", "1").into_bytes(), &["column 1", "17", "0..=16"]),
    );
    t.add(
        "digits: a pixel beyond u32",
        malformed(row("99999999999999999999", "1").into_bytes(), &["column 1"]),
    );
    t.add(
        "digits: label 10",
        malformed(row("1", "10").into_bytes(), &["line 1", "label 10"]),
    );
    t.add(
        "digits: label -1",
        malformed(row("1", "-1").into_bytes(), &["line 1", "column 65"]),
    );
    t.add(
        "digits: a NaN label",
        malformed(row("1", "NaN").into_bytes(), &["column 65", "`NaN`"]),
    );
    t.add(
        "digits: invalid UTF-8",
        malformed(vec![0xff, 0xfe, b',', b'1'], &["test.csv", "line 1"]),
    );
    t.add(
        "digits: a header row",
        malformed(
            format!(
                "{}\n{good}",
                (0..65)
                    .map(|i| format!("c{i}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
            .into_bytes(),
            &["line 1", "`c0`"],
        ),
    );
    let two_rows = format!("{good}\n{good}\n");
    t.add("digits: truncated gzip", move || {
        let z = gzip(two_rows.repeat(50).as_bytes());
        for cut in [2, 10, z.len() / 2, z.len() - 4] {
            expect_err!(
                digits::parse(&z[..cut], "cut.csv.gz"),
                Error::Format { .. },
                ["cut.csv.gz"]
            )
            .map_err(|e| format!("cut at {cut}: {e}"))?;
        }
        Ok(())
    });
    t.add("digits: gzip magic then garbage", || {
        let bytes = [0x1f, 0x8b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        expect_err!(
            digits::parse(&bytes, "bad.gz"),
            Error::Format { .. },
            ["bad.gz"]
        )
    });
    t.add("digits: CRLF line endings and spaces parse", move || {
        let ds = setup(digits::parse(
            format!(" {good} \r\n{good}\r\n").as_bytes(),
            "crlf.csv",
        ))?;
        ensure(ds.len() == 2 && ds.labels() == [7, 7], || {
            format!("{} rows", ds.len())
        })
    });
    t.add("digits::load: a missing file", || {
        expect_err!(
            digits::load("/nonexistent/digits.csv"),
            Error::Io { .. },
            ["digits::load", "/nonexistent/digits.csv"]
        )
    });
    t.add("Dataset::new: features that do not make whole rows", || {
        expect_err!(
            Dataset::new(vec![0.0; 5], 2, vec![0, 1], 2),
            Error::InvalidArgument { .. },
            ["Dataset::new", "5"]
        )
    });
    t.add("Dataset::new: zero features", || {
        expect_err!(
            Dataset::new(vec![], 0, vec![0], 2),
            Error::InvalidArgument { .. },
            ["Dataset::new"]
        )
    });
    t.add(
        "Dataset::new: a row count times feature count that overflows",
        || {
            expect_err!(
                Dataset::new(vec![0.0; 4], usize::MAX / 2 + 1, vec![0, 0], 2),
                Error::InvalidArgument { .. },
                ["Dataset::new"]
            )
        },
    );
    t.add("Dataset::new: a label out of range", || {
        expect_err!(
            Dataset::new(vec![0.0; 2], 1, vec![0, 3], 3),
            Error::IndexOutOfRange {
                index: 3,
                size: 3,
                ..
            },
            ["Dataset::new"]
        )
    });
    t.add("Dataset::subset: an index out of range", || {
        let ds = setup(Dataset::new(vec![0.0; 2], 1, vec![0, 1], 2))?;
        expect_err!(
            ds.subset(&[0, 5]),
            Error::IndexOutOfRange {
                index: 5,
                size: 2,
                ..
            },
            ["5"]
        )
    });
    for f in [-0.1, 1.5, f64::NAN] {
        t.add(
            format!("Dataset::stratified_split: test fraction {f}"),
            move || {
                let ds = setup(Dataset::new(vec![0.0; 4], 1, vec![0, 1, 0, 1], 2))?;
                expect_err!(
                    ds.stratified_split(f, 0),
                    Error::InvalidArgument { .. },
                    ["stratified_split"]
                )
            },
        );
    }
    t.add("Batches: batch size 0", || {
        let ds = setup(Dataset::new(vec![0.0; 2], 1, vec![0, 1], 2))?;
        expect_err!(
            Batches::sequential(&ds, 0, DType::F32).map(|b| b.num_batches()),
            Error::InvalidArgument { .. },
            ["Batches", "batch_size"]
        )
    });
    t.add(
        "Batches: a batch size larger than the dataset gives one batch",
        || {
            let ds = setup(Dataset::new(vec![0.0; 2], 1, vec![0, 1], 2))?;
            let n = setup(Batches::sequential(&ds, usize::MAX, DType::F32))?.count();
            ensure(n == 1, || format!("{n} batches"))
        },
    );
}
