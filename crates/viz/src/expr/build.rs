//! Replaying a [`Program`] on a [`Graph`]: every operator and call goes
//! through `graph.apply` by op name, so the registry decides what exists.

use std::collections::HashMap;
use std::sync::Arc;

use super::{BinOp, Expr, ExprError, ExprKind, Program, Span};
use retrograd_engine::base::error::Error;
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::tensor::{DType, Tensor};

impl Program {
    /// Builds the program on `graph`, with `inputs` bound by name; returns
    /// the output. Assigned names (`h = ...;`) name their value in traces
    /// and pictures. Numbers are constants of the inputs' dtype (f64 when
    /// there are no inputs); an operation whose operands are all frozen
    /// records no node (constant folding).
    ///
    /// Errors (each at its span): an unknown name or function, a wrong
    /// number of arguments, `^` with no `pow` op registered, a name
    /// assigned twice or shadowing an input, and any error the engine
    /// reports for one operation (a shape mismatch, say).
    pub fn build<'g>(
        &self,
        graph: &'g Graph,
        inputs: &HashMap<String, Var<'g>>,
    ) -> Result<Var<'g>, ExprError> {
        let dtype = inputs.values().next().map_or(DType::F64, Var::dtype);
        let mut builder = Builder {
            graph,
            source: &self.source,
            dtype,
            env: inputs.clone(),
            input_ids: inputs.values().filter_map(Var::value_id).collect(),
        };
        for a in &self.assignments {
            if inputs.contains_key(&a.name) {
                return Err(builder.error(
                    a.name_span.clone(),
                    format!("`{}` is an input; assign to another name", a.name),
                ));
            }
            if builder.env.contains_key(&a.name) {
                return Err(builder.error(
                    a.name_span.clone(),
                    format!("`{}` is assigned twice", a.name),
                ));
            }
            let value = builder.eval(&a.value)?;
            builder
                .env
                .insert(a.name.clone(), builder.name_value(value, &a.name));
        }
        builder.eval(&self.output)
    }
}

/// Whether `e` is a number, possibly negated (a constant made of literals only).
fn is_literal(mut e: &Expr) -> bool {
    loop {
        match &e.kind {
            ExprKind::Number(_) => return true,
            ExprKind::Neg(inner) => e = inner,
            _ => return false,
        }
    }
}

struct Builder<'a, 'g> {
    graph: &'g Graph,
    source: &'a Arc<str>,
    dtype: DType,
    env: HashMap<String, Var<'g>>,
    input_ids: Vec<usize>,
}

impl<'g> Builder<'_, 'g> {
    fn error(&self, span: Span, message: impl Into<String>) -> ExprError {
        ExprError::new(self.source, span, message)
    }

    /// Names an op output or a folded constant; an input keeps its own name.
    fn name_value(&self, value: Var<'g>, name: &str) -> Var<'g> {
        let is_input = value
            .value_id()
            .is_some_and(|id| self.input_ids.contains(&id));
        if is_input || value.name().is_some() {
            value
        } else {
            value.named(name)
        }
    }

    /// Nesting is bounded by `parse` (`MAX_OPERATORS`), but each level is a
    /// deep call chain: the stack grows on demand instead of overflowing.
    fn eval(&self, e: &Expr) -> Result<Var<'g>, ExprError> {
        stacker::maybe_grow(64 * 1024, 1024 * 1024, || self.eval_node(e))
    }

    fn eval_node(&self, e: &Expr) -> Result<Var<'g>, ExprError> {
        match &e.kind {
            ExprKind::Number(v) => Ok(Var::constant_in(
                self.graph,
                Tensor::scalar_of(*v, self.dtype),
            )),
            ExprKind::Name(name) => self.env.get(name).cloned().ok_or_else(|| {
                let mut known: Vec<&str> = self.env.keys().map(String::as_str).collect();
                known.sort_unstable();
                let note = if known.is_empty() {
                    "no names are defined; bind inputs as NAME=VALUE".to_string()
                } else {
                    format!("defined names: {}", known.join(", "))
                };
                self.error(e.span.clone(), format!("unknown variable `{name}`"))
                    .with_note(note)
            }),
            ExprKind::Neg(inner) => {
                let x = self.eval(inner)?;
                self.apply("neg", &[&x], e.span.clone(), "unary `-`")
            }
            ExprKind::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => {
                if *op == BinOp::Pow && !self.graph.registry().contains("pow") {
                    return Err(self
                        .error(
                            op_span.clone(),
                            "`^` needs an op registered as `pow`, and this registry has none",
                        )
                        .with_note("multiply instead (x*x), or register a `pow` op"));
                }
                let mut l = self.eval(lhs)?;
                let mut r = self.eval(rhs)?;
                // A literal takes the other operand's dtype (as a Rust scalar
                // operand does), whichever input happened to set `self.dtype`.
                if is_literal(lhs) && l.dtype() != r.dtype() {
                    l = Var::constant_in(self.graph, l.value().to_dtype(r.dtype()));
                } else if is_literal(rhs) && l.dtype() != r.dtype() {
                    r = Var::constant_in(self.graph, r.value().to_dtype(l.dtype()));
                }
                let what = format!("`{}`", &self.source[op_span.clone()]);
                self.apply(op.op_name(), &[&l, &r], op_span.clone(), &what)
            }
            ExprKind::Call {
                name,
                name_span,
                args,
            } => {
                if let Err(Error::UnregisteredOp { suggestion, .. }) =
                    self.graph.registry().get(name)
                {
                    let hint = suggestion
                        .map(|s| format!(" (did you mean `{s}`?)"))
                        .unwrap_or_default();
                    return Err(self
                        .error(
                            name_span.clone(),
                            format!("unknown function `{name}`{hint}"),
                        )
                        .with_note(format!(
                            "functions are the registered ops: {}",
                            self.graph.registry().names().join(", ")
                        )));
                }
                let values = args
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>, _>>()?;
                let refs: Vec<&Var<'g>> = values.iter().collect();
                self.apply(name, &refs, e.span.clone(), &format!("`{name}`"))
            }
        }
    }

    fn apply(
        &self,
        op: &str,
        inputs: &[&Var<'g>],
        span: Span,
        what: &str,
    ) -> Result<Var<'g>, ExprError> {
        self.graph.apply(op, inputs).map_err(|err| match err {
            Error::Arity { expected, got, .. } => self.error(
                span,
                format!(
                    "{what} takes {expected} argument{}, got {got}",
                    if expected == 1 { "" } else { "s" }
                ),
            ),
            other => self.error(span, format!("{what} failed: {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn inputs(g: &Graph) -> HashMap<String, Var<'_>> {
        HashMap::from([
            ("x".to_string(), g.named_variable("x", Tensor::scalar(3.0))),
            ("y".to_string(), g.named_constant("y", Tensor::scalar(4.0))),
            (
                "v".to_string(),
                g.named_variable("v", Tensor::vector(&[1.0, 2.0])),
            ),
        ])
    }

    fn build_err(src: &str) -> ExprError {
        let g = Graph::new();
        parse(src).unwrap().build(&g, &inputs(&g)).unwrap_err()
    }

    #[test]
    fn builds_through_the_registry() {
        let g = Graph::new();
        let out = parse("h = tanh(x / 3); exp(-h) * x - 1")
            .unwrap()
            .build(&g, &inputs(&g))
            .unwrap();
        let expected = (-(1.0f64).tanh()).exp() * 3.0 - 1.0;
        assert!((out.value().item() - expected).abs() < 1e-12);
        let ops: Vec<String> = g.nodes().iter().map(|n| n.op_name().to_string()).collect();
        assert_eq!(ops, ["div", "tanh", "neg", "exp", "mul", "sub"]);
        assert_eq!(g.nodes()[1].output().name().as_deref(), Some("h"));
    }

    #[test]
    fn frozen_operands_fold_to_constants() {
        let g = Graph::new();
        // y is frozen: y*2 + 1 records nothing; only the final mul by x does.
        let out = parse("(y*2 + 1) * x")
            .unwrap()
            .build(&g, &inputs(&g))
            .unwrap();
        assert_eq!(out.value().item(), 27.0);
        assert_eq!(g.len(), 1);
        assert_eq!(g.to_string(), "nodes[0] = mul(9, x) -> 27\n");
    }

    #[test]
    fn errors_point_at_the_culprit() {
        let e = build_err("x*y + tanhh(x)");
        assert_eq!((e.column(), e.span()), (7, 6..11));
        assert_eq!(
            e.message(),
            "unknown function `tanhh` (did you mean `tanh`?)"
        );
        assert!(e.note().unwrap().contains("tanh"));

        let e = build_err("x + z");
        assert_eq!((e.column(), e.message()), (5, "unknown variable `z`"));
        assert_eq!(e.note(), Some("defined names: v, x, y"));

        // `pow` is a built-in; a registry without one reports `^` itself.
        let g = Graph::with_registry(Arc::new(retrograd_engine::ops::OpRegistry::new()));
        let e = parse("x ^ 2").unwrap().build(&g, &inputs(&g)).unwrap_err();
        assert_eq!(e.column(), 3);
        assert!(e.message().contains("`pow`"));

        let e = build_err("tanh(x, y)");
        assert_eq!(e.span(), 0..10);
        assert_eq!(e.message(), "`tanh` takes 1 argument, got 2");

        let e = build_err("x = 2; x");
        assert_eq!(e.message(), "`x` is an input; assign to another name");
        let e = build_err("a = x; a = 2; a");
        assert_eq!(e.column(), 8);
    }

    #[test]
    fn engine_errors_carry_the_operator_span() {
        let g = Graph::new();
        let inputs = HashMap::from([
            ("a".to_string(), g.variable(Tensor::vector(&[1.0, 2.0]))),
            (
                "b".to_string(),
                g.variable(Tensor::vector(&[1.0, 2.0, 3.0])),
            ),
        ]);
        let e = parse("a + a * b").unwrap().build(&g, &inputs).unwrap_err();
        assert_eq!(e.span(), 6..7);
        assert!(e.message().starts_with("`*` failed: "), "{}", e.message());
    }

    #[test]
    fn a_registered_pow_is_used() {
        use retrograd_engine::ops::{Differentiable, GradInputs, OpRegistry};
        struct Pow;
        impl Differentiable for Pow {
            fn name(&self) -> &str {
                "pow"
            }
            fn holds(&self) -> retrograd_engine::Holds {
                retrograd_engine::Holds::Settings
            }
            fn arity(&self) -> Option<usize> {
                Some(2)
            }
            fn forward(&self, inputs: &[&Tensor]) -> retrograd_engine::Result<Tensor> {
                let (b, e) = (inputs[0].try_item()?, inputs[1].try_item()?);
                Ok(Tensor::scalar(b.powf(e)))
            }
            fn backward<'g>(
                &self,
                g: &Var<'g>,
                inputs: &[Var<'g>],
                out: &Var<'g>,
            ) -> retrograd_engine::Result<GradInputs<'g>> {
                let (b, e) = (&inputs[0], &inputs[1]);
                Ok(smallvec::smallvec![
                    b.requires_grad().then(|| g * &(e * &(out / b))),
                    e.requires_grad().then(|| g * &(out * &b.log())),
                ])
            }
        }
        let mut reg = OpRegistry::with_builtins();
        assert!(reg.replace("pow", Pow).unwrap().is_some()); // a user op replaces the built-in
        let g = Graph::with_registry(Arc::new(reg));
        let x = g.named_variable("x", Tensor::scalar(3.0));
        let out = parse("x^2 + x**0")
            .unwrap()
            .build(&g, &HashMap::from([("x".to_string(), x.clone())]))
            .unwrap();
        assert_eq!(out.value().item(), 10.0);
        assert_eq!(out.backward().unwrap().wrt(&x).item(), 6.0);
    }
}
