//! Where the time of repeated runs goes, part by part: the steps of a
//! compiled step's replay (`Compiled::profile`) or the nodes of an imported
//! ONNX model (`OnnxModel::profile`). Wall time around each part, summed
//! over the runs; a part that splits its work over the thread pool counts
//! once, by the calling thread's clock.

use std::fmt;
use std::time::Duration;

/// One part of a run (a step, a node) and its time over all runs.
#[derive(Clone, Debug)]
pub struct PartTime {
    /// Its place in the run, from 0.
    pub index: usize,
    /// What kind of work it is: an op's name, `fused`, an ONNX op type.
    /// Parts of one kind are summed in [`Profile::by_kind`].
    pub kind: String,
    /// What it runs, in a line.
    pub label: String,
    /// Its wall time summed over the runs.
    pub total: Duration,
}

/// The time of each kind of part, per run.
#[derive(Clone, Debug)]
pub struct KindTime {
    /// The kind, as the parts name it.
    pub kind: String,
    /// Parts of this kind in one run.
    pub parts: usize,
    /// Their time per run, summed.
    pub per_run: Duration,
}

/// Per-part wall times of `runs` runs, in run order.
#[derive(Clone, Debug)]
pub struct Profile {
    runs: u32,
    parts: Vec<PartTime>,
}

impl Profile {
    /// A profile of `runs` runs (at least one) with these parts.
    pub(crate) fn new(runs: u32, parts: Vec<PartTime>) -> Self {
        Profile {
            runs: runs.max(1),
            parts,
        }
    }

    /// A profile of `runs` runs from `clock`'s sums, part `i` named by the
    /// `i`-th `(kind, label)`.
    pub fn of_clock(
        runs: u32,
        names: impl IntoIterator<Item = (String, String)>,
        clock: &PartClock,
    ) -> Self {
        let parts = names
            .into_iter()
            .zip(clock.totals())
            .enumerate()
            .map(|(index, ((kind, label), &total))| PartTime {
                index,
                kind,
                label,
                total,
            })
            .collect();
        Profile::new(runs, parts)
    }

    /// How many runs were timed.
    pub fn runs(&self) -> u32 {
        self.runs
    }

    /// Every part, in run order.
    pub fn parts(&self) -> &[PartTime] {
        &self.parts
    }

    /// One part's time per run.
    pub fn per_run_of(&self, part: &PartTime) -> Duration {
        part.total / self.runs
    }

    /// The parts' time per run, summed (the run's time less what falls
    /// between parts: binding inputs, effects such as optimizer updates).
    pub fn per_run(&self) -> Duration {
        self.parts.iter().map(|p| p.total).sum::<Duration>() / self.runs
    }

    /// Time per run by kind, the largest first (ties by name).
    pub fn by_kind(&self) -> Vec<KindTime> {
        let mut kinds: Vec<KindTime> = Vec::new();
        for p in &self.parts {
            match kinds.iter_mut().find(|k| k.kind == p.kind) {
                Some(k) => {
                    k.parts += 1;
                    k.per_run += p.total;
                }
                None => kinds.push(KindTime {
                    kind: p.kind.clone(),
                    parts: 1,
                    per_run: p.total,
                }),
            }
        }
        for k in &mut kinds {
            k.per_run /= self.runs;
        }
        kinds.sort_by(|a, b| b.per_run.cmp(&a.per_run).then_with(|| a.kind.cmp(&b.kind)));
        kinds
    }

    /// The `top` slowest parts, the largest first (ties in run order).
    pub fn slowest(&self, top: usize) -> Vec<&PartTime> {
        let mut parts: Vec<&PartTime> = self.parts.iter().collect();
        parts.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.index.cmp(&b.index)));
        parts.truncate(top);
        parts
    }

    /// The table by kind, then the `top` slowest parts, each with its time
    /// per run and share of the parts' total.
    pub fn report(&self, top: usize) -> String {
        use fmt::Write;
        let total = self.per_run();
        let share = |d: Duration| {
            if total.is_zero() {
                0.0
            } else {
                100.0 * d.as_secs_f64() / total.as_secs_f64()
            }
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} parts, {:.3} ms a run (mean of {} runs)",
            self.parts.len(),
            ms(total),
            self.runs
        );
        let _ = writeln!(
            s,
            "\nby kind:\n  {:>10}  {:>6}  {:>5}  kind",
            "ms/run", "share", "parts"
        );
        for k in self.by_kind() {
            let _ = writeln!(
                s,
                "  {:>10.3}  {:>5.1}%  {:>5}  {}",
                ms(k.per_run),
                share(k.per_run),
                k.parts,
                k.kind
            );
        }
        let _ = writeln!(
            s,
            "\nslowest parts:\n  {:>10}  {:>6}  {:>5}  part",
            "ms/run", "share", "#"
        );
        for p in self.slowest(top) {
            let d = self.per_run_of(p);
            let _ = writeln!(
                s,
                "  {:>10.3}  {:>5.1}%  {:>5}  {}",
                ms(d),
                share(d),
                p.index,
                p.label
            );
        }
        s
    }
}

impl fmt::Display for Profile {
    /// [`report`](Profile::report) with the 20 slowest parts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.report(20))
    }
}

/// Sums wall time per part over runs.
#[derive(Debug, Default)]
pub struct PartClock {
    totals: Vec<Duration>,
}

impl PartClock {
    /// A clock for `parts` parts, all at zero.
    pub fn new(parts: usize) -> Self {
        PartClock {
            totals: vec![Duration::ZERO; parts],
        }
    }

    /// Adds the time since `start` to part `i`.
    pub fn add(&mut self, i: usize, start: std::time::Instant) {
        if let Some(t) = self.totals.get_mut(i) {
            *t += start.elapsed();
        }
    }

    /// The sums, in part order.
    pub(crate) fn totals(&self) -> &[Duration] {
        &self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(index: usize, kind: &str, ms: u64) -> PartTime {
        PartTime {
            index,
            kind: kind.into(),
            label: format!("{kind} #{index}"),
            total: Duration::from_millis(ms),
        }
    }

    #[test]
    fn kinds_sum_their_parts_per_run_largest_first() {
        let p = Profile::new(
            2,
            vec![
                part(0, "matmul", 10),
                part(1, "fused", 4),
                part(2, "matmul", 6),
                part(3, "add", 4),
            ],
        );
        assert_eq!(p.per_run(), Duration::from_millis(12));
        let kinds: Vec<(String, usize, u128)> = p
            .by_kind()
            .into_iter()
            .map(|k| (k.kind, k.parts, k.per_run.as_millis()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("matmul".into(), 2, 8),
                ("add".into(), 1, 2),
                ("fused".into(), 1, 2)
            ]
        );
        let slowest: Vec<usize> = p.slowest(3).iter().map(|q| q.index).collect();
        assert_eq!(slowest, vec![0, 2, 1]);
        assert_eq!(p.per_run_of(&p.parts()[0]), Duration::from_millis(5));
    }

    #[test]
    fn report_names_every_kind_and_the_slowest_parts() {
        let p = Profile::new(1, vec![part(0, "matmul", 3), part(1, "gelu", 1)]);
        let r = p.report(1);
        assert!(
            r.starts_with("2 parts, 4.000 ms a run (mean of 1 runs)"),
            "{r}"
        );
        assert!(r.contains("3.000   75.0%      1  matmul"), "{r}");
        assert!(r.contains("1.000   25.0%      1  gelu"), "{r}");
        let slow = r.split("slowest parts:").nth(1).unwrap();
        assert!(
            slow.contains("matmul #0") && !slow.contains("gelu #1"),
            "{r}"
        );
        // An empty profile reports zeros, not NaN shares.
        assert!(Profile::new(0, Vec::new())
            .report(5)
            .starts_with("0 parts, 0.000 ms"));
    }

    #[test]
    fn the_clock_adds_to_its_part_and_ignores_others() {
        let mut c = PartClock::new(2);
        let start = std::time::Instant::now() - Duration::from_millis(2);
        c.add(1, start);
        c.add(7, start);
        assert!(c.totals()[0].is_zero());
        assert!(c.totals()[1] >= Duration::from_millis(2));
    }
}
