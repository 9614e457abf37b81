//! Checkpoint and safetensors loading of broken files: missing, empty,
//! truncated, garbage, a huge declared header, foreign dtypes, wrong shapes,
//! missing and unexpected tensors, the wrong optimizer. Every one is a typed
//! error naming the file (and the tensor, where one is at fault).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use retrograd::io::{load_checkpoint, load_tensors, save_checkpoint, save_tensors};
use retrograd::nn::{load_state_dict, Parameter, StateDict};
use retrograd::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use retrograd::{DType, Error, Tensor, TensorProblem};

use crate::expect_err;
use crate::harness::{setup, Outcome, Table};

fn params() -> Vec<(String, Parameter)> {
    vec![
        (
            "w".to_string(),
            Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap()),
        ),
        (
            "b".to_string(),
            Parameter::new(Tensor::vector(&[0.5f32, -0.5])),
        ),
    ]
}

/// A safetensors file from a JSON header and data bytes, as another tool might write it.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// A file that `save_checkpoint` wrote for `params()` (with Adam state when asked).
fn good_checkpoint(dir: &Path, with_adam: bool) -> Result<(PathBuf, Vec<u8>), String> {
    let path = dir.join("good.safetensors");
    let ps = params();
    if with_adam {
        let mut opt = setup(Adam::new(ps.clone(), AdamConfig::default()))?;
        let g = retrograd::Graph::new();
        let loss = g.param(&ps[0].1).sum() + g.param(&ps[1].1).sum();
        setup(opt.step(&setup(loss.backward())?))?;
        setup(save_checkpoint(&path, &ps, Some(&opt)))?;
    } else {
        setup(save_checkpoint(&path, &ps, None))?;
    }
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    Ok((path, bytes))
}

/// Writes `bytes` to a fresh file and expects both loaders to give a
/// `Format` error naming the file.
fn broken(bytes: Vec<u8>) -> Outcome {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("broken.safetensors");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    let name = "broken.safetensors";
    expect_err!(load_tensors(&path), Error::Format { .. }, [name])?;
    expect_err!(
        load_checkpoint(&path, &params(), None),
        Error::Format { .. },
        [name]
    )
}

pub fn cases(t: &mut Table) {
    t.add("load_checkpoint: a missing file", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("absent.safetensors");
        expect_err!(
            load_checkpoint(&path, &params(), None),
            Error::Io { .. },
            ["absent.safetensors"]
        )
    });
    t.add("load_checkpoint: a directory", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        expect_err!(
            load_checkpoint(dir.path(), &params(), None),
            Error::Io { .. },
            ["load"]
        )
    });
    t.add("save_checkpoint: into a missing directory", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("no/such/dir/x.safetensors");
        expect_err!(
            save_checkpoint(&path, &params(), None),
            Error::Io { .. },
            ["x.safetensors"]
        )
    });
    t.add("save_checkpoint: a path that is a directory", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        expect_err!(
            save_checkpoint(dir.path(), &params(), None),
            Error::Io { .. },
            ["save"]
        )
    });
    t.add("save_checkpoint: two parameters with one name", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut ps = params();
        ps[1].0 = "w".into();
        expect_err!(
            save_checkpoint(dir.path().join("x"), &ps, None),
            Error::InvalidArgument { .. },
            ["save_checkpoint", "`w`"]
        )
    });
    t.add("save_checkpoint: a name with the optimizer prefix", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut ps = params();
        ps[1].0 = format!("{}x", retrograd::io::OPTIMIZER_PREFIX);
        expect_err!(
            save_checkpoint(dir.path().join("x"), &ps, None),
            Error::InvalidArgument { .. },
            ["save_checkpoint", "reserved"]
        )
    });
    t.add("load_checkpoint: an empty file", || broken(Vec::new()));
    t.add("load_checkpoint: seven bytes", || broken(vec![1; 7]));
    t.add("load_checkpoint: garbage", || {
        broken(b"this is not a safetensors file at all".to_vec())
    });
    t.add("load_checkpoint: a header length of u64::MAX", || {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        broken(bytes)
    });
    t.add(
        "load_checkpoint: a header length past the end of the file",
        || {
            let mut bytes = (1u64 << 30).to_le_bytes().to_vec();
            bytes.extend_from_slice(b"{\"w\":{}}");
            broken(bytes)
        },
    );
    t.add("load_checkpoint: a header that is not JSON", || {
        broken(raw_file("{not json", &[]))
    });
    t.add("load_checkpoint: deeply nested JSON in the header", || {
        let header = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        broken(raw_file(&header, &[]))
    });
    t.add("load_checkpoint: every truncation of a good file", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (_, bytes) = good_checkpoint(dir.path(), true)?;
        // Every length that cuts the header or the data (a cut in the
        // trailing padding of the header would still parse).
        for len in (0..bytes.len()).step_by(7) {
            let path = dir.path().join("cut.safetensors");
            std::fs::write(&path, &bytes[..len]).map_err(|e| e.to_string())?;
            expect_err!(
                load_checkpoint(&path, &params(), None),
                Error::Format { .. },
                ["cut.safetensors"]
            )
            .map_err(|e| format!("cut at {len} of {}: {e}", bytes.len()))?;
        }
        Ok(())
    });
    t.add("load_checkpoint: an I32 tensor", || {
        let header = r#"{"w":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}"#;
        broken(raw_file(header, &[0; 16]))
    });
    t.add("load_checkpoint: an unknown dtype name", || {
        let header = r#"{"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}"#;
        broken(raw_file(header, &[0; 2]))
    });
    t.add(
        "load_checkpoint: data offsets that disagree with the shape",
        || {
            let header = r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#;
            broken(raw_file(header, &[0; 12]))
        },
    );
    t.add("load_checkpoint: data offsets past the end", || {
        let header = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        broken(raw_file(header, &[0; 8]))
    });
    t.add(
        "load_checkpoint: a shape whose element count overflows",
        || {
            let header = format!(
                r#"{{"w":{{"dtype":"F64","shape":[{},{}],"data_offsets":[0,8]}}}}"#,
                u64::MAX,
                u64::MAX
            );
            broken(raw_file(&header, &[0; 8]))
        },
    );
    t.add(
        "load_checkpoint: a huge shape with a zero-sized dimension and no data",
        || {
            // A valid file: zero elements. It is not a retrograd checkpoint, so
            // load_checkpoint refuses it; load_tensors reads it.
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let path = dir.path().join("zero.safetensors");
            let header = format!(
                r#"{{"w":{{"dtype":"F32","shape":[{},0],"data_offsets":[0,0]}}}}"#,
                u64::MAX
            );
            std::fs::write(&path, raw_file(&header, &[])).map_err(|e| e.to_string())?;
            let file = load_tensors(&path);
            match &file {
                Ok(f) if f.tensors["w"].numel() == 0 => {}
                Err(Error::Format { .. }) => {}
                other => return Err(format!("unexpected {}", crate::harness::short_debug(other))),
            }
            expect_err!(
                load_checkpoint(&path, &params(), None),
                Error::Format { .. },
                ["not a retrograd checkpoint"]
            )
        },
    );
    t.add(
        "load_checkpoint: a safetensors file from another tool",
        || {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let path = dir.path().join("other.safetensors");
            let mut tensors = StateDict::new();
            tensors.insert("w".into(), Tensor::vector(&[1.0f32]));
            setup(save_tensors(&path, &tensors, &BTreeMap::new()))?;
            expect_err!(
                load_checkpoint(&path, &params(), None),
                Error::Format { .. },
                ["other.safetensors", "not a retrograd checkpoint"]
            )
        },
    );
    t.add("load_checkpoint: a parameter of another shape", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (path, _) = good_checkpoint(dir.path(), false)?;
        let mut ps = params();
        ps[0].1 = Parameter::new(setup(Tensor::zeros(&[3, 2], DType::F32))?);
        expect_err!(
            load_checkpoint(&path, &ps, None),
            Error::TensorMismatch { name, problem: TensorProblem::Shape { .. }, .. } if name == "w",
            ["`w`", "[3, 2]", "[2, 2]"]
        )
    });
    t.add("load_checkpoint: a parameter of another dtype", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (path, _) = good_checkpoint(dir.path(), false)?;
        let mut ps = params();
        ps[1].1 = Parameter::new(Tensor::vector(&[0.0f64, 0.0]));
        expect_err!(
            load_checkpoint(&path, &ps, None),
            Error::TensorMismatch { name, problem: TensorProblem::DType { .. }, .. } if name == "b",
            ["`b`", "f32", "f64"]
        )
    });
    t.add("load_checkpoint: a parameter the file does not hold", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (path, _) = good_checkpoint(dir.path(), false)?;
        let mut ps = params();
        ps.push(("extra".into(), Parameter::new(Tensor::scalar(1.0f32))));
        expect_err!(
            load_checkpoint(&path, &ps, None),
            Error::TensorMismatch { name, problem: TensorProblem::Missing, .. } if name == "extra",
            ["`extra`", "missing", "good.safetensors"]
        )
    });
    t.add("load_checkpoint: a tensor no parameter expects", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (path, _) = good_checkpoint(dir.path(), false)?;
        let ps = vec![params().remove(0)];
        expect_err!(
            load_checkpoint(&path, &ps, None),
            Error::TensorMismatch { name, problem: TensorProblem::Unexpected, .. } if name == "b",
            ["`b`", "unexpected"]
        )
    });
    t.add(
        "load_checkpoint: a failed load changes no parameter",
        || {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let (path, _) = good_checkpoint(dir.path(), false)?;
            let ps = params();
            setup(ps[0].1.set(setup(Tensor::zeros(&[2, 2], DType::F32))?))?;
            let mut with_bad = ps.clone();
            with_bad[1].1 = Parameter::new(Tensor::vector(&[0.0f64, 0.0]));
            let _ = load_checkpoint(&path, &with_bad, None);
            crate::harness::ensure(ps[0].1.value().to_f64_vec() == vec![0.0; 4], || {
                "`w` was loaded although `b` failed".into()
            })
        },
    );
    t.add("load_checkpoint: Adam state into SGD", || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (path, _) = good_checkpoint(dir.path(), true)?;
        let ps = params();
        let mut sgd = setup(Sgd::new(ps.clone(), SgdConfig::new(0.1)))?;
        expect_err!(
            load_checkpoint(&path, &ps, Some(&mut sgd)),
            Error::Format { .. },
            ["good.safetensors", "adam", "sgd"]
        )
    });
    t.add(
        "load_checkpoint: optimizer state asked of a file without it",
        || {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let (path, _) = good_checkpoint(dir.path(), false)?;
            let ps = params();
            let mut adam = setup(Adam::new(ps.clone(), AdamConfig::default()))?;
            expect_err!(
                load_checkpoint(&path, &ps, Some(&mut adam)),
                Error::Format { .. },
                ["no"]
            )
        },
    );
    t.add(
        "load_checkpoint: Adam state for another parameter set",
        || {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let (path, _) = good_checkpoint(dir.path(), true)?;
            let ps = params();
            let other = vec![("w".to_string(), ps[0].1.clone())];
            let mut adam = setup(Adam::new(other.clone(), AdamConfig::default()))?;
            expect_err!(
                load_checkpoint(&path, &other, Some(&mut adam)),
                Error::TensorMismatch { .. },
                ["`b"]
            )
        },
    );
    t.add("load_state_dict: a tensor of another shape", || {
        let ps = params();
        let mut state = retrograd::nn::state_dict(&ps);
        state.insert("b".into(), Tensor::vector(&[1.0f32, 2.0, 3.0]));
        expect_err!(load_state_dict(&ps, &state), Error::TensorMismatch { name, .. } if name == "b", [
            "load_state_dict", "`b`", "[2]", "[3]"
        ])
    });
    t.add("Optimizer::load_state_dict: a negative step count", || {
        let ps = params();
        let mut adam = setup(Adam::new(ps.clone(), AdamConfig::default()))?;
        let g = retrograd::Graph::new();
        setup(adam.step(&setup(
            (g.param(&ps[0].1).sum() + g.param(&ps[1].1).sum()).backward(),
        )?))?;
        let mut state = adam.state_dict();
        let step_key = state
            .keys()
            .find(|k| k.ends_with("step"))
            .cloned()
            .ok_or("no step entry")?;
        state.insert(step_key, Tensor::scalar(-3.0));
        expect_err!(
            adam.load_state_dict(&state),
            Error::TensorMismatch { .. },
            ["step"]
        )
    });
}
