//! Training curves: a run logs named scalars per step to a JSON-lines file
//! ([`RunLog`]), which can be read back at any time, even while the run is
//! still writing it ([`read_log`]), and drawn as SVG line plots
//! ([`plot_chart`], [`write_plots`]): one chart per metric, `train/loss`
//! and `val/loss` on the same chart, several runs overlaid, dense series
//! smoothed, a log scale where values span orders of magnitude.
//!
//! (Accuracy over a dataset, the other kind of metric, is
//! [`nn::evaluate_accuracy`](retrograd_engine::nn::evaluate_accuracy).)
//!
//! ```
//! use retrograd::runlog::{read_log, write_plots, PlotOptions, RunLog};
//!
//! let dir = tempfile::tempdir()?;
//! let mut log = RunLog::create(dir.path().join("run.jsonl"))?;
//! for step in 0..200u64 {
//!     let lr = 1e-3 * (1.0 - step as f64 / 200.0);
//!     log.log(step, &[("train/loss", 3.0 * (-(step as f64) / 50.0).exp()), ("lr", lr)])?;
//!     if step % 50 == 0 {
//!         log.log(step, &[("val/loss", 3.1 * (-(step as f64) / 55.0).exp())])?;
//!     }
//! }
//! let run = read_log(log.path())?;
//! let files = write_plots(&[run], dir.path().join("plots"), &PlotOptions::default())?;
//! assert_eq!(files.iter().map(|f| f.file_name().unwrap()).collect::<Vec<_>>(), ["loss.svg", "lr.svg"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Where things are: training curves: `RunLog` (`writer.rs`: one JSON
//! object per line, `step` and `time` first, each record one `write` to an
//! `O_APPEND` file, `create` for a fresh run, `append` for a resumed one,
//! which first ends a line torn by a crash), `read_log`, `Run`, `Series`
//! (`reader.rs`: an unfinished last line is left for later, a step lower
//! than one already read is a restart and drops the later points of every
//! series, the same step twice keeps the later value), charts (`plot.rs`,
//! the `plotters` crate with its SVG backend only: `split/metric` series on
//! the chart `metric`, dense noisy series (changing direction at more than
//! a tenth of their points, as a loss per batch does) drawn faint and
//! smoothed with TensorBoard's debiased moving average, dense smooth ones
//! (a learning-rate schedule) drawn as logged, sparse ones with a marker
//! per point, a log axis when values span two decades, colours by split for
//! one run and by run for several, `write_plots` writes each chart
//! atomically through `viz::write_atomically`).

mod plot;
mod reader;
mod writer;

pub use plot::{charts, plot_chart, write_plots, PlotOptions, Scale, PALETTE, SMOOTH_ABOVE_POINTS};
pub use reader::{read_log, Run, Series};
pub use writer::RunLog;
