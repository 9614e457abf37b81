//! Backward over very long chains must not recurse: it runs here on a thread
//! with a deliberately small stack. Compiling such graphs (capture,
//! lowering, the explanation) must not recurse either: those tests run on
//! the test harness's own thread, with the default stack.

use retrograd::viz::GraphPictures;
use retrograd::viz::{Renderer, VizOptions, BUILTIN_LAYOUT_LIMIT};
use retrograd::{compile, CompileOptions, Error, Graph, Result, Tensor, Var};

#[test]
fn a_million_node_chain_backward_does_not_overflow_the_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let g = Graph::new();
            let x = g.variable(Tensor::scalar(1.0));
            let mut v = x.clone();
            let n = 1_000_000;
            for _ in 0..n {
                v = &v + 1e-6;
            }
            assert_eq!(g.len(), n);
            let order = g.backward_order(&v);
            assert_eq!(order.len(), n);
            assert_eq!(order[0], n - 1);
            let grads = v.backward().unwrap();
            assert_eq!(grads.wrt(&x).item(), 1.0);
            assert!((v.value().item() - 2.0).abs() < 1e-6);
            drop(g);
        })
        .unwrap();
    handle.join().unwrap();
}

/// A long sum: one input added `terms` times, so
/// that the forward is a chain of `terms` adds and the input's gradient a
/// sum of `terms + 1` contributions.
fn long_sum<'g>(x: &Var<'g>, terms: usize) -> Result<Var<'g>> {
    let mut y = x.clone();
    for _ in 0..terms {
        y = y.try_add(x)?;
    }
    y.try_sum()
}

/// A chain of `nodes` unary ops.
fn tanh_chain<'g>(x: &Var<'g>, nodes: usize) -> Result<Var<'g>> {
    let mut y = x.clone();
    for _ in 0..nodes - 1 {
        y = y.tanh();
    }
    y.try_sum()
}

type Function = for<'g> fn(&Var<'g>, usize) -> Result<Var<'g>>;

/// Captures, replays and checks against the eager pass, bit for bit, on
/// the test's own thread (the default stack): capture and lowering must
/// walk the million-node graph without recursing.
fn compiled_matches_eager(f: Function, size: usize) {
    let x = Tensor::from_vec(vec![0.5f32, -0.25, 2.0, 0.125], &[4]).unwrap();
    let want = {
        let graph = Graph::new();
        let xv = graph.variable(x.clone());
        let loss = f(&xv, size).unwrap();
        let grads = loss.backward().unwrap();
        (
            loss.value().item().to_bits(),
            grads.wrt(&xv).to_vec::<f32>().unwrap(),
        )
    };
    let mut step = compile(
        move |_: &Graph, v: &[Var<'_>]| f(&v[0], size),
        CompileOptions::new().grad_inputs(&[0]),
    );
    for run in 0..2 {
        let out = step.run(std::slice::from_ref(&x)).unwrap();
        let got = (
            out.loss().to_bits(),
            out.input_grad(0).unwrap().to_vec::<f32>().unwrap(),
        );
        assert_eq!(got, want, "run {run}");
    }
    let capture = step.capture().unwrap();
    assert!(capture.explain().contains("steps"));
    assert!(!capture.optimized().is_empty());
}

#[test]
fn a_compiled_million_term_sum_captures_and_matches_eager() {
    compiled_matches_eager(long_sum, 1_000_000);
}

#[test]
fn a_compiled_million_node_chain_captures_and_matches_eager() {
    compiled_matches_eager(tanh_chain, 1_000_000);
}

/// Pictures, the collapsed view, the backward-sweep page and ONNX export
/// walk a deep graph without recursing; the built-in renderer's layout,
/// which grows with about the square of the picture, refuses a picture
/// past its limit with a typed error naming the limit instead of running
/// for hours.
#[test]
fn pictures_and_exports_of_a_deep_graph() {
    let g = Graph::new();
    g.set_tracing(true);
    let x = g.variable(Tensor::from_vec(vec![0.5f32, 1.0], &[2]).unwrap());
    let mut y = x.clone();
    let layers = 20_000;
    for _ in 0..layers {
        y = (&y * &x).tanh();
    }
    let loss = y.sum();
    let dot = g.to_dot(&VizOptions::new().root(&loss)).unwrap();
    // Per layer: y and x into the mul, the mul into the tanh; then the sum.
    assert_eq!(dot.matches(" -> ").count(), 3 * layers + 1);
    let collapsed = VizOptions::new().root(&loss).collapse_repeated(true);
    assert!(g
        .to_dot(&collapsed)
        .unwrap()
        .contains(&format!("× {layers}")));
    let whole = VizOptions::new().root(&loss).renderer(Renderer::Builtin);
    match g.to_svg(&whole) {
        Err(Error::TooLarge { size, limit, .. }) => {
            assert_eq!(limit, BUILTIN_LAYOUT_LIMIT);
            assert!(size > 2 * layers, "{size}");
        }
        other => panic!("expected TooLarge, got {:?}", other.map(|s| s.len())),
    }
    let capped = whole.max_nodes(40);
    assert!(g.to_svg(&capped).unwrap().contains("<svg"));
    let onnx = retrograd::onnx::Exporter::new(&g)
        .input("x", &x)
        .output("loss", &loss)
        .to_bytes()
        .unwrap();
    let model = retrograd::onnx::OnnxModel::from_bytes(&onnx).unwrap();
    let input = Tensor::from_vec(vec![0.25f32, -1.0], &[2]).unwrap();
    let want = {
        let g = Graph::new();
        let x = g.constant(input.clone());
        let mut y = x.clone();
        for _ in 0..layers {
            y = (&y * &x).tanh();
        }
        y.sum().value().to_vec::<f32>().unwrap()
    };
    assert_eq!(
        model.infer(&[input]).unwrap()[0].to_vec::<f32>().unwrap(),
        want
    );
    // Last: the page records its backward sweep's gradients in the graph.
    let page = g.to_html(&collapsed).unwrap();
    assert!(page.contains("<svg"));
}
