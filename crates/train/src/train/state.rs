//! [`TrainingState`]: everything that decides a run's next step, captured
//! as values and restored whole, so a resumed run is the same run.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;

use crate::distributed::Communicator;
use retrograd_engine::io::{checkpoint_contents, load_contents, TensorFile};
use retrograd_engine::nn::{default_generator_state, set_default_generator_state, NamedTensors};
use retrograd_engine::optim::{LrScheduler, Optimizer};
use retrograd_engine::{Error, Result, TensorProblem};

/// Where a run is: optimizer steps taken in all, the epoch in progress
/// (0-based) and how many of its batches are done. A state captured right
/// after a step of an epoch's last batch has `batch` equal to the epoch's
/// batch count: the epoch's closing work (an evaluation, a printed row) is
/// still to come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Optimizer steps taken since the run began.
    pub step: u64,
    /// The epoch in progress, from 0 (runs without epochs leave it at 0).
    pub epoch: u64,
    /// Batches of `epoch` already trained on.
    pub batch: u64,
}

/// What belongs to one process of a run: its named generators (data
/// order, augmentation: any [`ChaCha8Rng`]), its named numbers (running
/// sums of an epoch's loss, a best validation loss), the process's
/// [default generator](retrograd_engine::nn::default_generator_state) and its model's
/// [random streams](retrograd_engine::nn::RandomStream) (the last two added by
/// [`TrainingState::capture`]). Under
/// data-parallel training each rank has its own, and a training state
/// holds every rank's.
///
/// ```
/// use rand::{Rng, SeedableRng};
/// use retrograd::train::RankState;
/// let mut shuffle = rand_chacha::ChaCha8Rng::seed_from_u64(3);
/// let _: u32 = shuffle.random();
/// let mine = RankState::new().with_generator("shuffle", &shuffle).with_value("loss_sum", 1.5);
/// assert_eq!(mine.generator("shuffle")?, shuffle);
/// assert_eq!(mine.value("loss_sum")?, 1.5);
/// assert!(mine.value("seen").is_err()); // named in the error
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankState {
    pub(crate) generators: BTreeMap<String, ChaCha8Rng>,
    pub(crate) values: BTreeMap<String, f64>,
    pub(crate) default_generator: Option<ChaCha8Rng>,
    /// The rank's model's random streams (dropout masks may be seeded per
    /// rank): name -> (seed, position).
    pub(crate) streams: BTreeMap<String, (u64, u64)>,
}

impl RankState {
    /// An empty state (the default generator is added when a
    /// [`TrainingState`] captures it).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the generator `name`, as it is now.
    pub fn with_generator(mut self, name: &str, rng: &ChaCha8Rng) -> Self {
        self.generators.insert(name.to_string(), rng.clone());
        self
    }

    /// Adds (or replaces) the number `name`, kept exactly.
    pub fn with_value(mut self, name: &str, value: f64) -> Self {
        self.values.insert(name.to_string(), value);
        self
    }

    /// The generator `name`, positioned where it was saved.
    pub fn generator(&self, name: &str) -> Result<ChaCha8Rng> {
        self.generators
            .get(name)
            .cloned()
            .ok_or_else(|| missing("generator", name, self.generators.keys()))
    }

    /// The number `name`.
    pub fn value(&self, name: &str) -> Result<f64> {
        self.values
            .get(name)
            .copied()
            .ok_or_else(|| missing("value", name, self.values.keys()))
    }

    /// The default generator as it was captured, if it was.
    pub fn default_generator(&self) -> Option<&ChaCha8Rng> {
        self.default_generator.as_ref()
    }
}

fn missing<'a>(kind: &str, name: &str, known: impl Iterator<Item = &'a String>) -> Error {
    let known: Vec<&str> = known.map(String::as_str).collect();
    Error::invalid(
        "TrainingState",
        format!(
            "no {kind} named `{name}` in the training state (it has {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ),
    )
}

/// A learning-rate schedule's position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ScheduleState {
    pub steps: u64,
    pub base_lr: f64,
}

/// Everything that decides a training run's next step: the model's
/// parameters, buffers and [random streams](retrograd_engine::nn::RandomStream), the
/// optimizer's state and learning rate, the schedule's position, the
/// [`Progress`] counters, each rank's [`RankState`] (generators, numbers,
/// the default generator), the run's settings (checked on resume) and the
/// program's own metadata. Captured as values (tensors share the live
/// storage, so capturing costs no copy), saved and loaded whole
/// ([`save`](Self::save), [`load`](Self::load): a versioned safetensors
/// checkpoint with a checksum), and restored all or nothing. A run resumed
/// from it is the same run, bit for bit.
///
/// ```
/// use rand::{Rng, SeedableRng};
/// use retrograd::{Graph, Tensor, nn::{Linear, Module}, optim::{Adam, AdamConfig, Optimizer}};
/// use retrograd::train::{Progress, RankState, TrainingState};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("state.safetensors");
/// let model = Linear::new(2, 1)?;
/// let mut opt = Adam::new(model.parameters(), AdamConfig::default())?;
/// let mut data_rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let step = |model: &Linear, opt: &mut Adam, rng: &mut rand_chacha::ChaCha8Rng| -> retrograd::Result<()> {
///     let g = Graph::new();
///     let x = g.constant(Tensor::from_vec(vec![rng.random::<f32>(), 1.0], &[1, 2])?);
///     let y = retrograd::nn::Forward::forward(model, &x)?;
///     let loss = (&y * &y).sum();
///     opt.step(&loss.backward()?)
/// };
/// step(&model, &mut opt, &mut data_rng)?;
/// let mine = RankState::new().with_generator("data", &data_rng);
/// let progress = Progress { step: 1, ..Progress::default() };
/// TrainingState::capture(&model, Some(&opt), None, progress, mine)?.save(&path)?;
/// step(&model, &mut opt, &mut data_rng)?;       // the uninterrupted run's second step
///
/// // Another process: build the same objects, restore, continue.
/// let model2 = Linear::new(2, 1)?;
/// let mut opt2 = Adam::new(model2.parameters(), AdamConfig::default())?;
/// let state = TrainingState::load(&path)?;
/// let mine = state.restore(&model2, Some(&mut opt2), None)?;
/// let mut data_rng2 = mine.generator("data")?;
/// assert_eq!(state.progress().step, 1);
/// step(&model2, &mut opt2, &mut data_rng2)?;
/// assert_eq!(model2.weight().value(), model.weight().value()); // bit for bit
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TrainingState {
    /// The model's and optimizer's tensors and their checkpoint metadata
    /// (format, optimizer kind and rate, the program's own metadata).
    pub(crate) contents: TensorFile,
    pub(crate) progress: Progress,
    pub(crate) schedule: Option<ScheduleState>,
    pub(crate) ranks: Vec<RankState>,
    pub(crate) config: BTreeMap<String, String>,
}

impl TrainingState {
    /// Captures a run's state on one process: `model` (a
    /// [`Module`](retrograd_engine::nn::Module) or a list of named parameters),
    /// `optimizer`, `scheduler`, the counters and this process's
    /// [`RankState`] (the default generator is added as it is now).
    pub fn capture<M: NamedTensors + ?Sized>(
        model: &M,
        optimizer: Option<&dyn Optimizer>,
        scheduler: Option<&LrScheduler>,
        progress: Progress,
        mut rank: RankState,
    ) -> Result<Self> {
        let contents = checkpoint_contents(model, optimizer, &BTreeMap::new())?;
        rank.default_generator
            .get_or_insert_with(default_generator_state);
        rank.streams = model
            .named_random_streams()
            .into_iter()
            .map(|(name, s)| (name, (s.seed(), s.position())))
            .collect();
        Ok(TrainingState {
            contents,
            progress,
            schedule: scheduler.map(|s| ScheduleState {
                steps: s.steps() as u64,
                base_lr: s.base_lr(),
            }),
            ranks: vec![rank],
            config: BTreeMap::new(),
        })
    }

    /// Records the run's settings (`"lr" -> "0.002"`, ...): a run may only
    /// resume from a state with the same ones ([`check_config`](Self::check_config)).
    pub fn with_config(mut self, config: BTreeMap<String, String>) -> Self {
        self.config = config;
        self
    }

    /// Adds metadata of the program's own (a tokenizer, model sizes), as
    /// [`save_checkpoint_with_metadata`](retrograd_engine::io::save_checkpoint_with_metadata)
    /// does; reserved keys are an [`Error::InvalidArgument`].
    pub fn with_metadata(mut self, metadata: &BTreeMap<String, String>) -> Result<Self> {
        // The same check, on the same keys, as a model checkpoint's.
        checkpoint_contents(&Vec::new(), None, metadata)?;
        self.contents
            .metadata
            .extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(self)
    }

    /// The counters.
    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// How many ranks (processes) the state is from.
    pub fn num_ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Rank `rank`'s own state.
    pub fn rank(&self, rank: usize) -> Result<&RankState> {
        self.ranks.get(rank).ok_or_else(|| {
            Error::invalid(
                "TrainingState::rank",
                format!(
                    "rank {rank} of a training state from {} rank(s)",
                    self.ranks.len()
                ),
            )
        })
    }

    /// The run's settings, as recorded by [`with_config`](Self::with_config).
    pub fn config(&self) -> &BTreeMap<String, String> {
        &self.config
    }

    /// The program's own metadata.
    pub fn metadata(&self) -> BTreeMap<String, String> {
        retrograd_engine::io::user_metadata(self.contents.metadata.clone())
    }

    /// Checks that `current` (this run's settings) are the recorded ones;
    /// otherwise an [`Error::InvalidArgument`] naming the first setting
    /// that differs and both values.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use retrograd::{nn::Linear, train::{Progress, RankState, TrainingState}};
    /// let config = |lr: &str| BTreeMap::from([("lr".to_string(), lr.to_string())]);
    /// let state = TrainingState::capture(&Linear::new(2, 1)?, None, None, Progress::default(), RankState::new())?
    ///     .with_config(config("0.002"));
    /// state.check_config(&config("0.002"))?;
    /// let e = state.check_config(&config("0.01")).unwrap_err();
    /// assert!(e.to_string().contains("lr is 0.002 in the checkpoint, 0.01 in this run"));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn check_config(&self, current: &BTreeMap<String, String>) -> Result<()> {
        let keys = self.config.keys().chain(current.keys());
        for key in keys {
            let (saved, now) = (self.config.get(key), current.get(key));
            if saved != now {
                let show = |v: Option<&String>| v.map_or("unset".to_string(), |v| v.clone());
                return Err(Error::invalid(
                    "resume",
                    format!(
                        "{key} is {} in the checkpoint, {} in this run; a resumed run must keep the settings it was started with",
                        show(saved),
                        show(now)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Restores a one-process run: see [`restore_rank`](Self::restore_rank).
    pub fn restore<M: NamedTensors + ?Sized>(
        &self,
        model: &M,
        optimizer: Option<&mut dyn Optimizer>,
        scheduler: Option<&mut LrScheduler>,
    ) -> Result<RankState> {
        self.restore_rank(model, optimizer, scheduler, 0, 1)
    }

    /// Restores rank `rank` of a run of `size` ranks: the model's
    /// parameters, buffers and random streams, the optimizer's state and
    /// rate, the schedule's position and this process's default generator;
    /// returns the rank's [`RankState`] for the generators and numbers the
    /// program keeps itself. The model, optimizer and schedule must be
    /// built as the saved run built them (the same names, shapes, dtypes,
    /// random streams and base rate; the values and the streams' seeds and
    /// positions are the state's), and the state must be from `size` ranks.
    /// All or nothing: on error nothing is changed.
    pub fn restore_rank<M: NamedTensors + ?Sized>(
        &self,
        model: &M,
        optimizer: Option<&mut dyn Optimizer>,
        scheduler: Option<&mut LrScheduler>,
        rank: usize,
        size: usize,
    ) -> Result<RankState> {
        let op = "TrainingState::restore";
        if self.ranks.len() != size {
            return Err(Error::invalid(
                op,
                format!(
                    "the training state is from {} rank(s); this run has {size} (resume with as many processes as the run was started with)",
                    self.ranks.len()
                ),
            ));
        }
        let mine = self.rank(rank)?.clone();
        let streams = model.named_random_streams();
        check_streams(&mine, &streams)?;
        let steps = match (&self.schedule, &scheduler, &optimizer) {
            (_, None, _) => None,
            (None, Some(_), _) => {
                return Err(Error::invalid(
                    op,
                    "the training state holds no schedule position to restore",
                ))
            }
            (Some(_), Some(_), None) => {
                return Err(Error::invalid(
                    op,
                    "a schedule is restored with the optimizer whose rate it sets",
                ))
            }
            (Some(saved), Some(s), Some(_)) => {
                if saved.base_lr.to_bits() != s.base_lr().to_bits() {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "the schedule's base learning rate is {} in the training state, {} here",
                            saved.base_lr,
                            s.base_lr()
                        ),
                    ));
                }
                Some(usize::try_from(saved.steps).map_err(|_| {
                    Error::invalid(
                        op,
                        format!("schedule position {} is too large", saved.steps),
                    )
                })?)
            }
        };
        // Model and optimizer: checked, then written, all or nothing.
        let mut optimizer = optimizer;
        let source = std::path::Path::new("the training state");
        match optimizer.as_mut() {
            Some(opt) => load_contents(source, &self.contents, model, Some(&mut **opt))?,
            None => load_contents(source, &self.contents, model, None)?,
        }
        for (name, s) in &streams {
            let (seed, position) = mine.streams[name];
            s.set_state(seed, position);
        }
        if let (Some(steps), Some(scheduler), Some(opt)) = (steps, scheduler, optimizer) {
            scheduler.set_steps(steps, opt);
        }
        if let Some(g) = &mine.default_generator {
            set_default_generator_state(g.clone());
        }
        Ok(mine)
    }

    /// Replaces this one-rank state's rank list by every rank's (each
    /// rank's own [`RankState`], in rank order), so that rank 0 can save
    /// the whole run. Collective: every rank calls it at the same step.
    pub fn gather<C: Communicator + ?Sized>(mut self, comm: &C) -> Result<Self> {
        if comm.size() == 1 {
            return Ok(self);
        }
        let [mine] = &self.ranks[..] else {
            return Err(Error::invalid(
                "TrainingState::gather",
                format!(
                    "expected this rank's state alone, found {} ranks",
                    self.ranks.len()
                ),
            ));
        };
        let bytes = super::format::encode_rank(mine)?.into_bytes();
        let all = comm.all_gather_bytes(&bytes)?;
        self.ranks = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                super::format::decode_rank(&String::from_utf8_lossy(b)).map_err(|reason| {
                    Error::Communication {
                        op: "TrainingState::gather",
                        detail: format!("rank {r} sent an unreadable state: {reason}"),
                    }
                })
            })
            .collect::<Result<_>>()?;
        Ok(self)
    }
}

/// The model's streams must be the rank's saved ones, by name.
fn check_streams(
    mine: &RankState,
    streams: &[(String, retrograd_engine::nn::RandomStream)],
) -> Result<()> {
    let mismatch = |name: &str, problem| Error::TensorMismatch {
        context: "TrainingState::restore (random streams)".to_string(),
        name: name.to_string(),
        problem,
    };
    for (name, _) in streams {
        if !mine.streams.contains_key(name) {
            return Err(mismatch(name, TensorProblem::Missing));
        }
    }
    if let Some(extra) = mine
        .streams
        .keys()
        .find(|k| !streams.iter().any(|(n, _)| n == *k))
    {
        return Err(mismatch(extra, TensorProblem::Unexpected));
    }
    Ok(())
}
