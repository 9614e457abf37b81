//! [`CheckpointDir`]: a directory of periodic training states, the newest
//! `keep` of them kept, and the newest one that loads found again.

use retrograd_engine::base::error::io_error;
use std::path::{Path, PathBuf};

use super::format::{step_file, step_of};
use super::state::TrainingState;
use retrograd_engine::{Error, Result};

/// A directory of training states written every so many steps,
/// `step-000000120.safetensors` and so on.
///
/// - [`save`](Self::save) writes the new state atomically (temporary file,
///   fsync, rename, fsync of the directory), and only then deletes the
///   oldest states beyond `keep`: the last good state is never deleted
///   before the new one is complete, and a crash at any moment leaves
///   complete states only (at worst a stray temporary file, which
///   [`open`](Self::open) removes).
/// - [`newest_good`](Self::newest_good) loads the newest state whose
///   checksum holds; a truncated or corrupted one is skipped and reported,
///   and the one before it used.
///
/// ```
/// use retrograd::{nn::Linear, train::{CheckpointDir, Progress, RankState, TrainingState}};
/// let tmp = tempfile::tempdir().unwrap();
/// let dir = CheckpointDir::open(tmp.path().join("ckpt"), 2)?;
/// let model = Linear::new(2, 1)?;
/// for step in [10, 20, 30] {
///     let progress = Progress { step, ..Progress::default() };
///     dir.save(&TrainingState::capture(&model, None, None, progress, RankState::new())?)?;
/// }
/// let steps: Vec<u64> = dir.list()?.into_iter().map(|(s, _)| s).collect();
/// assert_eq!(steps, [20, 30]); // keep 2
/// // The newest file is damaged: it is skipped, and the one before used.
/// std::fs::write(dir.path_for(30), b"not a checkpoint").unwrap();
/// let found = dir.newest_good()?.expect("step 20 loads");
/// assert_eq!(found.state.progress().step, 20);
/// assert_eq!(found.skipped.len(), 1);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
    keep: usize,
}

/// A state found by [`CheckpointDir::newest_good`], with the newer files
/// that failed to load and why.
#[derive(Debug)]
pub struct FoundState {
    /// The file it was read from.
    pub path: PathBuf,
    /// The state.
    pub state: TrainingState,
    /// Newer files that could not be used, newest first, with their errors.
    pub skipped: Vec<(PathBuf, Error)>,
}

impl CheckpointDir {
    /// Opens (creating it if needed) the directory `dir`, keeping the
    /// newest `keep` (at least 1) states, and removes the temporary files
    /// a write cut short left there.
    pub fn open(dir: impl Into<PathBuf>, keep: usize) -> Result<Self> {
        let dir = dir.into();
        if keep == 0 {
            return Err(Error::invalid(
                "CheckpointDir::open",
                "keep must be at least 1 (the state a run resumes from)",
            ));
        }
        std::fs::create_dir_all(&dir).map_err(|e| io_error("CheckpointDir::open", &dir, e))?;
        let this = CheckpointDir { dir, keep };
        this.remove_temporaries()?;
        Ok(this)
    }

    /// The directory, as [`open`](Self::open) would, but without creating
    /// it or touching its files (a rank that only reads from it).
    pub(crate) fn open_existing(dir: impl Into<PathBuf>, keep: usize) -> Self {
        CheckpointDir {
            dir: dir.into(),
            keep: keep.max(1),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many states are kept.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Where the state of `step` is written.
    pub fn path_for(&self, step: u64) -> PathBuf {
        step_file(&self.dir, step)
    }

    /// The states in the directory, oldest first: `(step, path)`.
    pub fn list(&self) -> Result<Vec<(u64, PathBuf)>> {
        let op = "CheckpointDir::list";
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io_error(op, &self.dir, e))? {
            let entry = entry.map_err(|e| io_error(op, &self.dir, e))?;
            if let Some(step) = entry.file_name().to_str().and_then(step_of) {
                found.push((step, entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Writes `state` as the state of its step (replacing a file of the
    /// same step), then deletes the oldest states beyond `keep`; returns
    /// the new file's path.
    pub fn save(&self, state: &TrainingState) -> Result<PathBuf> {
        let path = self.path_for(state.progress().step);
        state.save(&path)?;
        let listed = self.list()?;
        let excess = listed.len().saturating_sub(self.keep);
        for (_, old) in listed.iter().filter(|(_, p)| *p != path).take(excess) {
            std::fs::remove_file(old).map_err(|e| io_error("CheckpointDir::save", old, e))?;
        }
        Ok(path)
    }

    /// The newest state that loads, or `None` if no state loads (or there
    /// is none); the newer ones that do not load are in
    /// [`FoundState::skipped`].
    pub fn newest_good(&self) -> Result<Option<FoundState>> {
        let mut skipped = Vec::new();
        for (_, path) in self.list()?.into_iter().rev() {
            match TrainingState::load(&path) {
                Ok(state) => {
                    return Ok(Some(FoundState {
                        path,
                        state,
                        skipped,
                    }))
                }
                Err(e) => skipped.push((path, e)),
            }
        }
        Ok(None)
    }

    /// Removes the temporary files of writes that never finished (a crash
    /// or a kill while saving): `.step-*.tmp`. Returns how many there were.
    pub fn remove_temporaries(&self) -> Result<usize> {
        let op = "CheckpointDir::remove_temporaries";
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io_error(op, &self.dir, e))? {
            let entry = entry.map_err(|e| io_error(op, &self.dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".step-") && name.ends_with(".tmp") {
                std::fs::remove_file(entry.path()).map_err(|e| io_error(op, &entry.path(), e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}
