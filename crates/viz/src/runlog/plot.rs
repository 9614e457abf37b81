//! Charts of run logs as SVG line plots (the `plotters` crate, SVG backend
//! only): one chart per metric, train and validation on the same chart,
//! several runs overlaid, smoothing, and a log scale where values span
//! orders of magnitude.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::reader::Run;
use super::writer::io_error;
use crate::viz::label::number;
use crate::viz::write_atomically;
use retrograd_engine::base::error::{Error, Result};

/// Series with more points than this are smoothed when they are noisy
/// (drawn faint as logged, and bold smoothed); sparser ones (evaluations)
/// are drawn as logged, with a marker on each point.
pub const SMOOTH_ABOVE_POINTS: usize = 30;

/// Colours: of the splits of one run, or of the runs when several are drawn.
pub const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// How a chart's value axis is scaled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// Logarithmic when every value is positive and the largest is at
    /// least 100 times the smallest (two decades, so that the axis has at
    /// least two labelled powers of ten); linear otherwise.
    #[default]
    Auto,
    /// Linear.
    Linear,
    /// Logarithmic (values at or below zero are left out).
    Log,
}

/// How charts are drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOptions {
    /// TensorBoard's smoothing weight in `[0, 1)`: each drawn point is the
    /// debiased exponential moving average `s = w s + (1 - w) v`. Default 0.6.
    pub smoothing: f64,
    /// The value axis. Default [`Scale::Auto`].
    pub scale: Scale,
    /// Size of a chart in pixels. Default 720 x 420.
    pub size: (u32, u32),
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions {
            smoothing: 0.6,
            scale: Scale::Auto,
            size: (720, 420),
        }
    }
}

/// The charts `runs` make: each series `split/metric` goes on the chart
/// `metric`, under the legend `split`; a name without `/` is a chart of
/// its own. Sorted by name, each once.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// use retrograd::runlog::{charts, read_log, RunLog};
///
/// let mut log = RunLog::create(dir.path().join("run.jsonl"))?;
/// log.log(0, &[("train/loss", 2.5), ("lr", 1e-3), ("val/loss", 2.6)])?;
/// assert_eq!(charts(&[read_log(log.path())?]), ["loss", "lr"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn charts(runs: &[Run]) -> Vec<String> {
    let names: std::collections::BTreeSet<String> = runs
        .iter()
        .flat_map(|run| run.series.keys())
        .map(|series| chart_of(series).0.to_string())
        .collect();
    names.into_iter().collect()
}

/// `("loss", "train")` for `train/loss`, `("lr", "")` for `lr`.
fn chart_of(series: &str) -> (&str, &str) {
    match series.rsplit_once('/') {
        Some((split, metric)) => (metric, split),
        None => (series, ""),
    }
}

/// One line of a chart, ready to draw.
struct Line {
    legend: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    smoothed: Option<Vec<(f64, f64)>>,
}

/// The chart `chart` of `runs` as an SVG document.
///
/// ```
/// use retrograd::runlog::{plot_chart, read_log, PlotOptions, RunLog};
///
/// let dir = tempfile::tempdir()?;
/// let mut log = RunLog::create(dir.path().join("run.jsonl"))?;
/// for step in 0..100u64 {
///     log.log(step, &[("train/loss", 2.0 / (1.0 + step as f64))])?;
///     if step % 25 == 0 {
///         log.log(step, &[("val/loss", 2.2 / (1.0 + step as f64))])?;
///     }
/// }
/// let run = read_log(log.path())?;
/// let svg = plot_chart(&[run], "loss", &PlotOptions::default())?;
/// assert!(svg.starts_with("<svg") && svg.contains(">\ntrain\n<") && svg.contains(">\nval\n<"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Errors: no series of `runs` goes on that chart, or the smoothing weight
/// is outside `[0, 1)` ([`Error::InvalidArgument`]).
pub fn plot_chart(runs: &[Run], chart: &str, options: &PlotOptions) -> Result<String> {
    if !(0.0..1.0).contains(&options.smoothing) {
        return Err(Error::InvalidArgument {
            op: "plot_chart",
            reason: format!("smoothing {} is outside [0, 1)", options.smoothing),
        });
    }
    let lines = lines(runs, chart, options.smoothing);
    if lines.is_empty() {
        return Err(Error::InvalidArgument {
            op: "plot_chart",
            reason: format!("no series goes on the chart `{chart}` (its series are called `{chart}` or `SPLIT/{chart}`)"),
        });
    }
    let all = || {
        lines
            .iter()
            .flat_map(|l| l.points.iter().chain(l.smoothed.iter().flatten()))
    };
    let (x0, x1) = bounds(all().map(|p| p.0));
    let log = match options.scale {
        Scale::Linear => false,
        Scale::Log => true,
        Scale::Auto => {
            let (lo, hi) = bounds(all().map(|p| p.1));
            lo > 0.0 && hi >= 100.0 * lo
        }
    };
    let ys = all().map(|p| p.1).filter(|&v| !log || v > 0.0);
    let (y0, y1) = bounds(ys);
    let x = if x1 > x0 { x0..x1 } else { x0..x0 + 1.0 };
    let caption = match runs {
        [only] if !only.name.is_empty() => format!("{chart} ({})", only.name),
        _ => chart.to_string(),
    };
    let mut svg = String::new();
    let drawn = if log {
        let (lo, hi) = if y1 > y0 {
            (y0 / 1.1, y1 * 1.1)
        } else {
            (y0 / 2.0, y0 * 2.0)
        };
        draw(
            &mut svg,
            options.size,
            &caption,
            chart,
            x,
            (lo..hi).log_scale(),
            &lines,
        )
    } else {
        let pad = if y1 > y0 {
            0.05 * (y1 - y0)
        } else {
            y0.abs().max(1.0) * 0.1
        };
        draw(
            &mut svg,
            options.size,
            &caption,
            chart,
            x,
            (y0 - pad)..(y1 + pad),
            &lines,
        )
    };
    drawn.map_err(|e| Error::Format {
        op: "plot_chart",
        path: chart.to_string(),
        reason: e.to_string(),
    })?;
    Ok(svg)
}

/// Writes one SVG per chart of `runs` into `dir` (created if needed), each
/// atomically (a temporary file renamed into place, so a browser reloading
/// it mid-run never sees half a picture), named after the chart
/// (`loss.svg`, `lr.svg`). Returns the files written.
pub fn write_plots(
    runs: &[Run],
    dir: impl AsRef<Path>,
    options: &PlotOptions,
) -> Result<Vec<PathBuf>> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(|e| io_error("create plot directory", dir, e))?;
    let mut written = Vec::new();
    for chart in charts(runs) {
        let svg = plot_chart(runs, &chart, options)?;
        let file: String = chart
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{file}.svg"));
        write_atomically(&path, svg.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// The lines of `chart`: one per run and split, coloured by split when
/// there is one run and by run otherwise.
fn lines(runs: &[Run], chart: &str, smoothing: f64) -> Vec<Line> {
    let mut lines = Vec::new();
    for (r, run) in runs.iter().enumerate() {
        for (name, series) in &run.series {
            let (metric, split) = chart_of(name);
            if metric != chart {
                continue;
            }
            let points: Vec<(f64, f64)> = series
                .points
                .iter()
                .filter(|p| p.1.is_finite())
                .map(|&(s, v)| (s as f64, v))
                .collect();
            let legend = match (runs.len(), split) {
                (1, "") => run.name.clone(),
                (1, split) => split.to_string(),
                (_, "") => run.name.clone(),
                (_, split) => format!("{} {split}", run.name),
            };
            let k = if runs.len() == 1 { lines.len() } else { r };
            let dense = points.len() > SMOOTH_ABOVE_POINTS;
            let smoothed =
                (dense && smoothing > 0.0 && noisy(&points)).then(|| smooth(&points, smoothing));
            lines.push(Line {
                legend,
                color: color(k),
                points,
                smoothed,
            });
        }
    }
    lines
}

/// Whether a series zigzags: its steps change direction at more than a
/// tenth of its points. A loss per batch does; a learning-rate schedule,
/// which smoothing would only delay, does not.
fn noisy(points: &[(f64, f64)]) -> bool {
    let turns = points
        .windows(3)
        .filter(|w| (w[1].1 - w[0].1) * (w[2].1 - w[1].1) < 0.0)
        .count();
    turns * 10 > points.len()
}

/// TensorBoard's debiased exponential moving average.
pub(crate) fn smooth(points: &[(f64, f64)], weight: f64) -> Vec<(f64, f64)> {
    let mut last = 0.0;
    points
        .iter()
        .enumerate()
        .map(|(k, &(x, v))| {
            last = last * weight + (1.0 - weight) * v;
            (x, last / (1.0 - weight.powi(k as i32 + 1)))
        })
        .collect()
}

fn color(k: usize) -> RGBColor {
    let hex = PALETTE[k % PALETTE.len()];
    let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).expect("a hex colour");
    RGBColor(channel(1), channel(3), channel(5))
}

/// `(min, max)` of the finite values, `(0, 1)` when there are none.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        (0.0, 1.0)
    } else {
        (lo, hi)
    }
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw<Y>(
    svg: &mut String,
    size: (u32, u32),
    caption: &str,
    chart: &str,
    x: std::ops::Range<f64>,
    y: Y,
    lines: &[Line],
) -> DrawResult
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = SVGBackend::with_string(svg, size).into_drawing_area();
    root.fill(&WHITE)?;
    let mut plot = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(42)
        .y_label_area_size(84)
        .build_cartesian_2d(x, y)?;
    plot.configure_mesh()
        .x_desc("step")
        .y_desc(chart)
        .label_style(("sans-serif", 17))
        .axis_desc_style(("sans-serif", 18))
        .x_label_formatter(&|v| number(*v))
        .y_label_formatter(&|v| number(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for line in lines {
        let color = line.color;
        let bold = match &line.smoothed {
            Some(smoothed) => {
                plot.draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    color.mix(0.25),
                ))?;
                plot.draw_series(LineSeries::new(
                    smoothed.iter().copied(),
                    color.stroke_width(2),
                ))?
            }
            None => plot.draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(2),
            ))?,
        };
        // The legend: a sample of the line, then its label.
        bold.label(line.legend.as_str()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
        });
        if line.points.len() <= SMOOTH_ABOVE_POINTS {
            plot.draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, color.filled())),
            )?;
        }
    }
    plot.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 17))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_tensorboards_debiased_average() {
        let s = smooth(&[(0.0, 1.0), (1.0, 3.0)], 0.5);
        assert_eq!(s[0], (0.0, 1.0), "debiased: the first point is itself");
        assert_eq!(
            s[1],
            (1.0, 1.75 / 0.75),
            "(0.5 * 0.5 * 1 + 0.5 * 3) / (1 - 0.5²)"
        );
        assert_eq!(chart_of("train/loss"), ("loss", "train"));
        assert_eq!(chart_of("lr"), ("lr", ""));
        assert_eq!(bounds([f64::NAN, 2.0, -1.0].into_iter()), (-1.0, 2.0));
        assert_eq!(color(1), RGBColor(0xff, 0x7f, 0x0e));
        let ramp: Vec<(f64, f64)> = (0..40).map(|k| (k as f64, (k as f64).min(20.0))).collect();
        let zigzag: Vec<(f64, f64)> = (0..40).map(|k| (k as f64, (k % 2) as f64)).collect();
        assert!(!noisy(&ramp) && noisy(&zigzag));
    }
}
