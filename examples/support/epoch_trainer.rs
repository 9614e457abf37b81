//! What the two epoch-based jobs (`train_digits`, `train_mnist_cnn`) share
//! around their training step on one process: the trainer's state (the
//! model, its optimizer and schedule, the generator and its copy as the
//! epoch began, the position, the epoch's sums, the run's log) saved in
//! and restored from training states; the progress bar and the epoch
//! table; the loop over epochs with the test after each; and the step
//! itself, eager or compiled (`--compile`).

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use retrograd::data::{Batches, Dataset};
use retrograd::distributed::SingleProcess;
use retrograd::nn::{accuracy, evaluate_accuracy, Forward, Module};
use retrograd::optim::{LrScheduler, Optimizer};
use retrograd::train::{Progress, RankState, TrainingState};
use retrograd::viz::GraphPictures;
use retrograd::viz::VizOptions;
use retrograd::Gradients;
use retrograd::{DType, Graph, Result, Tensor};

use super::compiled_step::{CompiledClassifier, Shared, StepResult};
use super::epochs::{self, EpochSums};
use super::resume::{Session, Stopped};
use super::run_outputs::{self, RunOutputs, StepFigures};

/// The trainer of a job: everything a training state holds, and the run's log.
pub struct Trainer<M: Forward> {
    pub model: Shared<M>,
    pub optimizer: Box<dyn Optimizer>,
    pub scheduler: LrScheduler,
    pub rng: ChaCha8Rng,
    pub epoch_start: ChaCha8Rng,
    pub at: Progress,
    pub sums: EpochSums,
    pub outputs: RunOutputs,
    /// The step, eager or compiled (its own handle on the model).
    pub runner: StepRunner<M>,
    /// The generator's name in training states.
    generator: &'static str,
}

/// Runs a classifier's training step on a batch, eagerly or compiled.
pub struct StepRunner<M> {
    model: Shared<M>,
    /// `--compile`: the captured step.
    compiled: Option<CompiledClassifier>,
}

/// What a job's step needs to know of the run.
pub struct StepSettings<'a> {
    /// `--graph-svg` and `--graph-html`: pictures of the first step.
    pub graph_svg: Option<&'a std::path::Path>,
    pub graph_html: Option<&'a std::path::Path>,
    /// The pictures' title.
    pub title: &'a str,
}

impl<M: Forward + 'static> Trainer<M> {
    /// A trainer at the run's start; `generator` names the shuffling
    /// generator (seeded from `seed`) in training states; `compile`: a
    /// compiled step, its dropout masks drawn from `seed`.
    pub fn new(
        model: M,
        optimizer: Box<dyn Optimizer>,
        scheduler: LrScheduler,
        seed: u64,
        generator: &'static str,
        outputs: RunOutputs,
        compile: bool,
    ) -> Self {
        let model = Shared::new(model);
        let runner = StepRunner {
            compiled: compile.then(|| CompiledClassifier::new(&model, seed)),
            model: model.clone(),
        };
        let rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        Trainer {
            model,
            runner,
            optimizer,
            scheduler,
            epoch_start: rng.clone(),
            rng,
            at: Progress::default(),
            sums: EpochSums::default(),
            outputs,
            generator,
        }
    }

    pub fn capture(&self) -> Result<TrainingState> {
        let mine = RankState::new()
            .with_generator(self.generator, &self.rng)
            .with_generator("epoch_start", &self.epoch_start);
        TrainingState::capture(
            &self.model,
            Some(self.optimizer.as_ref()),
            Some(&self.scheduler),
            self.at,
            self.sums.save(mine),
        )
    }

    pub fn restore(&mut self, state: &TrainingState) -> Result<()> {
        let mine = state.restore(
            &self.model,
            Some(self.optimizer.as_mut()),
            Some(&mut self.scheduler),
        )?;
        self.rng = mine.generator(self.generator)?;
        self.epoch_start = mine.generator("epoch_start")?;
        self.sums = EpochSums::restore(&mine)?;
        self.at = state.progress();
        Ok(())
    }

    /// After a step on `n` examples: its figures logged, the epoch's sums
    /// and the position moved on, the progress bar told; `Some` if the run
    /// must stop (a training state was saved).
    pub fn after_step(
        &mut self,
        figures: StepFigures,
        n: usize,
        accuracy: f64,
        epochs: usize,
        progress: &ProgressBar,
        session: &mut Session<SingleProcess>,
    ) -> Result<Option<Stopped>> {
        self.sums.loss += figures.loss * n as f64;
        self.sums.correct += accuracy * n as f64;
        self.sums.seen += n as f64;
        self.outputs.log_step(self.at.step as usize, figures)?;
        self.at.step += 1;
        self.at.batch += 1;
        progress.inc(1);
        progress.set_message(format!(
            "epoch {}/{epochs}  loss {:.4}  acc {:.2}%",
            self.at.epoch + 1,
            self.sums.loss / self.sums.seen,
            100.0 * self.sums.correct / self.sums.seen
        ));
        session.after_step(self.at, || self.capture())
    }

    /// The rest of the current epoch's batches, in the shuffled order,
    /// its sums started afresh at its beginning.
    pub fn epoch_batches<'a>(
        &mut self,
        train: &'a Dataset,
        batch_size: usize,
    ) -> Result<Batches<'a>> {
        if self.at.batch == 0 {
            self.sums = EpochSums::starting(self.optimizer.lr());
        }
        epochs::shuffled_epoch(
            train,
            batch_size,
            &mut self.rng,
            &mut self.epoch_start,
            self.at.batch,
        )
    }

    /// Trains the remaining epochs of `epochs` (`epoch` runs the rest of
    /// the current one), testing on `test` (`eval_batch` examples per
    /// forward) and printing the table's row after each; `Some` if the run
    /// stopped early.
    pub fn run_epochs(
        &mut self,
        epochs: usize,
        test: &Dataset,
        eval_batch: usize,
        start: Instant,
        progress: &ProgressBar,
        mut epoch: impl FnMut(&mut Self) -> Result<Option<Stopped>>,
    ) -> Result<Option<Stopped>> {
        while self.at.epoch < epochs as u64 {
            let number = self.at.epoch + 1;
            self.model.set_training(true);
            if let Some(stopped) = epoch(self)? {
                progress.finish_and_clear();
                return Ok(Some(stopped));
            }
            let EpochSums {
                lr,
                loss,
                correct,
                seen,
            } = self.sums;
            self.model.set_training(false);
            let test_acc = evaluate_accuracy(&self.model, test, eval_batch, DType::F32)?;
            let accuracies = [
                ("train/accuracy", correct / seen),
                ("test/accuracy", test_acc),
            ];
            self.outputs.log(self.at.step as usize, &accuracies)?;
            self.outputs.evaluated()?;
            let elapsed = start.elapsed().as_secs_f64();
            progress.suspend(|| {
                println!(
                    "{number:>5} | {:>10.4} | {:>8.2}% | {:>7.2}% | {lr:>9.2e} | {elapsed:>6.2}s",
                    loss / seen,
                    100.0 * correct / seen,
                    100.0 * test_acc
                )
            });
            self.at.epoch += 1;
            self.at.batch = 0;
        }
        progress.finish_and_clear();
        Ok(None)
    }
}

/// The progress bar of `total` steps at `position` (hidden with
/// `--quiet`), and the epoch table's header above it.
pub fn progress_and_header(quiet: bool, total: u64, position: u64) -> ProgressBar {
    let progress = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    progress.set_position(position);
    progress.set_style(
        ProgressStyle::with_template("{bar:32.cyan/blue} {pos:>5}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let header = format!(
        "{:>5} | {:>10} | {:>9} | {:>8} | {:>9} | {:>7}",
        "epoch", "train loss", "train acc", "test acc", "lr", "elapsed"
    );
    progress.suspend(|| println!("{header}\n{}", "-".repeat(header.len())));
    progress
}

impl<M: Forward + 'static> StepRunner<M> {
    /// One evaluation of step `index` of the run on a batch: compiled,
    /// or eagerly (with the pictures of the run's first step, if asked).
    pub fn step(
        &mut self,
        index: u64,
        images: Tensor,
        labels: &[usize],
        settings: &StepSettings<'_>,
    ) -> Result<StepResult> {
        if let Some(compiled) = &mut self.compiled {
            return compiled.run(index, images, labels);
        }
        let graph = Graph::new();
        let picture = (settings.graph_svg.is_some() || settings.graph_html.is_some()) && index == 0;
        let model = self.model.get();
        if picture {
            // Name the parameter leaves so the picture shows "0.weight", ...
            run_outputs::name_parameters(&graph, &*model);
        }
        let x = graph.constant(images).named("images");
        let logits = model.forward(&x)?;
        let loss = logits.try_cross_entropy(labels)?;
        let grads: Gradients = loss.backward()?;
        if let (true, Some(path)) = (picture, settings.graph_svg) {
            let options = VizOptions::new()
                .root(&loss)
                .gradients(&grads)
                .title(settings.title);
            graph.write_svg(path, &options)?;
        }
        if let (true, Some(path)) = (picture, settings.graph_html) {
            run_outputs::write_step_page(&graph, &loss, path, settings.title)?;
        }
        Ok(StepResult {
            loss: loss.value().try_item()?,
            accuracy: accuracy(logits.value(), labels)?,
            grads,
        })
    }
}
