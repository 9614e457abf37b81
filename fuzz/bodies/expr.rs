//! Body of the `expr` fuzz target: arbitrary text through `expr::trace`
//! (parse, build on a graph through the op registry, backward, report).
//!
//! Checked: never a panic; an error's span lies inside the source, its
//! line and column count from 1 and it renders; a traced expression's
//! gradients have the shapes of their inputs and the output is a scalar
//! whenever backward ran.

use retrograd::expr::{trace, Input};
use retrograd::{Graph, Tensor};

pub fn run(data: &[u8]) {
    let source = String::from_utf8_lossy(data);
    let mut y = Input::new("y", Tensor::scalar(-0.5));
    y.frozen = true;
    let inputs = [
        Input::new("x", Tensor::scalar(3.0)),
        y,
        Input::new("q", Tensor::vector(&[0.5, -1.0, 2.0])),
        Input::new(
            "m",
            Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).expect("2x3"),
        ),
    ];
    let graph = Graph::new();
    match trace(&graph, &source, &inputs) {
        Ok(t) => {
            assert!(t.report().starts_with("expression: "));
            if let Some(grads) = &t.gradients {
                assert_eq!(
                    t.output.value().numel(),
                    1,
                    "backward ran from a non-scalar output"
                );
                for (input, var) in inputs.iter().zip(&t.inputs) {
                    if !input.frozen {
                        let g = grads.try_wrt(var).expect("an input's gradient reads");
                        assert_eq!(
                            g.shape(),
                            input.value.shape(),
                            "gradient of `{}`",
                            input.name
                        );
                    }
                }
            }
        }
        Err(e) => {
            let span = e.span();
            assert!(
                span.start <= span.end && span.end <= source.len(),
                "span {span:?} of {e:?}"
            );
            assert!(source.is_char_boundary(span.start) && source.is_char_boundary(span.end));
            assert!(e.line() >= 1 && e.column() >= 1);
            assert!(e.render().starts_with("error: "), "{}", e.render());
        }
    }
}
