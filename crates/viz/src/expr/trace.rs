//! [`trace()`]: parse, build, run backward, and report in the textbook chapter's style.

use std::collections::HashMap;
use std::fmt::Write;

use super::{parse, ExprError, Program};
use crate::viz::VizOptions;
use retrograd_engine::autograd::Gradients;
use retrograd_engine::base::error::Error;
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::tensor::Tensor;

/// One input of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// The name the expression uses.
    pub name: String,
    /// Its value.
    pub value: Tensor,
    /// A frozen input is a constant: no gradient flows to it, and operations
    /// on frozen values alone record no node.
    pub frozen: bool,
}

impl Input {
    /// An input that requires grad.
    pub fn new(name: &str, value: Tensor) -> Self {
        Input {
            name: name.to_string(),
            value,
            frozen: false,
        }
    }
}

/// Parses `NAME=VALUE`, where VALUE is a number (`3`, `-0.5`) or a vector
/// (`[1, 2, 3]`); the input requires grad.
///
/// ```
/// use retrograd::expr::parse_input;
/// let x = parse_input("x=3").unwrap();
/// assert_eq!((x.name.as_str(), x.value.item()), ("x", 3.0));
/// let q = parse_input("q=[0.5, -1, 2]").unwrap();
/// assert_eq!(q.value.shape(), &[3]);
/// assert!(parse_input("x=three").unwrap_err().contains("three"));
/// ```
pub fn parse_input(arg: &str) -> Result<Input, String> {
    let (name, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("`{arg}`: inputs are NAME=VALUE, such as x=3 or q=[1,2,3]"))?;
    let name = name.trim();
    let valid_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid_name {
        return Err(format!("`{name}` is not a name (letters, digits and _)"));
    }
    let number = |s: &str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| format!("`{}` (the value of {name}) is not a number", s.trim()))
    };
    let value = value.trim();
    let tensor = match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(items) => {
            let values = items
                .split(',')
                .map(number)
                .collect::<Result<Vec<f64>, String>>()?;
            Tensor::vector(&values)
        }
        None => Tensor::scalar(number(value)?),
    };
    Ok(Input::new(name, tensor))
}

/// The result of [`trace()`]: the graph's handles, the gradients, and the report.
#[derive(Debug)]
pub struct Trace<'g> {
    /// The parsed source.
    pub program: Program,
    /// The inputs, in the order given.
    pub inputs: Vec<Var<'g>>,
    /// The expression's value.
    pub output: Var<'g>,
    /// Gradients of the output (every op output's gradient is retained);
    /// `None` when the output does not require grad.
    pub gradients: Option<Gradients>,
    report: String,
}

impl Trace<'_> {
    /// The textbook-style report: the trace, both backward orders, the output
    /// and every gradient.
    pub fn report(&self) -> &str {
        &self.report
    }

    /// Picture options for this trace: rooted at the output, with gradients.
    pub fn viz_options(&self) -> VizOptions<'_> {
        let options = VizOptions::new().root(&self.output);
        match &self.gradients {
            Some(g) => options.gradients(g),
            None => options,
        }
    }
}

/// Parses `source`, builds it on `graph` with `inputs` (through
/// `graph.apply`, so every registered op is a function), runs backward from
/// the output, and writes the report:
///
/// ```
/// use retrograd::expr::{trace, Input};
/// use retrograd::{Graph, Tensor};
///
/// let graph = Graph::new();
/// let inputs = [Input::new("x", Tensor::scalar(3.0)), Input::new("y", Tensor::scalar(4.0))];
/// let t = trace(&graph, "x*y + x", &inputs)?;
/// assert_eq!(t.report(), "\
/// expression: x*y + x
/// inputs: x = 3, y = 4
/// nodes[0] = mul(x, y) -> 12
/// nodes[1] = add(nodes[0], x) -> 15
/// topological_backward_order() = [1, 0]
/// backward_order(output)       = [1, 0]
/// output = 15
/// gradients of the output:
///   x = 5
///   y = 3
///   nodes[0] = 1
///   nodes[1] = 1
/// ");
/// # Ok::<(), retrograd::expr::ExprError>(())
/// ```
///
/// Errors: those of [`parse`] and [`Program::build`]; an input given twice;
/// a non-scalar output (backward needs a scalar: wrap it in `sum(...)`).
pub fn trace<'g>(graph: &'g Graph, source: &str, inputs: &[Input]) -> Result<Trace<'g>, ExprError> {
    let program = parse(source)?;
    let whole = 0..source.len();
    let mut vars = Vec::with_capacity(inputs.len());
    let mut by_name = HashMap::new();
    for input in inputs {
        let var = if input.frozen {
            graph.named_constant(&input.name, input.value.clone())
        } else {
            graph.named_variable(&input.name, input.value.clone())
        };
        if by_name.insert(input.name.clone(), var.clone()).is_some() {
            return Err(ExprError::new(
                &program.source,
                whole,
                format!("input `{}` is given twice", input.name),
            ));
        }
        vars.push(var);
    }
    let output = program.build(graph, &by_name)?;

    let mut report = format!("expression: {source}\n");
    let listed: Vec<String> = inputs
        .iter()
        .map(|i| {
            let frozen = if i.frozen { " (frozen)" } else { "" };
            format!("{} = {}{frozen}", i.name, i.value)
        })
        .collect();
    let _ = writeln!(report, "inputs: {}", listed.join(", "));
    if graph.is_empty() {
        report.push_str(
            "(no nodes recorded: every operation had only frozen or constant operands)\n",
        );
    }
    let _ = write!(report, "{graph}");
    let _ = writeln!(
        report,
        "topological_backward_order() = {:?}",
        graph.topological_backward_order()
    );
    let _ = writeln!(
        report,
        "backward_order(output)       = {:?}",
        graph.backward_order(&output)
    );
    let _ = writeln!(report, "output = {}", output.value());

    let gradients = if output.requires_grad() {
        for node in graph.nodes() {
            node.output().retain_grad();
        }
        let grads = output.backward().map_err(|e| match e {
            Error::NonScalarRoot { .. } => ExprError::new(
                &program.source,
                program.output.span.clone(),
                format!(
                    "backward needs a scalar output, and this one has shape {:?}",
                    output.shape()
                ),
            )
            .with_note("wrap the expression in sum(...)"),
            other => ExprError::new(
                &program.source,
                program.output.span.clone(),
                other.to_string(),
            ),
        })?;
        report.push_str("gradients of the output:\n");
        for (input, var) in inputs.iter().zip(&vars) {
            if input.frozen {
                let _ = writeln!(report, "  {}: frozen, no gradient", input.name);
            } else {
                let _ = writeln!(report, "  {} = {}", input.name, grads.wrt(var));
            }
        }
        for node in graph.nodes() {
            let label = match node.output().name() {
                Some(name) => format!("{name} (nodes[{}])", node.index()),
                None => format!("nodes[{}]", node.index()),
            };
            match grads.get(node.output()) {
                Some(g) => {
                    let _ = writeln!(report, "  {label} = {g}");
                }
                None => {
                    let _ = writeln!(report, "  {label}: not reached (not in backward_order)");
                }
            }
        }
        Some(grads)
    } else {
        report.push_str("the output does not require grad: nothing to differentiate\n");
        None
    };
    Ok(Trace {
        program,
        inputs: vars,
        output,
        gradients,
        report,
    })
}
