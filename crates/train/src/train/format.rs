//! How a [`TrainingState`] is written: a retrograd checkpoint (the model's
//! tensors under their own names, the optimizer's under `optimizer.`, so
//! `load_checkpoint` and `checkpoint_metadata` read it as they read any
//! checkpoint) whose header metadata also holds, as text:
//!
//! | key | value |
//! |---|---|
//! | `training_state` | the layout version, `1` |
//! | `training_state.step`, `.epoch`, `.batch` | the [`Progress`] counters |
//! | `training_state.schedule.steps`, `.schedule.base_lr` | the schedule's position and base rate, if any |
//! | `training_state.ranks` | how many ranks wrote it |
//! | `training_state.rank.<r>.generator.<name>` | `chacha8:<seed hex>:<stream>:<word position>` |
//! | `training_state.rank.<r>.default_generator` | the same, for the default generator |
//! | `training_state.rank.<r>.value.<name>` | a number, printed to round-trip exactly |
//! | `training_state.rank.<r>.stream.<name>` | a model random stream: `<seed>:<position>` |
//! | `training_state.config.<key>` | a setting of the run |
//!
//! and the checksum that covers all of it. A file without
//! `training_state` (a model checkpoint), of another version, or with an
//! entry this layout does not have is an [`Error::Format`] naming the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::generator;
use super::state::{Progress, RankState, ScheduleState, TrainingState};
use retrograd_engine::io::{read_checkpoint, write_checkpoint, TensorFile, TRAINING_STATE_KEY};
use retrograd_engine::{Error, Result};

/// The layout version this build writes and reads.
pub const TRAINING_STATE_VERSION: u32 = 1;

fn key(rest: &str) -> String {
    format!("{TRAINING_STATE_KEY}.{rest}")
}

/// Names of generators, values and settings go into metadata keys and
/// lines: anything but control characters.
fn check_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "TrainingState::save",
            format!("{kind} name {name:?} is empty or holds a control character"),
        ));
    }
    Ok(())
}

/// One rank's entries, keyed below `training_state.rank.<r>.`.
fn rank_entries(rank: &RankState) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, rng) in &rank.generators {
        check_name("generator", name)?;
        out.push((format!("generator.{name}"), generator::encode(rng)));
    }
    for (name, v) in &rank.values {
        check_name("value", name)?;
        out.push((format!("value.{name}"), format!("{v:?}")));
    }
    if let Some(rng) = &rank.default_generator {
        out.push(("default_generator".to_string(), generator::encode(rng)));
    }
    for (name, (seed, position)) in &rank.streams {
        out.push((format!("stream.{name}"), format!("{seed}:{position}")));
    }
    Ok(out)
}

/// Adds one entry to a rank's state; `Err` says why it is not one.
fn put_rank_entry(
    rank: &mut RankState,
    entry: &str,
    value: &str,
) -> std::result::Result<(), String> {
    if let Some(name) = entry.strip_prefix("generator.") {
        rank.generators
            .insert(name.to_string(), generator::decode(value)?);
    } else if let Some(name) = entry.strip_prefix("value.") {
        let v = value
            .parse::<f64>()
            .map_err(|_| format!("value `{name}` is {value:?}, not a number"))?;
        rank.values.insert(name.to_string(), v);
    } else if entry == "default_generator" {
        rank.default_generator = Some(generator::decode(value)?);
    } else if let Some(name) = entry.strip_prefix("stream.") {
        let stream = value
            .split_once(':')
            .and_then(|(s, p)| Some((s.parse().ok()?, p.parse().ok()?)))
            .ok_or_else(|| format!("stream `{name}` is {value:?}, not <seed>:<position>"))?;
        rank.streams.insert(name.to_string(), stream);
    } else {
        return Err(format!("unknown rank entry `{entry}`"));
    }
    Ok(())
}

/// A rank's state as lines of `entry\tvalue`, for gathering to rank 0.
pub(crate) fn encode_rank(rank: &RankState) -> Result<String> {
    Ok(rank_entries(rank)?
        .into_iter()
        .map(|(k, v)| format!("{k}\t{v}\n"))
        .collect())
}

/// The inverse of [`encode_rank`].
pub(crate) fn decode_rank(text: &str) -> std::result::Result<RankState, String> {
    let mut rank = RankState::default();
    for line in text.lines() {
        let (entry, value) = line
            .split_once('\t')
            .ok_or_else(|| format!("malformed line {line:?}"))?;
        put_rank_entry(&mut rank, entry, value)?;
    }
    Ok(rank)
}

impl TrainingState {
    /// The file's tensors and metadata.
    fn to_file(&self) -> Result<TensorFile> {
        let mut file = self.contents.clone();
        let meta = &mut file.metadata;
        meta.insert(
            TRAINING_STATE_KEY.to_string(),
            TRAINING_STATE_VERSION.to_string(),
        );
        let p = self.progress;
        meta.insert(key("step"), p.step.to_string());
        meta.insert(key("epoch"), p.epoch.to_string());
        meta.insert(key("batch"), p.batch.to_string());
        if let Some(s) = self.schedule {
            meta.insert(key("schedule.steps"), s.steps.to_string());
            meta.insert(key("schedule.base_lr"), format!("{:?}", s.base_lr));
        }
        meta.insert(key("ranks"), self.ranks.len().to_string());
        for (r, rank) in self.ranks.iter().enumerate() {
            for (entry, value) in rank_entries(rank)? {
                meta.insert(key(&format!("rank.{r}.{entry}")), value);
            }
        }
        for (name, value) in &self.config {
            check_name("setting", name)?;
            meta.insert(key(&format!("config.{name}")), value.clone());
        }
        Ok(file)
    }

    /// Writes the state to `path` atomically (a synced temporary file
    /// renamed into place, then the directory synced), with a checksum of
    /// everything in it.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write_checkpoint(path.as_ref(), self.to_file()?)
    }

    /// Reads a state written by [`save`](Self::save). A missing file is an
    /// [`Error::Io`]; a truncated or corrupted one (the checksum does not
    /// match), a model checkpoint without a training state, a state of
    /// another layout version, or a malformed entry is an
    /// [`Error::Format`] naming the file and the problem.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = read_checkpoint("TrainingState::load", path)?;
        Self::from_file(path, file)
    }

    fn from_file(path: &Path, mut file: TensorFile) -> Result<Self> {
        let bad = |reason: String| Error::Format {
            op: "TrainingState::load",
            path: path.display().to_string(),
            reason,
        };
        match file.metadata.remove(TRAINING_STATE_KEY) {
            None => {
                return Err(bad(
                    "a model checkpoint without a training state: a run cannot resume from it (periodic checkpoints of --checkpoint-every hold one)".to_string(),
                ))
            }
            Some(v) if v == TRAINING_STATE_VERSION.to_string() => {}
            Some(v) => {
                return Err(bad(format!(
                    "training state layout version {v:?}; this build reads version {TRAINING_STATE_VERSION}"
                )))
            }
        }
        // Every training state carries a checksum, which `read_checkpoint`
        // verified; without one a damaged key could pass unchecked.
        if !file.metadata.contains_key("checksum") {
            return Err(bad("no checksum (every training state has one)".to_string()));
        }
        let prefix = format!("{TRAINING_STATE_KEY}.");
        let entries: BTreeMap<String, String> = file
            .metadata
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(&prefix)
                    .map(|rest| (rest.to_string(), v.clone()))
            })
            .collect();
        file.metadata.retain(|k, _| !k.starts_with(&prefix));

        let number = |name: &str| -> Result<u64> {
            let text = entries
                .get(name)
                .ok_or_else(|| bad(format!("the training state has no `{}`", key(name))))?;
            text.parse()
                .map_err(|_| bad(format!("`{}` is {text:?}, not a count", key(name))))
        };
        let progress = Progress {
            step: number("step")?,
            epoch: number("epoch")?,
            batch: number("batch")?,
        };
        let ranks = usize::try_from(number("ranks")?)
            .ok()
            .filter(|&n| (1..=1 << 20).contains(&n))
            .ok_or_else(|| bad(format!("`{}` is not a rank count", key("ranks"))))?;
        let schedule = match (
            entries.get("schedule.steps"),
            entries.get("schedule.base_lr"),
        ) {
            (None, None) => None,
            (Some(_), Some(lr)) => Some(ScheduleState {
                steps: number("schedule.steps")?,
                base_lr: lr
                    .parse()
                    .map_err(|_| bad(format!("schedule base rate {lr:?} is not a number")))?,
            }),
            _ => {
                return Err(bad(
                    "half a schedule position (steps and base_lr go together)".into(),
                ))
            }
        };
        let mut state = TrainingState {
            contents: file,
            progress,
            schedule,
            ranks: vec![RankState::default(); ranks],
            config: BTreeMap::new(),
        };
        for (entry, value) in &entries {
            let known = [
                "step",
                "epoch",
                "batch",
                "ranks",
                "schedule.steps",
                "schedule.base_lr",
            ];
            if known.contains(&entry.as_str()) {
                continue;
            }
            if let Some(name) = entry.strip_prefix("config.") {
                state.config.insert(name.to_string(), value.clone());
            } else if let Some(rest) = entry.strip_prefix("rank.") {
                let (r, rank_entry) = rest
                    .split_once('.')
                    .and_then(|(r, e)| Some((r.parse::<usize>().ok()?, e)))
                    .ok_or_else(|| bad(format!("malformed entry `{}`", key(entry))))?;
                let rank = state.ranks.get_mut(r).ok_or_else(|| {
                    bad(format!(
                        "an entry of rank {r} in a state from {ranks} rank(s)"
                    ))
                })?;
                put_rank_entry(rank, rank_entry, value)
                    .map_err(|reason| bad(format!("rank {r}: {reason}")))?;
            } else {
                return Err(bad(format!(
                    "unknown entry `{}` (written by a newer layout?)",
                    key(entry)
                )));
            }
        }
        Ok(state)
    }
}

/// The path of a state written at `step` in `dir`: `step-000000123.safetensors`
/// (zero-padded, so names sort by step).
pub(crate) fn step_file(dir: &Path, step: u64) -> PathBuf {
    dir.join(format!("step-{step:09}.safetensors"))
}

/// The step of a file named by [`step_file`].
pub(crate) fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?.strip_suffix(".safetensors")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
