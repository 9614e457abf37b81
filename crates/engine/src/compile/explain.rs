//! What a capture shows of itself (no hidden form a user cannot see):
//! [`Capture::explain`] lists every step, every fusion and fast rule, every
//! buffer of the memory plan with its bytes, and the peak;
//! [`Capture::optimized`] prints the graph as it runs, in the textbook
//! chapter's trace format, each step's nodes under one heading.

use std::fmt::Write;

use super::ir::{Binding, Pattern, Step};
use super::plan;
use super::{Capture, GradTarget};
use crate::core::graph::trace_line;

/// Bytes in the units people read.
pub(crate) fn human(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl Capture {
    /// What the capture runs, one line per step, then the memory plan:
    /// every fused group (its nodes, its shape, how its inputs line up,
    /// what it writes), every fast rule (the formula nodes it replaces),
    /// every scalar program, every buffer with its bytes and the values it
    /// holds in turn, and the planned peak.
    pub fn explain(&self) -> String {
        let graph = &self.captured.graph;
        let st = graph.state();
        let p = &self.program;
        let label = |slot: u32| graph.label_of(&st, p.slots[slot as usize].value);
        let mut s = String::new();
        let inputs: Vec<String> = self
            .signature
            .inputs
            .iter()
            .map(|(d, sh)| format!("{d} {:?}", sh.as_slice()))
            .collect();
        let _ = writeln!(
            s,
            "compiled step: inputs [{}], {} mode",
            inputs.join(", "),
            if self.signature.training {
                "training"
            } else {
                "eval"
            }
        );
        let total = st.nodes().len();
        let forward = self.captured.forward_nodes as usize;
        let _ = writeln!(
            s,
            "captured graph: {total} nodes ({forward} forward, {} backward); {} dead (no output needs them)",
            total - forward,
            p.dead_nodes
        );
        let (mut ops, mut fast, mut fused, mut scalar, mut sums) = (0, 0, 0, 0, 0);
        for step in &p.steps {
            match step {
                Step::Op(_) => ops += 1,
                Step::Fast(_) => fast += 1,
                Step::Fused(_) => fused += 1,
                Step::Scalar(_) => scalar += 1,
                Step::SliceSum(_) => sums += 1,
            }
        }
        let _ = writeln!(
            s,
            "steps: {} ({ops} single ops, {fast} fast backward rules, {fused} fused groups, {scalar} scalar programs, \
             {sums} slice sums)",
            p.steps.len()
        );
        let _ = writeln!(s, "\nsteps:");
        for (i, step) in p.steps.iter().enumerate() {
            let _ = match step {
                Step::Op(o) => writeln!(
                    s,
                    "  {i:>4}  op      nodes[{}] {}{}",
                    o.node,
                    o.op.get().name(),
                    if o.seed.is_some() { " (fresh seed each run)" } else { "" }
                ),
                Step::Fast(f) => writeln!(
                    s,
                    "  {i:>4}  fast    {}'s backward (nodes[{}]'s) by its fast rule, in place of nodes[{}..{}]; writes {}",
                    f.op.get().name(),
                    f.node,
                    f.covers.start,
                    f.covers.end,
                    f.outs.iter().flatten().map(|&o| label(o)).collect::<Vec<_>>().join(", ")
                ),
                Step::Fused(g) => {
                    let names: Vec<String> = g
                        .nodes
                        .iter()
                        .map(|&n| format!("nodes[{n}] {}", st.op_name(st.nodes()[n as usize].op)))
                        .collect();
                    let reads: Vec<String> = g
                        .inputs
                        .iter()
                        .map(|&(slot, pat)| format!("{} ({})", label(slot), pattern_name(pat)))
                        .collect();
                    writeln!(
                        s,
                        "  {i:>4}  fused   {} nodes over {} {:?} in one pass ({} x {}): {}; reads {}; writes {}",
                        g.nodes.len(),
                        g.dtype,
                        g.shape.as_slice(),
                        g.rows,
                        g.row_len,
                        names.join(", "),
                        reads.join(", "),
                        g.outputs.iter().map(|&o| label(o)).collect::<Vec<_>>().join(", ")
                    )
                }
                Step::SliceSum(ss) => writeln!(
                    s,
                    "  {i:>4}  slices  {} gradients of disjoint slices along dim {} summed into {} in one buffer, \
                     in place of {}",
                    ss.parts.len(),
                    ss.dim,
                    label(ss.out),
                    ss.nodes
                        .iter()
                        .map(|&n| format!("nodes[{n}] {}", st.op_name(st.nodes()[n as usize].op)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Step::Scalar(sp) => writeln!(
                    s,
                    "  {i:>4}  scalar  {} 0-d {} nodes (nodes[{}] to nodes[{}]) as a flat program: {} registers, {} inputs, {} outputs",
                    sp.nodes.len(),
                    sp.dtype,
                    sp.nodes.first().copied().unwrap_or(0),
                    sp.nodes.last().copied().unwrap_or(0),
                    sp.regs,
                    sp.inputs.len(),
                    sp.outputs.len()
                ),
            };
        }
        let _ = writeln!(s, "\ninputs and state (read at every run):");
        for (slot, b) in &p.bindings {
            let what = match b {
                Binding::Input(k) => format!("input {k}"),
                Binding::InputReshaped(k, shape) => {
                    format!("input {k} viewed as {:?}", shape.as_slice())
                }
                Binding::State(i) | Binding::StateReshaped(i, _) => {
                    let source = &self.captured.log.sources[*i];
                    match &source.kind {
                        crate::core::graph::capture::SourceKind::State {
                            param: Some(id), ..
                        } => self.names.get(id).map_or_else(
                            || format!("parameter {id}"),
                            |n| format!("parameter {n}"),
                        ),
                        _ => format!("state {}", source.name),
                    }
                }
                Binding::Constant(_) => continue,
            };
            let info = &p.slots[*slot as usize];
            let _ = writeln!(
                s,
                "  {}: {what}, {} {:?}",
                label(*slot),
                info.dtype,
                info.shape.as_slice()
            );
        }
        for e in &self.captured.log.effects {
            let _ = writeln!(s, "  after each run: {}", e.name);
        }
        let _ = writeln!(s, "\nmemory plan:");
        let mut planned = 0;
        for (b, info) in p.buffers.iter().enumerate() {
            let bytes = info.numel * info.dtype.size_in_bytes();
            planned += bytes;
            let holds: Vec<String> = info.occupants.iter().map(|&o| label(o)).collect();
            let _ = writeln!(
                s,
                "  buffer {b}: {} x {} ({}), holds in turn: {}",
                info.dtype,
                info.numel,
                human(bytes),
                holds.join(", ")
            );
        }
        let others: Vec<usize> = p
            .slots
            .iter()
            .enumerate()
            .filter(|(slot, info)| {
                info.buffer.is_none()
                    && !info.shape.is_empty()
                    && !p.bindings.iter().any(|(b, _)| *b as usize == *slot)
            })
            .map(|(_, info)| info.bytes())
            .collect();
        let _ = writeln!(
            s,
            "  {} buffers, {} in all; {} other values ({}) are views of another value's storage",
            p.buffers.len(),
            human(planned),
            others.len(),
            human(others.iter().sum())
        );
        let (per_step, peak) = plan::live_bytes(p);
        let at = per_step.iter().position(|&b| b == peak).unwrap_or(0);
        let _ = writeln!(
            s,
            "  peak of live values (inputs, parameters, activations, gradients): {} at step {at}",
            human(peak)
        );
        let _ = writeln!(s, "\noutputs:");
        let _ = writeln!(s, "  loss: {}", label(p.root));
        for (t, slot) in &p.grads {
            let who = match t {
                GradTarget::Param(id) => self
                    .names
                    .get(id)
                    .map_or_else(|| format!("parameter {id}"), |n| format!("parameter {n}")),
                GradTarget::Input(k) => format!("input {k}"),
            };
            let at = slot.map_or_else(|| "zero (not reached)".to_string(), label);
            let _ = writeln!(s, "  gradient of {who}: {at}");
        }
        for (named, &slot) in self.captured.log.outputs.iter().zip(&p.outputs) {
            let line = match named.write {
                Some(_) => format!("state update {} (written back after each run)", named.name),
                None => format!("output {}", named.name),
            };
            let _ = writeln!(s, "  {line}: {}", label(slot));
        }
        s
    }

    /// The graph as it runs: the live nodes in the trace format of the
    /// textbook chapter (`nodes[i] = op(a, b) -> value`), each step's nodes
    /// under a heading naming the step (fused group, fast rule, scalar
    /// program, single op). Dead nodes do not appear.
    pub fn optimized(&self) -> String {
        let graph = &self.captured.graph;
        let st = graph.state();
        let mut s = String::new();
        for (i, step) in self.program.steps.iter().enumerate() {
            let head = match step {
                Step::Op(_) => None,
                Step::Fast(f) => Some(format!(
                    "# step {i}: fast rule: {}'s backward, one call in place of:",
                    f.op.get().name()
                )),
                Step::Fused(g) => Some(format!(
                    "# step {i}: fused group, one pass over {} {:?}:",
                    g.dtype,
                    g.shape.as_slice()
                )),
                Step::Scalar(p) => Some(format!(
                    "# step {i}: scalar program over {} 0-d nodes:",
                    p.nodes.len()
                )),
                Step::SliceSum(ss) => Some(format!(
                    "# step {i}: slice sum, {} slice gradients added into one buffer:",
                    ss.parts.len()
                )),
            };
            let indent = if head.is_some() { "  " } else { "" };
            if let Some(h) = head {
                let _ = writeln!(s, "{h}");
            }
            for n in step.nodes() {
                let _ = writeln!(s, "{indent}{}", trace_line(graph, &st, n as usize));
            }
        }
        s
    }

    /// The steps as groups of graph nodes, for pictures: `(label, nodes)`
    /// per fused group, fast rule and scalar program. Drawn as clusters:
    /// `c.graph().write_svg(path, &VizOptions::new().clusters(c.clusters()))`.
    pub fn clusters(&self) -> Vec<(String, Vec<usize>)> {
        self.program
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, step)| {
                let label = match step {
                    Step::Op(_) => return None,
                    Step::Fast(f) => {
                        format!("step {i}: {} backward (fast rule)", f.op.get().name())
                    }
                    Step::Fused(g) => format!("step {i}: fused {:?}", g.shape.as_slice()),
                    Step::Scalar(_) => format!("step {i}: scalar program"),
                    Step::SliceSum(_) => format!("step {i}: slice sum"),
                };
                Some((
                    label,
                    step.nodes().into_iter().map(|n| n as usize).collect(),
                ))
            })
            .collect()
    }

    /// Each step's kind and one-line label, for [`Compiled::profile`](super::Compiled::profile):
    /// an op by its name, a fast rule as `op backward (fast rule)`, a fused
    /// group by its ops' names, a scalar program as such; the label adds
    /// the step's nodes and the shape it writes.
    pub(crate) fn step_parts(&self) -> Vec<(String, String)> {
        let st = self.captured.graph.state();
        let p = &self.program;
        let shape = |slot: u32| {
            let info = &p.slots[slot as usize];
            format!("{} {:?}", info.dtype, info.shape.as_slice())
        };
        p.steps
            .iter()
            .map(|step| match step {
                Step::Op(o) => {
                    let name = o.op.get().name().to_string();
                    let label = format!("{name} nodes[{}] -> {}", o.node, shape(o.out));
                    (name, label)
                }
                Step::Fast(f) => {
                    let kind = format!("{} backward (fast rule)", f.op.get().name());
                    let writes: Vec<String> = f.outs.iter().flatten().map(|&o| shape(o)).collect();
                    let label = format!("{kind} of nodes[{}] -> {}", f.node, writes.join(", "));
                    (kind, label)
                }
                Step::Fused(g) => {
                    let mut names: Vec<&str> = Vec::new();
                    for &n in &g.nodes {
                        let name = st.op_name(st.nodes()[n as usize].op);
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                    let kind = format!("fused {}", names.join(", "));
                    let label = format!(
                        "{kind}: {} nodes from nodes[{}] over {} {:?}",
                        g.nodes.len(),
                        g.nodes.first().copied().unwrap_or(0),
                        g.dtype,
                        g.shape.as_slice()
                    );
                    (kind, label)
                }
                Step::SliceSum(ss) => {
                    let kind = "slice sum".to_string();
                    let label = format!(
                        "slice sum of {} parts along dim {} from nodes[{}] -> {}",
                        ss.parts.len(),
                        ss.dim,
                        ss.nodes.first().copied().unwrap_or(0),
                        shape(ss.out)
                    );
                    (kind, label)
                }
                Step::Scalar(sp) => {
                    let kind = "scalar program".to_string();
                    let label = format!(
                        "scalar program: {} 0-d nodes from nodes[{}]",
                        sp.nodes.len(),
                        sp.nodes.first().copied().unwrap_or(0)
                    );
                    (kind, label)
                }
            })
            .collect()
    }

    /// Whether node `n` of [`graph`](Self::graph) runs (dead nodes and
    /// nodes a fast rule replaces do not).
    pub fn runs_node(&self, n: usize) -> bool {
        self.program.steps.iter().any(|step| match step {
            Step::Fast(_) => false,
            _ => step.nodes().contains(&(n as u32)),
        })
    }
}

fn pattern_name(p: Pattern) -> &'static str {
    match p {
        Pattern::Full => "full",
        Pattern::Scalar => "scalar",
        Pattern::Periodic => "per column",
        Pattern::PerRow => "per row",
    }
}
