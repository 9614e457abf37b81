//! Body of the `checkpoint` fuzz target: arbitrary bytes as a safetensors
//! file, read by `load_tensors`, by `load_checkpoint` into a small model
//! with an Adam optimizer, and as a training state (`TrainingState::load`,
//! then `restore` into the same model).
//!
//! Checked: loading never panics; a failure is `Error::Format`, `Error::Io`
//! or `Error::TensorMismatch`; a file that loads saves and loads back to the
//! same bits; a failed `load_checkpoint` or `restore` leaves the parameters
//! and the optimizer state exactly as they were (all-or-nothing); a
//! training state that loads saves and loads back.

use std::collections::BTreeMap;
use std::path::PathBuf;

use retrograd::io::{load_checkpoint, load_tensors, save_tensors};
use retrograd::nn::{Parameter, StateDict};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::train::TrainingState;
use retrograd::{DType, Error, Tensor};

pub fn run(data: &[u8]) {
    let path = scratch_path("in.safetensors");
    std::fs::write(&path, data).expect("write the fuzz input to a scratch file");

    match load_tensors(&path) {
        Ok(file) => {
            for (name, t) in &file.tensors {
                let numel: usize = t.shape().iter().product();
                assert_eq!(t.numel(), numel, "tensor `{name}`: shape and data disagree");
            }
            round_trip(&file.tensors, &file.metadata);
        }
        Err(e) => assert_file_error(&e),
    }

    let params = model();
    let mut opt =
        Adam::new(&params, AdamConfig::default().lr(0.25)).expect("Adam on a fixed model");
    let before: Vec<Tensor> = params.iter().map(|(_, p)| p.value()).collect();
    let before_state = opt.state_dict();
    if let Err(e) = load_checkpoint(&path, &params, Some(&mut opt)) {
        assert_file_error(&e);
        let after: Vec<Tensor> = params.iter().map(|(_, p)| p.value()).collect();
        assert_eq!(
            bits_of_all(&before),
            bits_of_all(&after),
            "a failed load changed a parameter: {e}"
        );
        assert_eq!(
            opt.state_dict(),
            before_state,
            "a failed load changed the optimizer: {e}"
        );
        assert_eq!(
            opt.lr(),
            0.25,
            "a failed load changed the learning rate: {e}"
        );
    }
    training_state(&path);
    let _ = std::fs::remove_file(&path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// The file as a training state: loads or is a file error; what loads
/// saves and loads back, and restores into the model all or nothing.
fn training_state(path: &std::path::Path) {
    let state = match TrainingState::load(path) {
        Ok(state) => state,
        Err(e) => {
            assert!(
                matches!(e, Error::Format { .. } | Error::Io { .. }),
                "TrainingState::load gave an unexpected error kind: {e:?}"
            );
            return;
        }
    };
    let again = scratch_path("state.safetensors");
    state.save(&again).expect("saving a state that loaded");
    let back = TrainingState::load(&again).expect("loading a state just saved");
    assert_eq!(back.progress(), state.progress());
    assert_eq!(back.config(), state.config());
    assert_eq!(back.num_ranks(), state.num_ranks());
    let _ = std::fs::remove_file(&again);

    let params = model();
    let mut opt =
        Adam::new(&params, AdamConfig::default().lr(0.25)).expect("Adam on a fixed model");
    let before: Vec<Tensor> = params.iter().map(|(_, p)| p.value()).collect();
    if let Err(e) = state.restore(&params, Some(&mut opt), None) {
        assert!(
            matches!(
                e,
                Error::Format { .. } | Error::TensorMismatch { .. } | Error::InvalidArgument { .. }
            ),
            "restore gave an unexpected error kind: {e:?}"
        );
        let after: Vec<Tensor> = params.iter().map(|(_, p)| p.value()).collect();
        assert_eq!(
            bits_of_all(&before),
            bits_of_all(&after),
            "a failed restore changed a parameter: {e}"
        );
        assert!(
            opt.state_dict().is_empty(),
            "a failed restore changed the optimizer: {e}"
        );
        assert_eq!(
            opt.lr(),
            0.25,
            "a failed restore changed the learning rate: {e}"
        );
    }
}

/// The model every input is loaded into: names and shapes of a 2-3 Linear.
fn model() -> Vec<(String, Parameter)> {
    let p = |shape: &[usize]| Parameter::new(Tensor::ones(shape, DType::F32).expect("small shape"));
    vec![
        ("0.weight".to_string(), p(&[3, 2])),
        ("0.bias".to_string(), p(&[3])),
    ]
}

fn assert_file_error(e: &Error) {
    assert!(
        matches!(
            e,
            Error::Format { .. } | Error::Io { .. } | Error::TensorMismatch { .. }
        ),
        "loading gave an unexpected error kind: {e:?}"
    );
    assert!(!e.to_string().is_empty());
}

/// What loaded saves and loads back bit for bit (NaN payloads included).
fn round_trip(tensors: &StateDict, metadata: &BTreeMap<String, String>) {
    let path = scratch_path("round-trip.safetensors");
    save_tensors(&path, tensors, metadata).expect("saving what was just loaded");
    let back = load_tensors(&path).expect("loading what was just saved");
    assert_eq!(&back.metadata, metadata);
    assert_eq!(back.tensors.len(), tensors.len());
    for ((name, a), (name_b, b)) in tensors.iter().zip(&back.tensors) {
        assert_eq!(name, name_b);
        assert_eq!(
            (a.shape(), a.dtype()),
            (b.shape(), b.dtype()),
            "tensor `{name}`"
        );
        assert_eq!(bits(a), bits(b), "tensor `{name}`");
    }
    let _ = std::fs::remove_file(&path);
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

fn bits_of_all(ts: &[Tensor]) -> Vec<Vec<u64>> {
    ts.iter().map(bits).collect()
}

/// A file in a scratch directory private to this process and thread
/// (the corpus test runs its cases on parallel threads).
fn scratch_path(file: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "retrograd-fuzz-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir.join(file)
}
