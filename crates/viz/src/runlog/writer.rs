//! [`RunLog`]: named scalars appended per step to a JSON-lines file.

pub(crate) use retrograd_engine::base::error::io_error;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use retrograd_engine::base::error::{Error, Result};

/// Keys every record has; a scalar may not take their names.
pub(crate) const STEP_KEY: &str = "step";
pub(crate) const TIME_KEY: &str = "time";

/// A run's log: one JSON object per line, `{"step": 250, "time":
/// 1764730000.5, "train/loss": 1.73, "val/loss": 1.91}` (`time` in seconds
/// since the Unix epoch), written as the run goes.
///
/// Each record is a single `write` of one whole line to a file opened for
/// appending, with no buffering in between: a reader (a plot drawn while the
/// run goes on, `tail -f`) sees whole lines, and at worst a last line still
/// being written, which [`read_log`](super::read_log) leaves for next time.
/// A non-finite value is written as `null` and read back as NaN.
///
/// Names follow TensorBoard's habit: `split/metric` (`train/loss`,
/// `val/loss`) puts the splits of one metric on one chart.
///
/// ```
/// use retrograd::runlog::{read_log, RunLog};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("run.jsonl");
/// let mut log = RunLog::create(&path)?;
/// log.log(0, &[("train/loss", 2.3), ("lr", 1e-3)])?;
/// log.log(1, &[("train/loss", 1.9)])?;
/// let run = read_log(&path)?;                        // readable at any time
/// assert_eq!(run.series("train/loss").unwrap().steps(), vec![0, 1]);
/// assert_eq!(run.series("train/loss").unwrap().values(), vec![2.3, 1.9]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RunLog {
    file: File,
    path: PathBuf,
}

impl RunLog {
    /// Starts a new log at `path`, replacing any file there (a fresh run).
    /// The directory is created if needed.
    pub fn create(path: impl AsRef<Path>) -> Result<RunLog> {
        Self::open(path.as_ref(), true)
    }

    /// Continues the log at `path` (a resumed run), creating it if absent.
    /// A last line left unfinished by a crash is ended first, so the new
    /// records start on a line of their own. Records of steps at or after
    /// the step the run resumes from replace the earlier ones when read.
    pub fn append(path: impl AsRef<Path>) -> Result<RunLog> {
        Self::open(path.as_ref(), false)
    }

    fn open(path: &Path, truncate: bool) -> Result<RunLog> {
        let io = |e: std::io::Error| io_error("open run log", path, e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut options = OpenOptions::new();
        if truncate {
            options.write(true).create(true).truncate(true);
        } else {
            options.read(true).append(true).create(true);
        }
        let mut file = options.open(path).map_err(io)?;
        if !truncate && ends_mid_line(&mut file).map_err(io)? {
            file.write_all(b"\n").map_err(io)?;
        }
        Ok(RunLog {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The file this log writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record: `scalars` measured at `step`.
    ///
    /// Errors: an empty name, a name with control characters or one of the
    /// record's own keys (`step`, `time`), a name given twice
    /// ([`Error::InvalidArgument`]); a failed write ([`Error::Io`]).
    pub fn log(&mut self, step: u64, scalars: &[(&str, f64)]) -> Result<()> {
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        // Written by hand so that `step` and `time` come first, then the
        // scalars in the order given (serde_json's map would sort them).
        let mut line = format!("{{\"{STEP_KEY}\":{step},\"{TIME_KEY}\":{time}");
        for (k, &(name, value)) in scalars.iter().enumerate() {
            check_name(name)?;
            if scalars[..k].iter().any(|&(earlier, _)| earlier == name) {
                return Err(Error::InvalidArgument {
                    op: "RunLog::log",
                    reason: format!("`{name}` is given twice in one record"),
                });
            }
            // `from_f64` is None for NaN and infinities: JSON's `null`.
            let value = serde_json::Number::from_f64(value)
                .map_or(serde_json::Value::Null, serde_json::Value::Number);
            line.push_str(&format!(",{}:{value}", serde_json::Value::from(name)));
        }
        line.push_str("}\n");
        // One write of the whole line to an O_APPEND file: never interleaved
        // with another writer's record, never seen half-way by a reader
        // except as an unfinished last line.
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| io_error("write run log", &self.path, e))
    }

    /// Asks the system to put what was logged on disk (`fsync`); a reader
    /// on the same machine sees every record without it.
    pub fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| io_error("sync run log", &self.path, e))
    }
}

fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "a scalar needs a name".to_string()
    } else if name == STEP_KEY || name == TIME_KEY {
        format!("`{name}` is a key of every record, not a scalar's name")
    } else if name.chars().any(char::is_control) {
        format!("{name:?} has control characters")
    } else {
        return Ok(());
    };
    Err(Error::InvalidArgument {
        op: "RunLog::log",
        reason,
    })
}

/// Whether the file's last byte is not a line end (a torn last record).
fn ends_mid_line(file: &mut File) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}
