//! Reading a run log back: [`read_log`], [`Run`] and [`Series`].

use std::collections::BTreeMap;
use std::path::Path;

use super::writer::{io_error, STEP_KEY, TIME_KEY};
use retrograd_engine::base::error::{Error, Result};

/// One named scalar over a run: `(step, value)` points in step order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The points, by increasing step (NaN where a non-finite value was logged).
    pub points: Vec<(u64, f64)>,
}

impl Series {
    /// The steps of the points.
    pub fn steps(&self) -> Vec<u64> {
        self.points.iter().map(|p| p.0).collect()
    }

    /// The values of the points.
    pub fn values(&self) -> Vec<f64> {
        self.points.iter().map(|p| p.1).collect()
    }

    /// The last value logged.
    pub fn last(&self) -> Option<f64> {
        self.points.last().map(|p| p.1)
    }
}

/// A run read from its log: every named scalar as a [`Series`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// What the run is called on charts (the log's file stem by default).
    pub name: String,
    /// The series, by name.
    pub series: BTreeMap<String, Series>,
    /// Lines that were not records: a line torn by a crash, or text that
    /// is not a log's. An unfinished last line is not counted.
    pub skipped_lines: usize,
}

impl Run {
    /// The series called `name`.
    pub fn series(&self, name: &str) -> Option<&Series> {
        self.series.get(name)
    }

    /// The run under another name (for a chart's legend).
    pub fn named(mut self, name: &str) -> Run {
        self.name = name.to_string();
        self
    }

    /// Adds one record's values (what `read_log` does per line). A step
    /// below one already seen is a restart (a run resumed from an earlier
    /// checkpoint): every series forgets its points from that step on.
    fn add_record(
        &mut self,
        step: u64,
        values: impl Iterator<Item = (String, f64)>,
        max_step: &mut Option<u64>,
    ) {
        if max_step.is_some_and(|m| step < m) {
            for series in self.series.values_mut() {
                series.points.retain(|p| p.0 < step);
            }
        }
        *max_step = Some(max_step.map_or(step, |m| m.max(step)));
        for (name, value) in values {
            let series = self.series.entry(name).or_default();
            // The same step logged again: the later value wins.
            if series.points.last().is_some_and(|p| p.0 == step) {
                series.points.pop();
            }
            series.points.push((step, value));
        }
    }
}

/// Reads the log at `path` (written by [`RunLog`](super::RunLog)), also
/// while the run is still writing it: an unfinished last line is left out.
///
/// Errors: the file cannot be read ([`Error::Io`]); it has lines but none
/// of them is a record ([`Error::Format`], naming the first bad line).
pub fn read_log(path: impl AsRef<Path>) -> Result<Run> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("read run log", path, e))?;
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    let text = String::from_utf8_lossy(complete);
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().trim_end_matches(".log").to_string())
        .unwrap_or_default();
    let mut run = Run {
        name,
        ..Run::default()
    };
    let mut max_step = None;
    let mut first_bad: Option<(usize, String)> = None;
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_record(line) {
            Ok((step, values)) => run.add_record(step, values.into_iter(), &mut max_step),
            Err(reason) => {
                run.skipped_lines += 1;
                first_bad.get_or_insert((number + 1, reason));
            }
        }
    }
    if let (Some((line, reason)), None) = (first_bad, max_step) {
        return Err(Error::Format {
            op: "read run log",
            path: path.display().to_string(),
            reason: format!("line {line}: {reason}"),
        });
    }
    Ok(run)
}

/// `(step, [(name, value)])` of one line, or why it is not a record.
fn parse_record(line: &str) -> std::result::Result<(u64, Vec<(String, f64)>), String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
    let serde_json::Value::Object(fields) = value else {
        return Err("not a JSON object".into());
    };
    let step = fields
        .get(STEP_KEY)
        .and_then(serde_json::Value::as_u64)
        .ok_or("no whole-number `step`")?;
    let mut values = Vec::new();
    for (name, v) in fields {
        if name == STEP_KEY || name == TIME_KEY {
            continue;
        }
        let v = match v {
            serde_json::Value::Null => f64::NAN,
            other => other
                .as_f64()
                .ok_or_else(|| format!("`{name}` is not a number"))?,
        };
        values.push((name, v));
    }
    Ok((step, values))
}

#[cfg(test)]
mod tests {
    use super::super::RunLog;
    use super::*;

    #[test]
    fn unfinished_lines_restarts_and_non_finite_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log.jsonl");
        let mut log = RunLog::create(&path).unwrap();
        for step in 0..5 {
            log.log(step, &[("train/loss", 10.0 - step as f64)])
                .unwrap();
        }
        log.log(4, &[("val/loss", f64::NAN)]).unwrap();
        drop(log);
        // A crash in the middle of a record, then a run resumed at step 3.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"step\": 5, \"train/lo"))
            .unwrap();
        let torn = read_log(&path).unwrap();
        assert_eq!((torn.name.as_str(), torn.skipped_lines), ("run", 0));
        assert_eq!(torn.series("train/loss").unwrap().steps(), [0, 1, 2, 3, 4]);
        assert!(torn.series("val/loss").unwrap().last().unwrap().is_nan());
        let mut log = RunLog::append(&path).unwrap();
        log.log(3, &[("train/loss", 0.5)]).unwrap();
        let run = read_log(&path).unwrap();
        assert_eq!(run.skipped_lines, 1, "the torn record");
        let loss = run.series("train/loss").unwrap();
        assert_eq!(loss.points, [(0, 10.0), (1, 9.0), (2, 8.0), (3, 0.5)]);
        assert!(
            run.series("val/loss").unwrap().points.is_empty(),
            "step 4 is gone"
        );
    }

    #[test]
    fn bad_names_and_files_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/run.jsonl");
        let mut log = RunLog::create(&path).unwrap();
        for bad in ["", "step", "time", "a\nb"] {
            assert!(
                matches!(
                    log.log(0, &[(bad, 1.0)]),
                    Err(Error::InvalidArgument { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(log.log(0, &[("x", 1.0), ("x", 2.0)]).is_err());
        let not_a_log = dir.path().join("notes.txt");
        std::fs::write(&not_a_log, "hello\nworld\n").unwrap();
        let err = read_log(&not_a_log).unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("not JSON"), "{err}");
        assert!(matches!(
            read_log(dir.path().join("absent")),
            Err(Error::Io { .. })
        ));
        std::fs::write(&not_a_log, "").unwrap();
        assert!(read_log(&not_a_log).unwrap().series.is_empty());
    }
}
