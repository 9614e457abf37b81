//! Training-curve plots read back as a person reads them: the SVG is parsed
//! as XML, the axes' tick labels give the mapping from pixels to steps and
//! values, and every drawn series (raw, smoothed, evaluation markers) is
//! checked against the numbers logged, the legend against its colours, the
//! axis ranges against the data.

use retrograd::runlog::{plot_chart, read_log, PlotOptions, Run, RunLog, Scale};

/// A drawn line or marker set: its colour, opacity and pixel points.
#[derive(Debug)]
struct Mark {
    color: String,
    opacity: f64,
    points: Vec<(f64, f64)>,
}

/// An axis: pixel position to value, from two or more tick labels.
struct Axis {
    ticks: Vec<(f64, f64)>, // (pixel, value)
    log: bool,
}

impl Axis {
    fn value(&self, px: f64) -> f64 {
        let f = |v: f64| if self.log { v.log10() } else { v };
        let (p0, v0) = self.ticks[0];
        let (p1, v1) = *self.ticks.last().unwrap();
        let t = f(v0) + (px - p0) * (f(v1) - f(v0)) / (p1 - p0);
        if self.log {
            10f64.powf(t)
        } else {
            t
        }
    }

    /// How far one pixel moves the value near `v` (the drawing is rounded
    /// to whole pixels).
    fn pixel(&self, v: f64) -> f64 {
        let (p0, v0) = self.ticks[0];
        let (p1, v1) = *self.ticks.last().unwrap();
        if self.log {
            v * ((v1.log10() - v0.log10()) / (p1 - p0)).abs() * std::f64::consts::LN_10
        } else {
            ((v1 - v0) / (p1 - p0)).abs()
        }
    }
}

struct Plot {
    x: Axis,
    y: Axis,
    /// The plot area's vertical extent in pixels (top, bottom).
    area: (f64, f64),
    lines: Vec<Mark>,
    markers: Vec<Mark>,
    legend: Vec<(String, String)>, // (label, colour)
}

fn attr(n: roxmltree::Node, name: &str) -> f64 {
    n.attribute(name).unwrap_or("1").parse().unwrap()
}

fn parse(svg: &str, log_y: bool) -> Plot {
    let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
    let texts: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .collect();
    let number = |n: &roxmltree::Node| n.text().unwrap_or("").trim().parse::<f64>().ok();
    let mut x_ticks = Vec::new();
    let mut y_ticks = Vec::new();
    for t in &texts {
        match (t.attribute("text-anchor"), number(t)) {
            (Some("middle"), Some(v)) => x_ticks.push((attr(*t, "x"), v)),
            (Some("end"), Some(v)) => y_ticks.push((attr(*t, "y"), v)),
            _ => {}
        }
    }
    assert!(
        x_ticks.len() >= 2 && y_ticks.len() >= 2,
        "tick labels: {x_ticks:?} {y_ticks:?}"
    );
    // The legend box: its labels start at the left, each after its sample line.
    let legend_box = doc
        .descendants()
        .find(|n| n.has_tag_name("rect") && n.attribute("fill") == Some("none"))
        .map(|r| {
            (
                attr(r, "x"),
                attr(r, "y"),
                attr(r, "width"),
                attr(r, "height"),
            )
        })
        .expect("a legend");
    let inside = |(x, y): (f64, f64)| {
        let (lx, ly, w, h) = legend_box;
        x >= lx && x <= lx + w && y >= ly && y <= ly + h
    };
    let mut lines = Vec::new();
    let mut samples = Vec::new();
    let mut axis_line = None;
    for p in doc.descendants().filter(|n| n.has_tag_name("polyline")) {
        let points: Vec<(f64, f64)> = p
            .attribute("points")
            .unwrap()
            .split_whitespace()
            .map(|xy| {
                let (x, y) = xy.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        let color = p.attribute("stroke").unwrap().to_ascii_lowercase();
        let mark = Mark {
            color,
            opacity: attr(p, "opacity"),
            points,
        };
        if mark.color == "#000000" {
            // The value axis: the vertical black line of the plot area's left side.
            if mark.points.len() == 2 && mark.points[0].0 == mark.points[1].0 && mark.opacity == 1.0
            {
                let (a, b) = (mark.points[0].1, mark.points[1].1);
                if axis_line.is_none_or(|(t, bo): (f64, f64)| b - a > bo - t) {
                    axis_line = Some((a.min(b), a.max(b)));
                }
            }
        } else if mark.points.iter().all(|&p| inside(p)) {
            samples.push(mark);
        } else {
            lines.push(mark);
        }
    }
    let mut markers: Vec<Mark> = Vec::new();
    for c in doc.descendants().filter(|n| n.has_tag_name("circle")) {
        let color = c.attribute("fill").unwrap().to_ascii_lowercase();
        let point = (attr(c, "cx"), attr(c, "cy"));
        match markers.iter_mut().find(|m| m.color == color) {
            Some(m) => m.points.push(point),
            None => markers.push(Mark {
                color,
                opacity: 1.0,
                points: vec![point],
            }),
        }
    }
    let legend = texts
        .iter()
        .filter(|t| t.attribute("text-anchor") == Some("start"))
        .map(|t| {
            let y = attr(*t, "y");
            let sample = samples
                .iter()
                .min_by(|a, b| {
                    let d = |m: &Mark| (m.points[0].1 - y).abs();
                    d(a).total_cmp(&d(b))
                })
                .expect("a legend sample per label");
            (t.text().unwrap().trim().to_string(), sample.color.clone())
        })
        .collect();
    Plot {
        x: Axis {
            ticks: x_ticks,
            log: false,
        },
        y: Axis {
            ticks: y_ticks,
            log: log_y,
        },
        area: axis_line.expect("the value axis"),
        lines,
        markers,
        legend,
    }
}

impl Plot {
    fn color_of(&self, legend: &str) -> &str {
        &self
            .legend
            .iter()
            .find(|l| l.0 == legend)
            .unwrap_or_else(|| panic!("no legend {legend}: {:?}", self.legend))
            .1
    }

    /// The drawn points of `mark` as (step, value).
    fn data(&self, mark: &Mark) -> Vec<(f64, f64)> {
        mark.points
            .iter()
            .map(|&(x, y)| (self.x.value(x), self.y.value(y)))
            .collect()
    }

    /// Asserts `mark` draws exactly `expected`, to within the rounding of
    /// its pixels and of the tick marks' (the SVG backend draws on whole
    /// pixels): 1.5 pixels.
    fn assert_draws(&self, mark: &Mark, expected: &[(f64, f64)], what: &str) {
        let drawn = self.data(mark);
        assert_eq!(drawn.len(), expected.len(), "{what}: point count");
        for (k, (&(s, v), &(es, ev))) in drawn.iter().zip(expected).enumerate() {
            assert!(
                (s - es).abs() <= 1.5 * self.x.pixel(es),
                "{what}[{k}]: step {s} drawn for {es}"
            );
            assert!(
                (v - ev).abs() <= 1.5 * self.y.pixel(ev),
                "{what}[{k}]: value {v} drawn for {ev} ({} px off; ticks {:?})",
                (v - ev).abs() / self.y.pixel(ev),
                self.y.ticks
            );
        }
    }
}

fn smooth(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    let mut last = 0.0;
    let mut debias = 1.0;
    points
        .iter()
        .map(|&(s, v)| {
            last = w * last + (1.0 - w) * v;
            debias *= w;
            (s, last / (1.0 - debias))
        })
        .collect()
}

/// A run: a noisy training loss at every step, validation every 50 steps,
/// a learning rate, and a gradient norm falling over three decades.
fn write_run(dir: &std::path::Path, name: &str, scale: f64) -> Run {
    let path = dir.join(format!("{name}.jsonl"));
    let mut log = RunLog::create(&path).unwrap();
    for step in 0..=200u64 {
        let s = step as f64;
        let noise = 0.05 * ((s * 12.9898).sin() * 43758.5453).fract();
        let mut scalars = vec![
            (
                "train/loss",
                scale * (2.0 * (-s / 60.0).exp() + 0.3 + noise),
            ),
            ("lr", 1e-3 * (1.0 - s / 400.0)),
            ("grad_norm", 4.0 * (-s / 25.0).exp()),
        ];
        if step % 50 == 0 {
            scalars.push(("val/loss", scale * (2.1 * (-s / 70.0).exp() + 0.4)));
        }
        log.log(step, &scalars).unwrap();
    }
    read_log(&path).unwrap()
}

fn points(run: &Run, name: &str) -> Vec<(f64, f64)> {
    run.series(name)
        .unwrap()
        .points
        .iter()
        .map(|&(s, v)| (s as f64, v))
        .collect()
}

#[test]
fn train_and_validation_share_a_chart_smoothed_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "run", 1.0);
    let options = PlotOptions::default();
    let plot = parse(
        &plot_chart(&[run.clone()], "loss", &options).unwrap(),
        false,
    );
    assert_eq!(
        plot.legend.iter().map(|l| l.0.as_str()).collect::<Vec<_>>(),
        ["train", "val"]
    );
    let (train, val) = (plot.color_of("train"), plot.color_of("val"));
    assert_ne!(train, val);

    // Train: the logged values drawn faint, and their smoothed curve in bold.
    let logged = points(&run, "train/loss");
    let of = |color: &str, faint: bool| {
        plot.lines
            .iter()
            .find(|m| m.color == color && (m.opacity < 1.0) == faint)
            .unwrap_or_else(|| panic!("no line {color} faint={faint}"))
    };
    plot.assert_draws(of(train, true), &logged, "raw train loss");
    plot.assert_draws(
        of(train, false),
        &smooth(&logged, options.smoothing),
        "smoothed train loss",
    );
    // Validation: 5 evaluations, drawn as logged with a marker on each.
    let val_logged = points(&run, "val/loss");
    plot.assert_draws(of(val, false), &val_logged, "validation line");
    let markers = plot
        .markers
        .iter()
        .find(|m| m.color == val)
        .expect("validation markers");
    plot.assert_draws(markers, &val_logged, "validation markers");

    // Axes: steps 0..200 end to end; values from the smallest to the
    // largest drawn, 5% of the span beyond each.
    let xs: Vec<f64> = plot.data(of(train, true)).iter().map(|p| p.0).collect();
    assert!(
        xs[0].abs() < 0.5 && (xs[xs.len() - 1] - 200.0).abs() < 0.5,
        "{xs:?}"
    );
    let all: Vec<f64> = logged.iter().chain(&val_logged).map(|p| p.1).collect();
    let (lo, hi) = (
        all.iter().cloned().fold(f64::INFINITY, f64::min),
        all.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    let pad = 0.05 * (hi - lo);
    let (top, bottom) = (plot.y.value(plot.area.0), plot.y.value(plot.area.1));
    assert!(
        (top - (hi + pad)).abs() <= 1.5 * plot.y.pixel(hi),
        "top {top} for {}",
        hi + pad
    );
    assert!(
        (bottom - (lo - pad)).abs() <= 1.5 * plot.y.pixel(lo),
        "bottom {bottom} for {}",
        lo - pad
    );
}

#[test]
fn values_over_decades_get_a_log_axis() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "run", 1.0);
    let svg = plot_chart(&[run.clone()], "grad_norm", &PlotOptions::default()).unwrap();
    let plot = parse(&svg, true);
    // Powers of ten only, evenly spaced: a log axis.
    let ticks = &plot.y.ticks;
    assert!(
        ticks.iter().all(|t| t.1.log10().fract().abs() < 1e-9),
        "{ticks:?}"
    );
    let gaps: Vec<f64> = ticks.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(gaps.iter().all(|g| (g - gaps[0]).abs() <= 1.0), "{gaps:?}");
    // A smooth series (no zigzag) is drawn once, as logged, not smoothed.
    let logged = points(&run, "grad_norm");
    assert_eq!(plot.lines.len(), 1);
    plot.assert_draws(&plot.lines[0], &logged, "gradient norm");
    // The learning rate spans less than two decades: linear.
    let lr = parse(
        &plot_chart(&[run.clone()], "lr", &PlotOptions::default()).unwrap(),
        false,
    );
    assert_eq!(lr.lines.len(), 1);
    lr.assert_draws(&lr.lines[0], &points(&run, "lr"), "learning rate");
    // Forced linear, the gradient norm reads back linearly.
    let linear = PlotOptions {
        scale: Scale::Linear,
        ..PlotOptions::default()
    };
    let plot = parse(&plot_chart(&[run], "grad_norm", &linear).unwrap(), false);
    plot.assert_draws(&plot.lines[0], &logged, "linear");
}

#[test]
fn several_runs_overlay_in_their_own_colours() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_run(dir.path(), "a", 1.0);
    let b = write_run(dir.path(), "b", 0.5);
    let plot = parse(
        &plot_chart(&[a.clone(), b.clone()], "loss", &PlotOptions::default()).unwrap(),
        false,
    );
    let labels: Vec<&str> = plot.legend.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(labels, ["a train", "a val", "b train", "b val"]);
    assert_eq!(
        plot.color_of("a train"),
        plot.color_of("a val"),
        "a run has one colour"
    );
    assert_ne!(plot.color_of("a train"), plot.color_of("b train"));
    for (run, name) in [(&a, "a"), (&b, "b")] {
        let color = plot.color_of(&format!("{name} train"));
        let raw = plot
            .lines
            .iter()
            .find(|m| m.color == color && m.opacity < 1.0)
            .unwrap();
        plot.assert_draws(raw, &points(run, "train/loss"), name);
        let markers = plot.markers.iter().find(|m| m.color == color).unwrap();
        plot.assert_draws(markers, &points(run, "val/loss"), name);
    }
    assert!(plot_chart(&[a], "no_such_chart", &PlotOptions::default()).is_err());
}
