//! Draw the training curves of one or more runs from their logs, overlaid
//! chart by chart (one SVG per metric), for instance to compare two runs of
//! a job with different settings. A log can be read while its run is still
//! writing it.
//!
//! ```sh
//! cargo run --release --example train_digits -- --quiet --out target/a.safetensors
//! cargo run --release --example train_digits -- --quiet --out target/b.safetensors --lr 0.01
//! cargo run --example plot_runs -- target/a.log.jsonl target/b.log.jsonl --out target/compare
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use retrograd::runlog::{read_log, write_plots, PlotOptions, Scale};

const USAGE: &str = "\
usage: plot_runs LOG [LOG ...] --out DIR [options]

  LOG               a run log (JSON lines, such as target/train_digits.log.jsonl);
                    NAME=LOG calls the run NAME on the charts (default: the file's name)

options:
  --out DIR         where the charts go, one SVG per metric (required)
  --smoothing W     smoothing weight in [0, 1) for dense series (default 0.6; 0 = off)
  --scale S         value axis: auto (log when values span two decades), linear, log
  --size WxH        chart size in pixels (default 720x420)
  -h, --help        this text";

fn run() -> Result<Option<Vec<PathBuf>>, String> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_env();
    let mut logs: Vec<(Option<String>, PathBuf)> = Vec::new();
    let mut out: Option<PathBuf> = None;
    let mut options = PlotOptions::default();
    let err = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(err)? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("out") => out = Some(parser.value().map_err(err)?.into()),
            Long("smoothing") => {
                options.smoothing = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("scale") => {
                options.scale = match parser.value().map_err(err)?.string().map_err(err)?.as_str() {
                    "auto" => Scale::Auto,
                    "linear" => Scale::Linear,
                    "log" => Scale::Log,
                    other => return Err(format!("--scale {other}: use auto, linear or log")),
                }
            }
            Long("size") => {
                let size = parser.value().map_err(err)?.string().map_err(err)?;
                let parsed = size
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .filter(|&(w, h): &(u32, u32)| w >= 200 && h >= 150);
                options.size =
                    parsed.ok_or(format!("--size {size}: WIDTHxHEIGHT, at least 200x150"))?;
            }
            Value(v) => {
                let v = v.string().map_err(err)?;
                logs.push(match v.split_once('=') {
                    Some((name, path)) => (Some(name.to_string()), path.into()),
                    None => (None, v.into()),
                });
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    let out = out.ok_or("--out DIR is required")?;
    if logs.is_empty() {
        return Err("no log given".into());
    }
    let mut runs = Vec::new();
    for (name, path) in logs {
        let run = read_log(&path).map_err(|e| e.to_string())?;
        if run.skipped_lines > 0 {
            eprintln!(
                "{}: {} lines are not records, skipped",
                path.display(),
                run.skipped_lines
            );
        }
        runs.push(match name {
            Some(name) => run.named(&name),
            None => run,
        });
    }
    write_plots(&runs, &out, &options)
        .map(Some)
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(None) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Some(files)) => {
            for f in files {
                println!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
