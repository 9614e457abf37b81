//! Text data: characters outside a tokenizer's vocabulary, token ids out of
//! range, broken tokenizer metadata, bad split fractions, text that is not
//! UTF-8 or not valid gzip, reserved checkpoint metadata keys.

use std::collections::BTreeMap;

use retrograd::data::{shakespeare, train_val_split, CharTokenizer};
use retrograd::io::{checkpoint_metadata, save_checkpoint_with_metadata};
use retrograd::nn::Parameter;
use retrograd::{Error, Tensor};

use crate::expect_err;
use crate::harness::{ensure, Table};

pub fn cases(t: &mut Table) {
    let tok = || CharTokenizer::from_text("abc\n");
    t.add("CharTokenizer::encode: unknown character", move || {
        expect_err!(
            tok().encode("ab\nz"),
            Error::UnknownCharacter {
                character: 'z',
                position: 3,
                ..
            },
            ["CharTokenizer::encode", "'z'", "position 3"]
        )
    });
    for id in [4i64, -1, i64::MIN] {
        t.add(format!("CharTokenizer::decode: id {id}"), move || {
            expect_err!(
                tok().decode(&[0, id]),
                Error::IndexOutOfRange { index, size: 4, .. } if *index == id,
                ["CharTokenizer::decode", &id.to_string()]
            )
        });
    }
    for (what, meta) in [
        ("no tag", "abc"),
        ("empty", "retrograd.char_tokenizer.v1:"),
        ("unsorted", "retrograd.char_tokenizer.v1:cab"),
        ("repeat", "retrograd.char_tokenizer.v1:aab"),
        ("other version", "retrograd.char_tokenizer.v9:abc"),
    ] {
        t.add(format!("CharTokenizer::from_metadata: {what}"), move || {
            expect_err!(
                CharTokenizer::from_metadata(meta),
                Error::Format { .. },
                ["CharTokenizer::from_metadata"]
            )
        });
    }
    for f in [-0.1, 1.5, f64::NAN] {
        t.add(format!("train_val_split: fraction {f}"), move || {
            expect_err!(
                train_val_split(&[1, 2, 3], f),
                Error::InvalidArgument {
                    op: "train_val_split",
                    ..
                },
                ["train_fraction", &f.to_string()]
            )
        });
    }
    t.add("shakespeare::parse: not UTF-8", || {
        expect_err!(
            shakespeare::parse(&[b'a', 0xc3], "t.txt"),
            Error::Format { .. },
            ["shakespeare::parse", "t.txt", "UTF-8"]
        )
    });
    t.add("shakespeare::parse: truncated gzip", || {
        expect_err!(
            shakespeare::parse(&[0x1f, 0x8b, 8, 0, 0, 0], "t.gz"),
            Error::Format { .. },
            ["shakespeare::parse", "t.gz", "gzip"]
        )
    });
    t.add("save_checkpoint_with_metadata: reserved key", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("c.safetensors");
        let model = [("w".to_string(), Parameter::new(Tensor::scalar(1.0)))];
        let meta = BTreeMap::from([("optimizer.lr".to_string(), "1".to_string())]);
        expect_err!(
            save_checkpoint_with_metadata(&path, &model, None, &meta),
            Error::InvalidArgument { .. },
            ["save_checkpoint_with_metadata", "optimizer.lr", "reserved"]
        )?;
        ensure(!path.exists(), || "a file was written".into())
    });
    t.add("checkpoint_metadata: missing file", || {
        expect_err!(
            checkpoint_metadata("/no/such/checkpoint.safetensors"),
            Error::Io { .. },
            ["/no/such/checkpoint.safetensors"]
        )
    });
}
