//! What both training examples do once training ends: the final test
//! accuracy, an atomic checkpoint (parameters, buffers and optimizer state),
//! and a fresh model restored from it that must score the same, with
//! bit-identical logits.

use std::path::Path;

use retrograd::data::Dataset;
use retrograd::io::{load_checkpoint, save_checkpoint};
use retrograd::nn::{evaluate_accuracy, Forward};
use retrograd::optim::Optimizer;
use retrograd::{DType, Error, Graph, Result};

/// Saves `model` and `optimizer` to `out`, loads them into `restored` (a
/// model built with other weights, in eval mode) and `restored_optimizer`,
/// prints what it finds and returns `model`'s test accuracy; an error if the
/// restored model does not reproduce `model` on `test`.
pub fn checkpoint_and_reload<M: Forward>(
    op: &'static str,
    out: &Path,
    model: &M,
    optimizer: &dyn Optimizer,
    restored: &M,
    restored_optimizer: &mut dyn Optimizer,
    test: &Dataset,
) -> Result<f64> {
    let test_acc = evaluate_accuracy(model, test, 500, DType::F32)?;
    let correct = (test_acc * test.len() as f64).round() as usize;
    println!(
        "\nfinal test accuracy: {:.2}% ({correct}/{} held-out images)",
        100.0 * test_acc,
        test.len()
    );
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            op: "create_dir_all",
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
    }
    save_checkpoint(out, model, Some(optimizer))?;
    let buffers = if model.buffers().is_empty() {
        ""
    } else {
        ", buffers"
    };
    println!(
        "checkpoint: {} (parameters{buffers} and {} state)",
        out.display(),
        optimizer.kind()
    );

    load_checkpoint(out, restored, Some(restored_optimizer))?;
    let restored_acc = evaluate_accuracy(restored, test, 500, DType::F32)?;
    let same_logits = {
        let graph = Graph::new();
        let x = graph.constant(test.features_tensor(DType::F32)?);
        let a = graph.no_grad(|| model.forward(&x))?;
        let b = graph.no_grad(|| restored.forward(&x))?;
        a.value() == b.value()
    };
    println!(
        "reloaded: test accuracy {:.2}%, logits bit-identical: {}",
        100.0 * restored_acc,
        if same_logits { "yes" } else { "NO" }
    );
    if restored_acc != test_acc || !same_logits {
        return Err(Error::InvalidArgument {
            op,
            reason: "the reloaded model does not reproduce the trained one".into(),
        });
    }
    Ok(test_acc)
}
