//! What the three training jobs write besides their checkpoint: the run's
//! log, always, next to the checkpoint (`target/train_digits.safetensors`
//! logs to `target/train_digits.log.jsonl`); its curves as SVG with
//! `--plot DIR`, redrawn at every evaluation and at the end; and with
//! `--graph-html FILE`, a page that steps through the backward sweep of one
//! training step.

use std::path::{Path, PathBuf};

use retrograd::nn::Module;
use retrograd::runlog::{read_log, write_plots, PlotOptions, RunLog};
use retrograd::viz::GraphPictures;
use retrograd::viz::VizOptions;
use retrograd::{Graph, Result, Var};

/// The run's log and where its curves go.
pub struct RunOutputs {
    log: RunLog,
    plot_dir: Option<PathBuf>,
}

impl RunOutputs {
    /// Starts the log next to `checkpoint` (a fresh log, or with `resume`
    /// the existing one continued).
    pub fn start(checkpoint: &Path, plot_dir: Option<PathBuf>, resume: bool) -> Result<Self> {
        let path = checkpoint.with_extension("log.jsonl");
        let log = if resume {
            RunLog::append(path)?
        } else {
            RunLog::create(path)?
        };
        Ok(RunOutputs { log, plot_dir })
    }

    /// Logs `scalars` measured at `step`.
    pub fn log(&mut self, step: usize, scalars: &[(&str, f64)]) -> Result<()> {
        self.log.log(step as u64, scalars)
    }

    /// Logs one training step's figures under the names the charts group
    /// by: `train/loss`, `lr`, `grad_norm` and, when measured, `step_time_ms`.
    pub fn log_step(&mut self, step: usize, figures: StepFigures) -> Result<()> {
        let mut scalars = vec![
            ("train/loss", figures.loss),
            ("lr", figures.lr),
            ("grad_norm", figures.grad_norm),
        ];
        if let Some(millis) = figures.millis {
            scalars.push(("step_time_ms", millis));
        }
        self.log(step, &scalars)
    }

    /// After an evaluation and at the end: puts the log on disk and, with
    /// `--plot`, redraws every chart from it.
    pub fn evaluated(&mut self) -> Result<()> {
        self.log.sync()?;
        if let Some(dir) = &self.plot_dir {
            write_plots(&[read_log(self.log.path())?], dir, &PlotOptions::default())?;
        }
        Ok(())
    }

    /// `log: FILE` and, with `--plot`, `curves: DIR/*.svg`, for the job's last lines.
    pub fn describe(&self) -> String {
        let mut text = format!("log: {}", self.log.path().display());
        if let Some(dir) = &self.plot_dir {
            text.push_str(&format!("; curves: {}/*.svg", dir.display()));
        }
        text
    }
}

/// What a job logs for each training step.
pub struct StepFigures {
    /// The batch's training loss.
    pub loss: f64,
    /// The learning rate the step used.
    pub lr: f64,
    /// The gradients' global 2-norm (before clipping).
    pub grad_norm: f64,
    /// The step's wall time in milliseconds, where the job measures it.
    pub millis: Option<f64>,
}

/// Brings `model`'s parameters into `graph` under their names, so that a
/// picture of the step shows `h.0.attn.in_proj_weight`, not `v17`.
pub fn name_parameters(graph: &Graph, model: &impl Module) {
    for (name, p) in model.parameters() {
        graph.param(&p).named(&name);
    }
}

/// Writes the page that steps through the backward sweep of `loss`,
/// repeated layers collapsed into one node each, as `--collapse` draws them.
pub fn write_step_page(graph: &Graph, loss: &Var<'_>, path: &Path, title: &str) -> Result<()> {
    let loss = loss.clone().named("loss");
    let options = VizOptions::new()
        .root(&loss)
        .collapse_repeated(true)
        .title(title);
    graph.write_html(path, &options)
}
