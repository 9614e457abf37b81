//! SVG: the built-in renderer (layout by the `layout-rs` crate, drawing by
//! [`SvgCanvas`]) or the system's Graphviz `dot`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

use layout::core::base::Orientation;
use layout::core::color::Color;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::Point;
use layout::core::style::{LineStyleKind, StyleAttr};
use layout::std_shapes::shapes::{Arrow, Element, LineEndKind, ShapeKind};
use layout::topo::layout::VisualGraph;

use super::model::{PicNode, Picture, Shape, CLUSTER_LINE, DEAD_EDGE, LIVE_EDGE};
use super::{dot, Direction, Renderer};
use retrograd_engine::base::error::{Error, Result};

const FONT_SIZE: usize = 12;
/// Advance of one character of a monospace font, in units of the font size.
const CHAR_WIDTH: f64 = 0.6;
const LINE_HEIGHT: f64 = 1.3;
const PAD_X: f64 = 10.0;
const PAD_Y: f64 = 7.0;
/// How much larger an ellipse is than the text box it must enclose.
const ELLIPSE_GROWTH: (f64, f64) = (1.35, 1.3);
const MARGIN: f64 = 8.0;
const TITLE_SIZE: f64 = 15.0;
const FONT_FAMILY: &str = "DejaVu Sans Mono, Menlo, Consolas, monospace";
const TEXT_COLOR: &str = "#1a1a1a";
const DEAD_TEXT_COLOR: &str = "#9a9a9a";

/// The most nodes plus edge segments the built-in renderer lays out.
/// `layout-rs` places every node and every segment an edge spends crossing
/// a layer (an edge from layer 2 to layer 40 is 37 segments), and its time
/// grows with about the square of their count: 800 chained nodes take
/// 0.7 s, and one leaf feeding each of 100 chained layers (10,000 segments)
/// took 53 s on a 2-core AMD EPYC. Past this, a picture is refused, not
/// left running.
pub const BUILTIN_LAYOUT_LIMIT: usize = 2_000;

pub(crate) fn render(picture: &Picture, renderer: Renderer) -> Result<String> {
    match renderer {
        Renderer::Builtin => render_builtin(picture),
        Renderer::Graphviz => render_graphviz(&dot::write(picture)),
        Renderer::Auto if graphviz_available() => render_graphviz(&dot::write(picture)),
        Renderer::Auto => render_builtin(picture),
    }
}

/// Nodes plus the segments of edges that cross layers, with each node's
/// layer its longest path from a source (as a layered layout ranks it).
/// Kahn's order over the edges: no recursion, linear in the picture.
pub(crate) fn layout_size(picture: &Picture) -> usize {
    let n = picture.nodes.len();
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in &picture.edges {
        out[e.from].push(e.to);
        indegree[e.to] += 1;
    }
    let mut layer = vec![0usize; n];
    let mut ready: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
    while let Some(v) = ready.pop() {
        for &w in &out[v] {
            layer[w] = layer[w].max(layer[v] + 1);
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(w);
            }
        }
    }
    let segments: usize = picture
        .edges
        .iter()
        .map(|e| layer[e.to].saturating_sub(layer[e.from] + 1))
        .sum();
    n + segments
}

pub(crate) fn graphviz_available() -> bool {
    Command::new("dot")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn render_graphviz(dot_text: &str) -> Result<String> {
    let error = |message: String| Error::Io {
        op: "render SVG with Graphviz",
        path: "dot".to_string(),
        message,
    };
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| error(format!("cannot run `dot` (is Graphviz installed?): {e}")))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Write from another thread: `dot` may fill its stdout pipe before reading all input.
    let input = dot_text.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().map_err(|e| error(e.to_string()))?;
    writer
        .join()
        .map_err(|_| error("writing to `dot` panicked".to_string()))?
        .map_err(|e| error(e.to_string()))?;
    if !output.status.success() {
        return Err(error(format!(
            "`dot -Tsvg` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    String::from_utf8(output.stdout).map_err(|e| error(e.to_string()))
}

/// Lays the picture out with `layout-rs` and draws it on an [`SvgCanvas`];
/// a picture over [`BUILTIN_LAYOUT_LIMIT`] is [`Error::TooLarge`].
fn render_builtin(picture: &Picture) -> Result<String> {
    let size = layout_size(picture);
    if size > BUILTIN_LAYOUT_LIMIT {
        return Err(Error::TooLarge {
            op: "to_svg (built-in renderer)",
            what: format!(
                "the picture's layout ({} nodes and {} edge segments across layers)",
                picture.nodes.len(),
                size - picture.nodes.len()
            ),
            size,
            limit: BUILTIN_LAYOUT_LIMIT,
            advice: "draw fewer nodes (VizOptions::max_nodes, VizOptions::collapse_repeated), \
                     or install Graphviz and use Renderer::Graphviz"
                .into(),
        });
    }
    let mut canvas = SvgCanvas::default();
    if !picture.nodes.is_empty() {
        let orientation = match picture.direction {
            Direction::TopDown => Orientation::TopToBottom,
            Direction::LeftRight => Orientation::LeftToRight,
        };
        let mut vg = VisualGraph::new(orientation);
        let handles: Vec<_> = picture
            .nodes
            .iter()
            .map(|node| vg.add_node(element(node, orientation)))
            .collect();
        for (k, edge) in picture.edges.iter().enumerate() {
            let color = if edge.dead { DEAD_EDGE } else { LIVE_EDGE };
            let look = StyleAttr::new(Color::fast(color), 1, None, 0, FONT_SIZE);
            let arrow = Arrow::with_properties(
                LineEndKind::None,
                LineEndKind::Arrow,
                LineStyleKind::Normal,
                "",
                &look,
                format!("class=\"edge\" id=\"{}\"", dot::edge_id(k)),
                &None,
                &None,
            );
            vg.add_edge(arrow, handles[edge.from], handles[edge.to]);
        }
        vg.do_it(false, false, false, &mut canvas);
        canvas.draw_clusters(picture);
    }
    Ok(canvas.finish(picture.title.as_deref()))
}

fn element(node: &PicNode, orientation: Orientation) -> Element {
    let look = node.look();
    let text = node.lines.join("\n");
    let longest = node
        .lines
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(1);
    let mut size = Point::new(
        longest.max(1) as f64 * CHAR_WIDTH * FONT_SIZE as f64 + 2.0 * PAD_X,
        node.lines.len().max(1) as f64 * LINE_HEIGHT * FONT_SIZE as f64 + 2.0 * PAD_Y,
    );
    let shape = match look.shape {
        Shape::Box => ShapeKind::Box(text),
        Shape::Ellipse => {
            let (w, h) = (size.x * ELLIPSE_GROWTH.0, size.y * ELLIPSE_GROWTH.1);
            size = Point::new(w.max(h), h);
            ShapeKind::Circle(text)
        }
    };
    let style = StyleAttr::new(
        Color::fast(look.line),
        look.pen_width.round() as usize,
        Some(Color::fast(look.fill)),
        if look.rounded { 6 } else { 0 },
        FONT_SIZE,
    );
    let mut properties = format!("class=\"{}\" id=\"{}\"", node.class(), node.id);
    if look.dashed {
        properties.push_str(" data-dashed=\"1\"");
    }
    if look.double {
        properties.push_str(" data-double=\"1\"");
    }
    if node.dead {
        properties.push_str(" data-dead=\"1\"");
    }
    // layout-rs lays records out across the flow; other shapes do not care.
    Element::create_with_properties(shape, style, orientation.flip(), size, properties)
}

/// A `layout-rs` render backend writing plain SVG: monospace text (so the
/// node sizes computed above fit), per-colour arrowheads, dashed and double
/// outlines, and a view box fitted to what was drawn.
#[derive(Default)]
struct SvgCanvas {
    body: String,
    bounds: Option<(Point, Point)>,
    arrow_colors: BTreeSet<String>,
    clips: Vec<String>,
    /// Each drawn node's box by its id, for the cluster outlines.
    boxes: std::collections::HashMap<String, (Point, Point)>,
}

impl SvgCanvas {
    fn grow(&mut self, p: Point) {
        let (lo, hi) = self.bounds.get_or_insert((p, p));
        lo.x = lo.x.min(p.x);
        lo.y = lo.y.min(p.y);
        hi.x = hi.x.max(p.x);
        hi.y = hi.y.max(p.y);
    }

    /// A dashed, labelled box around each cluster's nodes, under them.
    fn draw_clusters(&mut self, picture: &Picture) {
        const PAD: f64 = 8.0;
        let mut under = String::new();
        for (label, members) in &picture.clusters {
            let boxes = members
                .iter()
                .filter_map(|&m| self.boxes.get(&picture.nodes[m].id));
            let Some((lo, hi)) = boxes.fold(None, |acc: Option<(Point, Point)>, &(xy, size)| {
                let (mut lo, mut hi) =
                    acc.unwrap_or((xy, Point::new(xy.x + size.x, xy.y + size.y)));
                lo = Point::new(lo.x.min(xy.x), lo.y.min(xy.y));
                hi = Point::new(hi.x.max(xy.x + size.x), hi.y.max(xy.y + size.y));
                Some((lo, hi))
            }) else {
                continue;
            };
            let (x, y) = (lo.x - PAD, lo.y - PAD - FONT_SIZE as f64);
            let (w, h) = (
                hi.x - lo.x + 2.0 * PAD,
                hi.y - lo.y + 2.0 * PAD + FONT_SIZE as f64,
            );
            let _ = writeln!(
                under,
                "<g class=\"cluster\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"6\" fill=\"none\" stroke=\"{CLUSTER_LINE}\" stroke-dasharray=\"5,3\"/><text x=\"{}\" y=\"{}\" font-size=\"{FONT_SIZE}\" fill=\"{CLUSTER_LINE}\">{}</text></g>",
                px(x),
                px(y),
                px(w),
                px(h),
                px(x + 4.0),
                px(y + FONT_SIZE as f64),
                escape(label)
            );
            self.grow(Point::new(x, y));
            self.grow(Point::new(x + w, y + h));
        }
        self.body.insert_str(0, &under);
    }

    fn finish(self, title: Option<&str>) -> String {
        let (lo, hi) = self
            .bounds
            .unwrap_or((Point::new(0.0, 0.0), Point::new(120.0, 20.0)));
        let title_height = if title.is_some() {
            TITLE_SIZE * 2.0
        } else {
            0.0
        };
        let x0 = lo.x - MARGIN;
        let y0 = lo.y - MARGIN - title_height;
        let width = (hi.x - lo.x) + 2.0 * MARGIN;
        let height = (hi.y - lo.y) + 2.0 * MARGIN + title_height;
        let mut out = String::new();
        out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n");
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"{} {} {} {}\" font-family=\"{FONT_FAMILY}\">",
            px(width), px(height), px(x0), px(y0), px(width), px(height)
        );
        out.push_str("<defs>\n");
        for color in &self.arrow_colors {
            let _ = writeln!(
                out,
                "<marker id=\"arrow-{}\" markerWidth=\"8\" markerHeight=\"6\" refX=\"8\" refY=\"3\" orient=\"auto\" markerUnits=\"userSpaceOnUse\"><polygon points=\"0 0, 8 3, 0 6\" fill=\"{color}\"/></marker>",
                &color[1..]
            );
        }
        for clip in &self.clips {
            out.push_str(clip);
        }
        out.push_str("</defs>\n");
        let _ = writeln!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>",
            px(x0),
            px(y0),
            px(width),
            px(height)
        );
        if let Some(title) = title {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" font-size=\"{TITLE_SIZE}\" text-anchor=\"middle\" dominant-baseline=\"central\" fill=\"{TEXT_COLOR}\">{}</text>",
                px(x0 + width / 2.0),
                px(y0 + MARGIN + TITLE_SIZE / 2.0),
                escape(title)
            );
        }
        out.push_str(&self.body);
        out.push_str("</svg>\n");
        out
    }
}

impl RenderBackend for SvgCanvas {
    fn draw_rect(
        &mut self,
        xy: Point,
        size: Point,
        look: &StyleAttr,
        properties: Option<String>,
        clip: Option<ClipHandle>,
    ) {
        self.grow(xy);
        self.grow(Point::new(xy.x + size.x, xy.y + size.y));
        let props = properties.unwrap_or_default();
        if let Some(id) = props
            .split("id=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        {
            self.boxes.insert(id.to_string(), (xy, size));
        }
        let clip = clip
            .map(|c| format!(" clip-path=\"url(#clip{c})\""))
            .unwrap_or_default();
        let _ = write!(
            self.body,
            "<g {props}><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"{}\"{clip} {}/>",
            px(xy.x),
            px(xy.y),
            px(size.x),
            px(size.y),
            look.rounded,
            paint(look, &props)
        );
        if props.contains("data-double") {
            let _ = write!(
                self.body,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"{}\" fill=\"none\" {}/>",
                px(xy.x + 3.0),
                px(xy.y + 3.0),
                px(size.x - 6.0),
                px(size.y - 6.0),
                look.rounded.saturating_sub(2),
                stroke(look, &props)
            );
        }
        self.body.push_str("</g>\n");
    }

    fn draw_line(
        &mut self,
        start: Point,
        stop: Point,
        look: &StyleAttr,
        properties: Option<String>,
    ) {
        self.grow(start);
        self.grow(stop);
        let props = properties.unwrap_or_default();
        let _ = writeln!(
            self.body,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {}/>",
            px(start.x),
            px(start.y),
            px(stop.x),
            px(stop.y),
            stroke(look, &props)
        );
    }

    fn draw_circle(
        &mut self,
        xy: Point,
        size: Point,
        look: &StyleAttr,
        properties: Option<String>,
    ) {
        self.grow(Point::new(xy.x - size.x / 2.0, xy.y - size.y / 2.0));
        self.grow(Point::new(xy.x + size.x / 2.0, xy.y + size.y / 2.0));
        let props = properties.unwrap_or_default();
        let _ = write!(
            self.body,
            "<g {props}><ellipse cx=\"{}\" cy=\"{}\" rx=\"{}\" ry=\"{}\" {}/>",
            px(xy.x),
            px(xy.y),
            px(size.x / 2.0),
            px(size.y / 2.0),
            paint(look, &props)
        );
        if props.contains("data-double") {
            let _ = write!(
                self.body,
                "<ellipse cx=\"{}\" cy=\"{}\" rx=\"{}\" ry=\"{}\" fill=\"none\" {}/>",
                px(xy.x),
                px(xy.y),
                px(size.x / 2.0 - 3.0),
                px(size.y / 2.0 - 3.0),
                stroke(look, &props)
            );
        }
        self.body.push_str("</g>\n");
    }

    fn draw_text(&mut self, xy: Point, text: &str, look: &StyleAttr) {
        let lines: Vec<&str> = text.lines().collect();
        let line_height = LINE_HEIGHT * look.font_size as f64;
        let first = xy.y - (lines.len().saturating_sub(1)) as f64 * line_height / 2.0;
        let color = if web_color(look.line_color) == model_dead_line() {
            DEAD_TEXT_COLOR
        } else {
            TEXT_COLOR
        };
        let _ = write!(
            self.body,
            "<text font-size=\"{}\" text-anchor=\"middle\" fill=\"{color}\" xml:space=\"preserve\">",
            look.font_size
        );
        for (k, line) in lines.iter().enumerate() {
            let _ = write!(
                self.body,
                "<tspan x=\"{}\" y=\"{}\" dominant-baseline=\"central\">{}</tspan>",
                px(xy.x),
                px(first + k as f64 * line_height),
                escape(line)
            );
        }
        self.body.push_str("</text>\n");
    }

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        dashed: bool,
        head: (bool, bool),
        look: &StyleAttr,
        properties: Option<String>,
        _text: &str,
    ) {
        if path.len() < 2 {
            return;
        }
        for (p, c) in path {
            self.grow(*p);
            self.grow(*c);
        }
        let color = web_color(look.line_color);
        let mut d = format!(
            "M {} {} C {} {}, {} {}, {} {}",
            px(path[0].0.x),
            px(path[0].0.y),
            px(path[0].1.x),
            px(path[0].1.y),
            px(path[1].0.x),
            px(path[1].0.y),
            px(path[1].1.x),
            px(path[1].1.y)
        );
        for (p, c) in &path[2..] {
            let _ = write!(d, " S {} {}, {} {}", px(p.x), px(p.y), px(c.x), px(c.y));
        }
        let marker = |on: bool, end: &str| {
            if on {
                format!(" marker-{end}=\"url(#arrow-{})\"", &color[1..])
            } else {
                String::new()
            }
        };
        let dash = if dashed {
            " stroke-dasharray=\"5,4\""
        } else {
            ""
        };
        let _ = writeln!(
            self.body,
            "<path {} d=\"{d}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"{}\"{dash}{}{}/>",
            properties.unwrap_or_default(),
            look.line_width,
            marker(head.0, "start"),
            marker(head.1, "end"),
        );
        self.arrow_colors.insert(color);
    }

    fn create_clip(&mut self, xy: Point, size: Point, rounded_px: usize) -> ClipHandle {
        let handle = self.clips.len();
        self.clips.push(format!(
            "<clipPath id=\"clip{handle}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"{rounded_px}\"/></clipPath>\n",
            px(xy.x),
            px(xy.y),
            px(size.x),
            px(size.y)
        ));
        handle
    }
}

fn model_dead_line() -> String {
    web_color(Color::fast(super::model::DEAD_LINE))
}

/// `fill`, `stroke`, width and dashes of a shape.
fn paint(look: &StyleAttr, props: &str) -> String {
    let fill = look
        .fill_color
        .map(web_color)
        .unwrap_or_else(|| "none".to_string());
    format!("fill=\"{fill}\" {}", stroke(look, props))
}

fn stroke(look: &StyleAttr, props: &str) -> String {
    let dash = if props.contains("data-dashed") {
        " stroke-dasharray=\"4,3\""
    } else {
        ""
    };
    format!(
        "stroke=\"{}\" stroke-width=\"{}\"{dash}",
        web_color(look.line_color),
        look.line_width.max(1)
    )
}

/// `#rrggbb` from layout-rs's RGBA colour.
fn web_color(c: Color) -> String {
    let rgba = c.to_web_color();
    rgba[..7].to_string()
}

fn px(v: f64) -> String {
    let rounded = (v * 100.0).round() / 100.0;
    format!("{rounded}")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use crate::viz::{Direction, GraphPictures, Renderer, VizOptions};
    use retrograd_engine::{Graph, Tensor};

    fn builtin() -> VizOptions<'static> {
        VizOptions::new().renderer(Renderer::Builtin)
    }

    fn parses(svg: &str) -> roxmltree::Document<'_> {
        roxmltree::Document::parse(svg).expect("well-formed SVG")
    }

    #[test]
    fn degenerate_graphs_still_draw() {
        let empty = Graph::new();
        let svg = empty.to_svg(&builtin().title("nothing")).unwrap();
        assert!(parses(&svg)
            .descendants()
            .any(|n| n.text() == Some("nothing")));

        // Leaves only: a frozen computation records no node.
        let g = Graph::new();
        let y = g.named_constant("y", Tensor::scalar(4.0));
        let _folded = &y * 2.0;
        let svg = g.to_svg(&builtin()).unwrap();
        assert_eq!(
            parses(&svg)
                .descendants()
                .filter(|n| n.has_tag_name("ellipse"))
                .count(),
            1
        );
    }

    #[test]
    fn repeated_inputs_and_left_right_layouts() {
        let g = Graph::new();
        let x = g.named_variable("x", Tensor::scalar(3.0));
        let sq = &x * &x;
        for direction in [Direction::TopDown, Direction::LeftRight] {
            let svg = g.to_svg(&builtin().root(&sq).direction(direction)).unwrap();
            let doc = parses(&svg);
            assert_eq!(
                doc.descendants().filter(|n| n.has_tag_name("path")).count(),
                2,
                "x feeds mul twice"
            );
        }
    }
}
