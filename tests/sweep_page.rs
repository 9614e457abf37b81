//! The backward-sweep page (`Graph::write_html`), tested as a person would
//! see it: headless Chromium opens the page for the textbook chapter's
//! worked example (x = 3, y = 4, with the dead node q = x - 1), steps
//! through the sweep with the "next" button and the arrow keys, and we
//! assert what it shows at each step. Screenshots of every step are kept
//! in `target/browser-artifacts/sweep_page/`.
//!
//! The browser part needs Debian's `chromium` and the pinned driver
//! (`npm ci --prefix tests/browser`); `.ci/run` installs both. Without
//! them it prints `skipped: ...` and checks the page's content only,
//! unless `RETROGRAD_REQUIRE_BROWSER` is set (`.ci/run` sets it): then the
//! missing browser is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use retrograd::viz::GraphPictures;
use retrograd::viz::{Renderer, VizOptions};
use retrograd::{Graph, Tensor, Var};
use serde_json::Value;

/// The worked example with Worked Example 15.4.2's dead node:
/// z = x*y; q = x - 1; w = z + x, at x = 3, y = 4.
fn worked_example(graph: &Graph) -> Var<'_> {
    let x = graph.named_variable("x", Tensor::scalar(3.0));
    let y = graph.named_variable("y", Tensor::scalar(4.0));
    let z = (&x * &y).named("z");
    let _q = (&x - 1.0).named("q");
    (&z + &x).named("w")
}

fn page_data(html: &str) -> Value {
    let start = html
        .find(r#"<script type="application/json" id="sweep-data">"#)
        .expect("the step data")
        + r#"<script type="application/json" id="sweep-data">"#.len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end].replace("<\\/", "</")).unwrap()
}

fn write_page(name: &str) -> PathBuf {
    let graph = Graph::new();
    let w = worked_example(&graph);
    let dir = artifacts().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("page.html");
    let options = VizOptions::new()
        .root(&w)
        .renderer(Renderer::Builtin)
        .title("w = x*y + x at x = 3, y = 4; q = x - 1 is dead");
    graph.write_html(&path, &options).unwrap();
    path
}

fn artifacts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-artifacts")
}

#[test]
fn the_page_carries_the_engines_steps_and_needs_no_network() {
    let html = std::fs::read_to_string(write_page("content")).unwrap();
    // One file: no scripts, styles or images fetched from anywhere.
    for attr in ["src=", "href="] {
        assert!(!html.contains(attr), "the page must not load `{attr}...`");
    }
    let data = page_data(&html);
    let steps = data["steps"].as_array().unwrap();
    let label = |v: &Value| data["values"][v.as_u64().unwrap() as usize]["label"].clone();
    let kinds: Vec<_> = steps
        .iter()
        .map(|s| (s["kind"].clone(), s["node"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("seed".into(), Value::Null),
            ("node".into(), 2.into()),
            ("node".into(), 0.into())
        ]
    );
    assert_eq!(data["order"], serde_json::json!([2, 0]));
    // What each step adds: (value, what arrived, the total after it).
    let flow = |k: usize| -> Vec<(Value, Value, Value)> {
        steps[k]["contributions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    label(&c["value"]),
                    c["gradient"].clone(),
                    c["total"].clone(),
                )
            })
            .collect()
    };
    let t = |v: &str, g: &str, total: &str| (v.into(), g.into(), total.into());
    assert_eq!(flow(0), [t("w", "1", "1")]);
    assert_eq!(flow(1), [t("z", "1", "1"), t("x", "1", "1")]);
    assert_eq!(flow(2), [t("x", "4", "5"), t("y", "3", "3")]);
    assert_eq!(steps[2]["contributions"][0]["previous"], "1");
    // The dead node is drawn, never stepped, and says why.
    let q = &data["nodes"][1];
    assert_eq!(
        (q["op"].as_str(), q["live"].as_bool()),
        (Some("sub"), Some(false))
    );
    let note = data["values"][q["output"].as_u64().unwrap() as usize]["note"].as_str();
    assert!(
        note.unwrap().starts_with("not in backward_order(w)"),
        "{note:?}"
    );
    // Every node and edge the script looks up is in the SVG.
    for id in data["units"].as_object().unwrap().keys() {
        assert!(html.contains(&format!("id=\"{id}\"")), "no element {id}");
    }
    for e in data["edges"].as_array().unwrap() {
        assert!(html.contains(&format!("id=\"{}\"", e["id"].as_str().unwrap())));
    }
}

#[test]
fn a_collapsed_step_steps_through_every_node_of_its_groups() {
    // Three residual blocks (h + tanh(h * w) * h), collapsed into one node.
    let graph = Graph::new();
    let mut h = graph.named_variable("x", Tensor::vector(&[0.5, -0.5]));
    for k in 0..3 {
        let w = graph.named_variable(&format!("w{k}"), Tensor::vector(&[0.1 * f64::from(k), 1.0]));
        h = &h + &((&h * &w).tanh() * &h);
    }
    let loss = h.sum().named("loss");
    let options = VizOptions::new()
        .root(&loss)
        .collapse_repeated(true)
        .renderer(Renderer::Builtin);
    let data = page_data(&graph.to_html(&options).unwrap());
    let nodes = data["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 13);
    // Every node of the blocks is drawn in the one group, which shows the
    // gradient of its last node; the three weights are one summary node.
    assert!(nodes[..12].iter().all(|n| n["unit"] == "g0"), "{nodes:?}");
    assert_eq!(data["units"]["g0"]["value"], nodes[11]["output"]);
    assert!(data["units"].as_object().unwrap().contains_key("s0"));
    // One step per node of backward_order, the seed first.
    let steps = data["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 14);
    let visited: Vec<u64> = steps[1..]
        .iter()
        .map(|s| s["node"].as_u64().unwrap())
        .collect();
    assert_eq!(visited, (0..13).rev().collect::<Vec<u64>>());
}

#[test]
fn pages_without_a_root_or_with_a_vector_root() {
    let graph = Graph::new();
    let w = worked_example(&graph);
    let data = page_data(
        &graph
            .to_html(&VizOptions::new().renderer(Renderer::Builtin))
            .unwrap(),
    );
    assert_eq!(data["steps"], serde_json::json!([]), "no root, no sweep");
    assert_eq!(data["nodes"].as_array().unwrap().len(), 3);
    let v = &w * &graph.constant(Tensor::vector(&[1.0, 2.0]));
    let err = graph.to_html(&VizOptions::new().root(&v)).unwrap_err();
    assert!(
        matches!(err, retrograd::Error::NonScalarRoot { .. }),
        "{err}"
    );
    let other = Graph::new();
    let u = worked_example(&other);
    assert!(matches!(
        graph.to_html(&VizOptions::new().root(&u)),
        Err(retrograd::Error::ForeignVariable { .. })
    ));
}

/// The browser, the driver and node, or why the browser test cannot run.
fn browser() -> Result<PathBuf, String> {
    let browser_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        return Err(format!(
            "no Chromium at {chromium} (apt-get install chromium)"
        ));
    }
    if !browser_dir.join("node_modules/playwright-core").exists() {
        return Err("no driver (run `npm ci --prefix tests/browser`)".into());
    }
    if Command::new("node").arg("--version").output().is_err() {
        return Err("no node (apt-get install nodejs)".into());
    }
    Ok(browser_dir.join("drive_page.mjs"))
}

#[test]
fn chromium_steps_through_the_worked_example() {
    let driver = match browser() {
        Ok(d) => d,
        // `.ci/run` installs the browser and sets this: there, a skip is a failure.
        Err(why) if std::env::var_os("RETROGRAD_REQUIRE_BROWSER").is_some() => {
            panic!("RETROGRAD_REQUIRE_BROWSER is set, but {why}")
        }
        Err(why) => {
            println!("skipped: the browser test of the sweep page: {why}");
            return;
        }
    };
    let page = write_page("sweep_page");
    let shots = page.parent().unwrap().to_path_buf();
    let out = Command::new("node")
        .arg(&driver)
        .arg(&page)
        .arg(&shots)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "the driver failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["errors"], serde_json::json!([]), "script errors");
    assert_eq!(seen["requests"], serde_json::json!([]), "network requests");

    let steps = seen["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "the seed, then add, then mul");
    // Picture nodes: n0 = z (mul), n1 = q (sub, dead), n2 = w (add); v0 = x, v1 = y.
    let badges = |k: usize| -> BTreeMap<String, String> {
        serde_json::from_value(steps[k]["badges"].clone()).unwrap()
    };
    let grad = |k: usize, unit: &str| badges(k)[unit].clone();
    let current = |k: usize| steps[k]["current"].clone();
    let flow_labels = |k: usize| -> Vec<String> {
        let mut l: Vec<String> = serde_json::from_value(steps[k]["flow_labels"].clone()).unwrap();
        l.sort();
        l
    };

    // Step 0, the seed: w's gradient is 1, nothing else has one yet.
    assert_eq!(current(0), serde_json::json!(["n2"]));
    assert_eq!(grad(0, "n2"), "grad 1");
    for unit in ["n0", "v0", "v1"] {
        assert_eq!(grad(0, unit), "", "{unit} at the seed");
    }
    assert!(steps[0]["narration"].as_str().unwrap().contains("Seed"));

    // Step 1: add runs; z and x each receive 1 along their edges into add.
    assert_eq!(current(1), serde_json::json!(["n2"]));
    assert_eq!(
        (grad(1, "n0"), grad(1, "v0")),
        ("grad 1".into(), "grad 1".into())
    );
    assert_eq!(grad(1, "v1"), "", "y has nothing yet");
    assert_eq!(flow_labels(1), ["1", "1"]);
    assert_eq!(steps[1]["table"]["z"], "1");

    // Step 2: mul runs; x's second contribution accumulates: 1 + 4 = 5; y gets 3.
    assert_eq!(current(2), serde_json::json!(["n0"]));
    assert_eq!(
        (grad(2, "v0"), grad(2, "v1")),
        ("grad 5".into(), "grad 3".into())
    );
    assert_eq!(flow_labels(2), ["+4 → 5", "3"]);
    assert_eq!(
        (
            steps[2]["table"]["x"].as_str(),
            steps[2]["table"]["y"].as_str()
        ),
        (Some("5"), Some("3"))
    );
    assert_eq!(steps[2]["count"], "step 2 of 2");
    let end = steps[2]["narration"].as_str().unwrap();
    assert!(end.contains("Never visited: q = sub(x, 1)"), "{end}");

    // q = x - 1 is never visited: never highlighted, no gradient, no flow into it.
    for (k, step) in steps.iter().enumerate() {
        assert!(
            !current(k).as_array().unwrap().contains(&"n1".into()),
            "q highlighted at step {k}"
        );
        assert!(
            !badges(k).contains_key("n1"),
            "q has a gradient line at step {k}"
        );
        assert_eq!(step["table"]["q"], "");
        assert_eq!(step["step"], k);
    }
    // The keys and buttons move as expected.
    assert_eq!(
        (
            seen["home"].as_u64(),
            seen["end"].as_u64(),
            seen["back"].as_u64()
        ),
        (Some(0), Some(2), Some(1))
    );
    // Hovering: forward values and shapes, and why q is grey.
    let hover = |unit: &str| seen["hover"][unit].as_str().unwrap_or_default().to_string();
    assert!(
        hover("v0").contains("f64 []") && hover("v0").contains("= 3"),
        "{}",
        hover("v0")
    );
    assert!(hover("n0").contains("= 12"), "{}", hover("n0"));
    assert!(
        hover("n1").contains("not in backward_order(w)"),
        "{}",
        hover("n1")
    );
    for k in 0..steps.len() {
        let shot = shots.join(format!("step_{k}.png"));
        assert!(
            std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
            "no screenshot {}",
            shot.display()
        );
    }
}
