//! The `expr` front end: malformed expressions are `ExprError`s pointing at
//! a column; deeply nested and very long input is refused or evaluated,
//! never a stack overflow; engine errors come back at their span.

use retrograd::expr::{parse, parse_input, trace, ExprError, Input};
use retrograd::{Graph, Tensor};

use crate::harness::{ensure, Outcome, Table};

/// `parse` (and `trace`, with inputs `x` and `y`) must give an `ExprError`
/// whose message contains `mention`.
fn rejected(source: String, mention: &'static str) -> impl Fn() -> Outcome {
    move || {
        let check = |what: &str, e: Result<(), ExprError>| match e {
            Ok(()) => Err(format!("{what}: expected an error")),
            Err(e) => ensure(e.message().contains(mention), || {
                format!(
                    "{what}: message `{}` does not mention `{mention}`",
                    e.message()
                )
            }),
        };
        let g = Graph::new();
        let inputs = [
            Input::new("x", Tensor::scalar(2.0)),
            Input::new("y", Tensor::scalar(3.0)),
        ];
        check("trace", trace(&g, &source, &inputs).map(|_| ()))?;
        if let Err(e) = parse(&source) {
            // Render must not panic either, whatever the span.
            let _ = e.render();
        }
        Ok(())
    }
}

/// `trace` must either evaluate `source` or reject it with an error; the
/// point is that nothing overflows the stack or panics.
fn survives(source: String) -> impl Fn() -> Outcome {
    move || {
        let g = Graph::new();
        let inputs = [Input::new("x", Tensor::scalar(0.5))];
        match trace(&g, &source, &inputs) {
            Ok(t) => ensure(!t.report().is_empty(), || "empty report".into()),
            Err(e) => ensure(!e.render().is_empty(), || "empty error".into()),
        }
    }
}

pub fn cases(t: &mut Table) {
    let malformed: [(&str, &'static str); 16] = [
        ("", "unexpected end of input"),
        ("   ", "unexpected end of input"),
        ("x +", "unexpected end of input"),
        ("x * (y + )", "unexpected `)`"),
        ("(x", "unexpected end of input"),
        ("x)", "unexpected `)`"),
        ("x $ y", "unexpected `$`"),
        ("tanhh(x)", "unknown function `tanhh`"),
        ("z", "unknown variable `z`"),
        ("exp(x, y)", "exp"),
        ("exp()", "exp"),
        ("x = 1; x", "`x` is an input"),
        ("a = x; a = y; a", "`a` is assigned twice"),
        ("a = x;", "unexpected end of input"),
        ("x\u{0}y", "unexpected"),
        ("\u{1F600} + x", "unexpected"),
    ];
    for (source, mention) in malformed {
        t.add(
            format!("expr: malformed `{}`", source.escape_debug()),
            rejected(source.to_string(), mention),
        );
    }
    t.add(
        "expr: 100,000 nested parentheses",
        rejected(
            format!("{}x{}", "(".repeat(100_000), ")".repeat(100_000)),
            "too long",
        ),
    );
    t.add(
        "expr: 100,000 unclosed parentheses",
        rejected("(".repeat(100_000), "too long"),
    );
    t.add(
        "expr: 100,000 unary minuses",
        rejected(format!("{}x", "-".repeat(100_000)), "too long"),
    );
    t.add(
        "expr: 100,000 nested calls",
        rejected(
            format!("{}x{}", "exp(".repeat(100_000), ")".repeat(100_000)),
            "too long",
        ),
    );
    t.add(
        "expr: 1,999 nested parentheses",
        survives(format!("{}x{}", "(".repeat(1999), ")".repeat(1999))),
    );
    t.add(
        "expr: 1,000 nested calls",
        survives(format!("{}x{}", "tanh(".repeat(1000), ")".repeat(1000))),
    );
    t.add(
        "expr: 1,999 unary minuses",
        survives(format!("{}x", "-".repeat(1999))),
    );
    t.add(
        "expr: a 1,999-deep power tower",
        survives(format!("x{}", "^x".repeat(1999))),
    );
    t.add(
        "expr: a sum of 2,000 terms",
        survives(format!("x{}", "+x".repeat(2000))),
    );
    t.add("expr: 20,000 chained assignments", || {
        let mut source = String::from("a0 = x;");
        for i in 1..20_000 {
            source.push_str(&format!(" a{i} = a{};", i - 1));
        }
        source.push_str(" a19999");
        survives(source)()
    });
    t.add("expr: a 1,000,000-character name", || {
        let name = "v".repeat(1_000_000);
        rejected(name, "unknown variable")()
    });
    t.add(
        "expr: a number too large for f64 is infinity, not a panic",
        survives("1e999 * x".to_string()),
    );
    t.add(
        "expr: a 10,000-digit number",
        survives(format!("{} + x", "9".repeat(10_000))),
    );
    t.add("expr: a shape mismatch is an error at its span", || {
        let g = Graph::new();
        let inputs = [
            Input::new("x", Tensor::vector(&[1.0, 2.0])),
            Input::new("y", Tensor::vector(&[1.0, 2.0, 3.0])),
        ];
        match trace(&g, "x * y", &inputs) {
            Ok(_) => Err("expected an error".into()),
            Err(e) => ensure(
                e.message().contains("[2]") && e.message().contains("[3]") && e.column() >= 1,
                || format!("message `{}`", e.message()),
            ),
        }
    });
    t.add(
        "expr: mixed input dtypes are an error at the operator",
        || {
            let g = Graph::new();
            let inputs = [
                Input::new("x", Tensor::scalar(1.0f32)),
                Input::new("y", Tensor::scalar(2.0f64)),
            ];
            match trace(&g, "x * y", &inputs) {
                Ok(_) => Err("expected an error".into()),
                Err(e) => ensure(
                    e.message().contains("f32") && e.message().contains("f64"),
                    || format!("message `{}`", e.message()),
                ),
            }
        },
    );
    t.add(
        "expr: literals take their operand's dtype whatever the input order",
        || {
            // Inputs are held in a hash map: repeat so any order dependence shows.
            for _ in 0..20 {
                let g = Graph::new();
                let inputs = [
                    Input::new("x", Tensor::scalar(1.5f32)),
                    Input::new("y", Tensor::scalar(2.0f64)),
                ];
                let t =
                    trace(&g, "a = 2 * x - -1; b = y + 1; a", &inputs).map_err(|e| e.render())?;
                ensure(t.output.dtype() == retrograd::DType::F32, || "dtype".into())?;
                ensure(t.output.value().try_item() == Ok(4.0), || {
                    format!("{}", t.output.value())
                })?;
            }
            Ok(())
        },
    );
    t.add("expr: an input given twice", || {
        let g = Graph::new();
        let inputs = [
            Input::new("x", Tensor::scalar(1.0)),
            Input::new("x", Tensor::scalar(2.0)),
        ];
        match trace(&g, "x", &inputs) {
            Ok(_) => Err("expected an error".into()),
            Err(e) => ensure(e.message().contains("given twice"), || {
                e.message().to_string()
            }),
        }
    });
    for arg in [
        "x",
        "=3",
        "x=",
        "x=[1,2",
        "x=abc",
        "1x=3",
        "x=[]",
        "x=[[1],[2,3]]",
        "x=[1e999]",
        "x=[,]",
    ] {
        t.add(
            format!("expr::parse_input: `{arg}`"),
            move || match parse_input(arg) {
                // Some of these are values (`[]` is an empty vector, `1e999` is inf);
                // the rest are errors that say what is wrong. Neither panics.
                Ok(input) => ensure(!input.name.is_empty(), || "an input without a name".into()),
                Err(msg) => ensure(!msg.is_empty(), || "an empty message".into()),
            },
        );
    }
}
