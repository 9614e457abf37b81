//! Trace an expression: the recorded graph, both backward orders, the output
//! and every gradient, and optionally a picture.
//!
//! ```sh
//! cargo run --example trace -- "x*y + x" x=3 y=4
//! cargo run --example trace -- "x*y + x" x=3 y=4 --svg w.svg --dot w.dot
//! cargo run --example trace -- "x*y + x" x=3 y=4 --html w.html   # step through backward
//! cargo run --example trace -- "tanh(y*2) * x" x=3 y=4 --frozen y   # y*2, tanh fold away
//! ```
//!
//! Functions are the ops in the registry (`exp`, `log`, `tanh`, `relu`,
//! `sigmoid`, `sum`, ...); `^`/`**` work when an op named `pow` is
//! registered. Errors point at the column with a caret.

use std::process::ExitCode;

use retrograd::expr::{parse_input, trace, Input};
use retrograd::viz::GraphPictures;
use retrograd::viz::{Direction, Renderer};
use retrograd::Graph;

const USAGE: &str = "\
usage: trace EXPRESSION [NAME=VALUE ...] [options]

  EXPRESSION        e.g. \"x*y + x\" or \"h = tanh(q*a + b); sum(h*h)\"
  NAME=VALUE        an input: a number (x=3) or a vector (q=[1,2,3])

options:
  --frozen NAMES    inputs that do not require grad (comma-separated; repeatable)
  --dot FILE        write the graph as Graphviz DOT
  --svg FILE        write the graph as SVG
  --html FILE       write a page that steps through the backward sweep
  --renderer WHO    auto (Graphviz if installed, else built-in), builtin, graphviz
  --max-nodes N     draw at most N op nodes (the rest become one node)
  --collapse        draw repeated chains and repeated blocks of ops as one node
  --left-right      data flows left to right (default: top down)
  --title TEXT      a caption above the picture
  -h, --help        this text";

struct Args {
    expression: String,
    inputs: Vec<Input>,
    frozen: Vec<String>,
    dot: Option<String>,
    svg: Option<String>,
    html: Option<String>,
    renderer: Renderer,
    max_nodes: Option<usize>,
    collapse: bool,
    direction: Direction,
    title: Option<String>,
}

/// The value after an option (`--svg FILE`).
fn value(parser: &mut lexopt::Parser) -> Result<String, String> {
    use lexopt::ValueExt;
    let v = parser.value().map_err(|e| e.to_string())?;
    v.string().map_err(|e| e.to_string())
}

fn parse_args() -> Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_env();
    let mut expression = None;
    let mut args = Args {
        expression: String::new(),
        inputs: Vec::new(),
        frozen: Vec::new(),
        dot: None,
        svg: None,
        html: None,
        renderer: Renderer::Auto,
        max_nodes: None,
        collapse: false,
        direction: Direction::TopDown,
        title: None,
    };
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("frozen") => {
                let names = value(&mut parser)?;
                args.frozen
                    .extend(names.split(',').map(|n| n.trim().to_string()));
            }
            Long("dot") => args.dot = Some(value(&mut parser)?),
            Long("svg") => args.svg = Some(value(&mut parser)?),
            Long("html") => args.html = Some(value(&mut parser)?),
            Long("renderer") => {
                args.renderer = match value(&mut parser)?.as_str() {
                    "auto" => Renderer::Auto,
                    "builtin" => Renderer::Builtin,
                    "graphviz" => Renderer::Graphviz,
                    other => {
                        return Err(format!("--renderer {other}: use auto, builtin or graphviz"))
                    }
                }
            }
            Long("max-nodes") => {
                let n = value(&mut parser)?;
                args.max_nodes = Some(
                    n.parse()
                        .map_err(|_| format!("--max-nodes {n}: not a count"))?,
                );
            }
            Long("collapse") => args.collapse = true,
            Long("left-right") => args.direction = Direction::LeftRight,
            Long("title") => args.title = Some(value(&mut parser)?),
            Value(v) => {
                let v = v.string().map_err(|e| e.to_string())?;
                if expression.is_none() {
                    expression = Some(v);
                } else {
                    args.inputs.push(parse_input(&v)?);
                }
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    args.expression = expression.ok_or("no expression given")?;
    for name in &args.frozen {
        match args.inputs.iter_mut().find(|i| &i.name == name) {
            Some(input) => input.frozen = true,
            None => return Err(format!("--frozen {name}: no input named `{name}`")),
        }
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let graph = Graph::new();
    let traced = match trace(&graph, &args.expression, &args.inputs) {
        Ok(t) => t,
        Err(e) => {
            eprint!("{}", e.render());
            return ExitCode::from(1);
        }
    };
    print!("{}", traced.report());

    let mut options = traced
        .viz_options()
        .renderer(args.renderer)
        .collapse_repeated(args.collapse)
        .direction(args.direction);
    if let Some(n) = args.max_nodes {
        options = options.max_nodes(n);
    }
    if let Some(title) = &args.title {
        options = options.title(title);
    }
    let written = [(&args.dot, "DOT"), (&args.svg, "SVG"), (&args.html, "HTML")];
    for (path, kind) in written {
        let Some(path) = path else { continue };
        let result = match kind {
            "DOT" => graph.write_dot(path, &options),
            "SVG" => graph.write_svg(path, &options),
            _ => graph.write_html(path, &options),
        };
        match result {
            Ok(()) => println!("wrote {kind} to {path}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
