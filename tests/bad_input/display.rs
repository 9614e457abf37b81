//! Printing odd values never panics: empty and huge zero-sized tensors,
//! NaN and infinities, and graphs (trace text, DOT, SVG) that hold them.

use retrograd::viz::GraphPictures;
use retrograd::viz::VizOptions;
use retrograd::{DType, Error, Graph, Tensor};

use crate::expect_err;
use crate::harness::{ensure, setup, Table};

fn odd_tensors() -> Vec<(&'static str, Tensor)> {
    vec![
        ("empty", Tensor::zeros(&[0], DType::F32).unwrap()),
        ("zero rows", Tensor::zeros(&[0, 3], DType::F64).unwrap()),
        (
            "huge zero-sized",
            Tensor::zeros(&[usize::MAX, 0, usize::MAX], DType::F64).unwrap(),
        ),
        (
            "non-finite",
            Tensor::vector(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0]),
        ),
        ("0-d NaN", Tensor::scalar(f32::NAN)),
        ("large", Tensor::ones(&[100, 100], DType::F32).unwrap()),
    ]
}

pub fn cases(t: &mut Table) {
    for (name, tensor) in odd_tensors() {
        let shown = format!("{:?}", tensor.shape());
        let for_graph = tensor.clone();
        t.add(format!("Display and Debug of a {name} tensor"), move || {
            let text = format!("{tensor}\n{tensor:?}");
            ensure(!text.is_empty() && text.len() < 100_000, || {
                format!("{} bytes", text.len())
            })?;
            ensure(text.contains(&shown) || tensor.rank() <= 1, || {
                format!("shape {shown} not shown")
            })
        });
        t.add(
            format!("trace text, DOT and SVG of a graph holding a {name} tensor"),
            move || {
                let g = Graph::new();
                let x = g.named_variable("x", for_graph.clone());
                let y = x.exp();
                let loss = y.sum();
                let grads = setup(loss.backward())?;
                let text = format!("{g}");
                ensure(text.contains("exp"), || "trace without exp".into())?;
                let opts = VizOptions::new().root(&loss).gradients(&grads);
                let dot = setup(g.to_dot(&opts))?;
                ensure(dot.contains("digraph"), || "not DOT".into())?;
                let svg = setup(g.to_svg(&opts.renderer(retrograd::viz::Renderer::Builtin)))?;
                ensure(svg.contains("<svg"), || "not SVG".into())
            },
        );
    }
    t.add("write_svg: into a missing directory", || {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(1.0));
        let _ = x.exp();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("no/such/dir/g.svg");
        let opts = VizOptions::new().renderer(retrograd::viz::Renderer::Builtin);
        expect_err!(g.write_svg(&path, &opts), Error::Io { .. }, ["g.svg"])
    });
    t.add("write_dot: a path that is a directory", || {
        let g = Graph::new();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        expect_err!(
            g.write_dot(dir.path(), &VizOptions::new()),
            Error::Io { .. },
            []
        )
    });
    t.add("to_dot: max_nodes 0 and an empty graph", || {
        let g = Graph::new();
        let dot = setup(g.to_dot(&VizOptions::new().max_nodes(0)))?;
        ensure(dot.contains("digraph"), || "not DOT".into())
    });
    t.add("to_dot: a root from another graph", || {
        let g = Graph::new();
        let h = Graph::new();
        let y = h.variable(Tensor::scalar(1.0)).exp();
        expect_err!(
            g.to_dot(&VizOptions::new().root(&y)),
            Error::ForeignVariable { .. },
            []
        )
    });
}
