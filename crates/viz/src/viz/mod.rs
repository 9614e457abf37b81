//! Pictures of a [`Graph`]: Graphviz DOT text and SVG.
//!
//! One op node per recorded op (labelled with the op's name, its output's
//! dtype and shape, the value for small tensors and, given [`Gradients`], the
//! gradient), one node per leaf (variables as ellipses, frozen constants in
//! grey), edges in the direction of data flow. Given a root, the nodes outside
//! `graph.backward_order(root)` are greyed out, so a dead node such as the
//! seed's `q = x - 1` is visible at a glance.
//!
//! ```
//! use retrograd::{Graph, Tensor};
//! use retrograd::viz::{GraphPictures, VizOptions};
//!
//! let graph = Graph::new();
//! let x = graph.named_variable("x", Tensor::scalar(3.0));
//! let y = graph.named_variable("y", Tensor::scalar(4.0));
//! let w = (&x * &y + &x).named("w");
//! let grads = w.backward()?;
//! let dot = graph.to_dot(&VizOptions::new().root(&w).gradients(&grads))?;
//! assert!(dot.starts_with("digraph retrograd {"));
//! assert!(dot.contains("n0 -> n1"));                 // mul feeds add
//! let svg = graph.to_svg(&VizOptions::new().root(&w))?;   // no Graphviz needed
//! assert!(svg.contains("<svg"));
//! # Ok::<(), retrograd::Error>(())
//! ```
//!
//! Large graphs stay readable with [`VizOptions::max_nodes`] (keep the nodes
//! nearest the root, summarise the rest in one node) and
//! [`VizOptions::collapse_repeated`] (a chain that repeats the same ops, such
//! as a thousand `tanh`s or twelve `mul → add → tanh` layers, or a block
//! repeated with the same wiring, such as a transformer's layers, becomes
//! one node).
//!
//! [`Graph::to_html`] writes a page that steps through the backward sweep
//! node by node on the same picture.
//!
//! Where things are: pictures: `VizOptions` and
//! `Graph::to_dot`/`to_svg`/`to_html`/`write_*` (`mod.rs`), what a picture
//! shows (`model.rs`: nodes, edges, dead marking, `max_nodes`, which
//! picture node each op node and leaf went to), repeated structure
//! (`collapse.rs`: chains repeating a short run of ops, then blocks, runs
//! of consecutive nodes with the same ops wired alike, fan-outs allowed,
//! such as a transformer's layers), label text and tensor summaries
//! (`label.rs`), DOT writer (`dot.rs`; node and edge ids, which Graphviz
//! copies into its SVG), SVG via layout-rs or Graphviz (`svg.rs`); the
//! backward-sweep page (`html.rs`: runs `Var::backward_recorded` from the
//! root, reserves a gradient line in each node's label, and fills
//! `page/page.html` with the SVG, `page/page.css`, the step data as JSON
//! and `page/page.js`, a hand-written script of about 250 lines that
//! replays the recorded steps and computes nothing).

mod collapse;
mod dot;
mod html;
pub(crate) mod label;
mod model;
mod svg;

pub use svg::BUILTIN_LAYOUT_LIMIT;

use std::path::Path;

use retrograd_engine::autograd::Gradients;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::{Graph, Var};

/// Which way data flows in a picture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Direction {
    /// Inputs at the top, the output at the bottom (Graphviz `rankdir=TB`).
    #[default]
    TopDown,
    /// Inputs on the left, the output on the right (`rankdir=LR`).
    LeftRight,
}

/// Who lays out and draws an SVG.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Renderer {
    /// Graphviz's `dot` when it is installed (it draws smoother edges),
    /// otherwise the built-in renderer.
    #[default]
    Auto,
    /// The built-in renderer (the `layout-rs` crate): nothing to install.
    Builtin,
    /// The system's Graphviz `dot`; an error when it is not installed.
    Graphviz,
}

/// What a picture shows and how; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct VizOptions<'a> {
    pub(crate) root: Option<RootRef>,
    pub(crate) gradients: Option<&'a Gradients>,
    pub(crate) max_values: usize,
    pub(crate) max_nodes: Option<usize>,
    pub(crate) collapse_repeated: bool,
    pub(crate) direction: Direction,
    pub(crate) renderer: Renderer,
    pub(crate) title: Option<String>,
    pub(crate) clusters: Vec<(String, Vec<usize>)>,
}

/// The root a picture is drawn for, kept as ids so options carry no graph lifetime.
#[derive(Clone, Debug)]
pub(crate) struct RootRef {
    pub(crate) graph_id: u64,
    pub(crate) value_id: Option<usize>,
}

impl Default for VizOptions<'_> {
    fn default() -> Self {
        VizOptions {
            root: None,
            gradients: None,
            max_values: 8,
            max_nodes: None,
            collapse_repeated: false,
            direction: Direction::TopDown,
            renderer: Renderer::Auto,
            title: None,
            clusters: Vec::new(),
        }
    }
}

impl<'a> VizOptions<'a> {
    /// Defaults: no root, no gradients, values shown up to 8 elements, no cap.
    pub fn new() -> Self {
        Self::default()
    }

    /// Draws the picture for `root`: it is outlined in bold, and every node
    /// outside `graph.backward_order(root)` (and every leaf that feeds none of
    /// its ancestors) is greyed out.
    pub fn root(mut self, root: &Var<'_>) -> Self {
        self.root = Some(RootRef {
            graph_id: root.graph().id(),
            value_id: root.value_id(),
        });
        self
    }

    /// Shows each value's gradient from a backward pass (values whose gradient
    /// was released, such as intermediates not marked with `retain_grad`,
    /// show none). Tensors larger than [`max_values`](Self::max_values) show
    /// the gradient's L2 norm.
    pub fn gradients(mut self, gradients: &'a Gradients) -> Self {
        self.gradients = Some(gradients);
        self
    }

    /// Shows values (and gradients) of tensors with at most `n` elements in
    /// full; 0 shows none. Default 8.
    pub fn max_values(mut self, n: usize) -> Self {
        self.max_values = n;
        self
    }

    /// Draws at most `n` op nodes: the root's ancestors nearest the root
    /// first (the newest nodes when there is no root); the others are
    /// summarised by one node with an edge to each shown node they feed.
    pub fn max_nodes(mut self, n: usize) -> Self {
        self.max_nodes = Some(n);
        self
    }

    /// Collapses repeated structure into one node labelled with what
    /// repeats and the count: chains that repeat the same short sequence
    /// of ops at least three times (`(mul → add → tanh) × 12`), then blocks
    /// of at least four consecutive nodes repeated at least twice with the
    /// same ops wired the same way, fan-outs allowed (a transformer's
    /// layers: `[layer_norm … add] (28 ops) × 4`), whose leaves are drawn
    /// as one summary node.
    pub fn collapse_repeated(mut self, on: bool) -> Self {
        self.collapse_repeated = on;
        self
    }

    /// Which way data flows in the picture. Default top-down.
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Who draws SVG pictures. Default [`Renderer::Auto`].
    pub fn renderer(mut self, renderer: Renderer) -> Self {
        self.renderer = renderer;
        self
    }

    /// A caption drawn above the graph.
    pub fn title(mut self, title: &str) -> Self {
        self.title = Some(title.to_string());
        self
    }

    /// Groups of op nodes (by node index) drawn inside a labelled box each,
    /// such as the fused groups of a compiled step
    /// ([`Capture::clusters`](retrograd_engine::compile::Capture::clusters)). A node
    /// belongs to its first group; nodes not drawn are skipped.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// use retrograd::viz::{GraphPictures, Renderer, VizOptions};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
    /// let y = (&x * 2.0).exp().sum();
    /// let opts = VizOptions::new().root(&y).clusters([("fused: mul, exp".to_string(), vec![0, 1])]);
    /// let dot = g.to_dot(&opts)?;
    /// assert!(dot.contains("subgraph cluster_0") && dot.contains("fused: mul, exp"));
    /// let svg = g.to_svg(&opts.renderer(Renderer::Builtin))?;
    /// assert!(svg.contains("class=\"cluster\""));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn clusters(mut self, clusters: impl IntoIterator<Item = (String, Vec<usize>)>) -> Self {
        self.clusters = clusters.into_iter().collect();
        self
    }
}

/// Pictures of a [`Graph`]: its methods `to_dot`, `to_svg`, `to_html` and
/// their `write_*` forms. A trait because the pictures live in this crate
/// and the graph in the engine; `use retrograd::viz::GraphPictures` (or the
/// prelude) brings the methods into scope.
pub trait GraphPictures {
    /// The graph as Graphviz DOT text; see [`viz`](crate::viz).
    ///
    /// Node ids: `n{i}` for op node `i`, `v{id}` for the leaf with value id
    /// `id`. Every node carries a `class` attribute (`op`, `leaf variable`,
    /// `leaf constant`, `elided`, `group`, plus `dead` when greyed out and
    /// `root` for the root), which Graphviz copies into its SVG.
    ///
    /// Errors: a root or gradients from another graph
    /// ([`Error::ForeignVariable`]).
    fn to_dot(&self, options: &VizOptions<'_>) -> Result<String>;

    /// The graph as an SVG document, drawn by `options`' renderer.
    ///
    /// Errors: [`to_dot`](Self::to_dot)'s; the built-in renderer refuses a
    /// picture whose layout would take minutes ([`Error::TooLarge`]: more
    /// than [`BUILTIN_LAYOUT_LIMIT`] nodes plus edge segments across
    /// layers; cap it with [`VizOptions::max_nodes`] or
    /// [`VizOptions::collapse_repeated`]); Graphviz's failures are
    /// [`Error::Io`].
    fn to_svg(&self, options: &VizOptions<'_>) -> Result<String>;

    /// Writes [`to_dot`](Self::to_dot) to `path` (atomically: a temporary
    /// file in the same directory, then a rename).
    fn write_dot(&self, path: impl AsRef<Path>, options: &VizOptions<'_>) -> Result<()>;

    /// Writes [`to_svg`](Self::to_svg) to `path` (atomically).
    fn write_svg(&self, path: impl AsRef<Path>, options: &VizOptions<'_>) -> Result<()>;

    /// One self-contained HTML page (no network needed to view it): the
    /// picture [`to_svg`](Self::to_svg) draws, and buttons and arrow keys
    /// that step through the backward sweep from `options`' root, one node
    /// of `backward_order(root)` at a time. Each step highlights the node
    /// running, the gradient arriving on each of its input edges and the
    /// accumulation where a value is used twice, and shows every value's
    /// gradient so far; hovering over a node shows its value and shape,
    /// and greyed-out nodes say why the sweep never visits them.
    ///
    /// The steps are the engine's: the page runs
    /// [`Var::backward_recorded`] from the root (a one-element value), so
    /// its gradients are those of a real sweep. Tensors with more than
    /// [`max_values`](VizOptions::max_values) elements are shown as shape,
    /// norm, extremes and mean. Without a root the page has the picture and
    /// the hover text only. `options`' gradients are not used.
    ///
    /// ```
    /// use retrograd::viz::{GraphPictures, VizOptions};
    /// use retrograd::{Graph, Tensor};
    ///
    /// let graph = Graph::new();
    /// let x = graph.named_variable("x", Tensor::scalar(3.0));
    /// let y = graph.named_variable("y", Tensor::scalar(4.0));
    /// let w = (&x * &y + &x).named("w");
    /// let html = graph.to_html(&VizOptions::new().root(&w))?;
    /// assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg"));
    /// assert!(!html.contains("src=\"http"));   // nothing to fetch: one file
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    ///
    /// Errors: those of [`to_svg`](Self::to_svg), and those of backward
    /// from the root ([`Error::NonScalarRoot`] for a root of several elements).
    fn to_html(&self, options: &VizOptions<'_>) -> Result<String>;

    /// Writes [`to_html`](Self::to_html) to `path` (atomically).
    fn write_html(&self, path: impl AsRef<Path>, options: &VizOptions<'_>) -> Result<()>;
}

impl GraphPictures for Graph {
    fn to_dot(&self, options: &VizOptions<'_>) -> Result<String> {
        let picture = model::Picture::build(self, options)?;
        Ok(dot::write(&picture))
    }

    fn to_svg(&self, options: &VizOptions<'_>) -> Result<String> {
        let picture = model::Picture::build(self, options)?;
        svg::render(&picture, options.renderer)
    }

    fn write_dot(&self, path: impl AsRef<Path>, options: &VizOptions<'_>) -> Result<()> {
        write_atomically(path.as_ref(), self.to_dot(options)?.as_bytes())
    }

    fn write_svg(&self, path: impl AsRef<Path>, options: &VizOptions<'_>) -> Result<()> {
        write_atomically(path.as_ref(), self.to_svg(options)?.as_bytes())
    }

    fn to_html(&self, options: &VizOptions<'_>) -> Result<String> {
        html::page(self, options)
    }

    fn write_html(&self, path: impl AsRef<Path>, options: &VizOptions<'_>) -> Result<()> {
        write_atomically(path.as_ref(), self.to_html(options)?.as_bytes())
    }
}

/// Whether Graphviz's `dot` can be run.
pub fn graphviz_available() -> bool {
    svg::graphviz_available()
}

/// Writes `bytes` to a temporary file next to `path`, syncs it, then
/// renames it over `path`: a reader never sees a half-written picture.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io_error = |e: std::io::Error| Error::Io {
        op: "write picture",
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let file_name = path.file_name().ok_or_else(|| Error::Io {
        op: "write picture",
        path: path.display().to_string(),
        message: "the path names no file".to_string(),
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::File::create(&tmp).and_then(|mut file| {
        std::io::Write::write_all(&mut file, bytes)?;
        file.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(e)
    })
}
