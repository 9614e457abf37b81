//! Expressions to graphs: the front end of the `trace` example.
//!
//! [`parse`] turns text such as `x*y + x` or
//! `h = tanh(q*w + b); sum(h*h)` into a [`Program`] (an AST whose every
//! node knows its byte span); [`Program::build`] replays it on a [`Graph`](retrograd_engine::Graph)
//! through the registry (`graph.apply` by op name), so any registered
//! function works: `exp(x)`, `tanh(x)`, a user op `cube(x)`. [`trace()`]
//! does both, runs backward and writes the textbook-style report.
//!
//! Syntax: numbers (`3`, `0.5`, `1e-3`), names, `+ - * /`, unary minus,
//! `^` or `**` (when an op named `pow` is registered), parentheses, calls
//! `f(x)` and `f(x, y)`, and assignments `name = expr;` before the final
//! expression. Errors carry the span; [`ExprError::render`] points a caret
//! at the column.
//!
//! ```
//! use retrograd::expr;
//! use retrograd::{Graph, Tensor};
//! use std::collections::HashMap;
//!
//! let program = expr::parse("x*y + x")?;
//! let graph = Graph::new();
//! let inputs = HashMap::from([
//!     ("x".to_string(), graph.named_variable("x", Tensor::scalar(3.0))),
//!     ("y".to_string(), graph.named_variable("y", Tensor::scalar(4.0))),
//! ]);
//! let w = program.build(&graph, &inputs)?;
//! assert_eq!(w.value().item(), 15.0);
//! assert_eq!(graph.to_string(), "nodes[0] = mul(x, y) -> 12\nnodes[1] = add(nodes[0], x) -> 15\n");
//!
//! let err = expr::parse("x*y + tanhh(x)").unwrap().build(&graph, &inputs).unwrap_err();
//! assert_eq!(err.column(), 7);
//! assert!(err.render().starts_with(
//!     "error: unknown function `tanhh` (did you mean `tanh`?)\n  x*y + tanhh(x)\n        ^^^^^\n"
//! ));
//! # Ok::<(), retrograd::expr::ExprError>(())
//! ```
//!
//! Where things are: feature `expr`: expression AST with spans (`mod.rs`),
//! chumsky grammar (`parse.rs`), building through `graph.apply`
//! (`build.rs`), `ExprError` with carets (`error.rs`), the `trace` report
//! (`trace.rs`).

mod build;
mod error;
mod parse;
mod trace;

use std::ops::Range;
use std::sync::Arc;

pub use error::ExprError;
pub use parse::parse;
pub use trace::{parse_input, trace, Input, Trace};

/// A byte range in the source text.
pub type Span = Range<usize>;

/// An expression and the source bytes it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What the expression is.
    pub kind: ExprKind,
    /// Where it is in the source.
    pub span: Span,
}

/// The forms an [`Expr`] takes.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A number literal.
    Number(f64),
    /// An input or an assigned name.
    Name(String),
    /// Unary minus (the `neg` op).
    Neg(Box<Expr>),
    /// A binary operator.
    Binary {
        /// Which operator.
        op: BinOp,
        /// Where the operator is.
        op_span: Span,
        /// The left operand.
        lhs: Box<Expr>,
        /// The right operand.
        rhs: Box<Expr>,
    },
    /// A call `f(args...)` of the op registered as `f`.
    Call {
        /// The function (op) name.
        name: String,
        /// Where the name is.
        name_span: Span,
        /// The arguments.
        args: Vec<Expr>,
    },
}

/// A binary operator and the op it records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+` (`add`)
    Add,
    /// `-` (`sub`)
    Sub,
    /// `*` (`mul`)
    Mul,
    /// `/` (`div`)
    Div,
    /// `^` or `**` (`pow`, when registered)
    Pow,
}

impl BinOp {
    /// The registered name of the op this operator applies.
    pub fn op_name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Pow => "pow",
        }
    }
}

/// `name = value;`
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// The name given to the value.
    pub name: String,
    /// Where the name is.
    pub name_span: Span,
    /// The value.
    pub value: Expr,
}

/// Parsed source: assignments, then the expression whose value is the output.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The source text (errors quote it).
    pub source: Arc<str>,
    /// `name = value;` statements, in order.
    pub assignments: Vec<Assignment>,
    /// The final expression.
    pub output: Expr,
}
