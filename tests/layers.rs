//! Layers point one way inside the engine (ARCHITECTURE.md "Layers"); the
//! crates around it are ordered by cargo.
//!
//! Each folder under `crates/engine/src/` (written `src/` below) is a layer ([`LAYERS`], lowest first); `lib.rs`
//! and `prelude.rs` are the root, above all. A file may use only its own
//! and lower folders. With comments and literals blanked, every `use` path
//! and every `crate::`, `$crate::`, `super::` or `self::` path in code
//! (macro bodies too) is made absolute and lands in a folder: a name that
//! `lib.rs` imports or re-exports (`crate::Error`, `crate::graph::Var`) is
//! followed there; a macro call is in the folder that defines the macro; a
//! folder's own re-export counts as that folder. A method call is not a
//! path (ARCHITECTURE.md lists the calls that run up).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The layer folders under `src/`, lowest first.
const LAYERS: &str = "base tensor quant kernels core autograd ops data nn func optim compile io";

/// Imports that may run up, as `(file, path)`: at most two, each named and
/// justified in ARCHITECTURE.md ("Layers"). None today.
const ALLOWED_UP: &[(&str, &str)] = &[];

/// The layer of a file under `src/` (or of a folder, `src/NAME/`): its
/// folder's index; the root files sit above all.
fn layer_of(file: &str) -> Option<usize> {
    let rel = file.strip_prefix("src/")?;
    let name = rel
        .split_once('/')
        .map_or(rel.trim_end_matches(".rs"), |d| d.0);
    let top = ["lib", "prelude"]
        .contains(&name)
        .then(|| LAYERS.split(' ').count());
    LAYERS.split(' ').position(|l| l == name).or(top)
}

/// `src` with comments and the insides of string and char literals
/// blanked (newlines kept, so lines carry over).
fn blank(src: &str) -> Vec<char> {
    let c: Vec<char> = src.chars().collect();
    let (n, mut out, mut i) = (c.len(), c.clone(), 0);
    let at = |k: usize, s: &str| c[k.min(n)..].iter().take(s.len()).copied().eq(s.chars());
    let find = |from: usize, s: &str| (from..n).find(|&j| at(j, s)).map_or(n, |j| j + s.len());
    while i < n {
        let word_start = i == 0 || !is_ident(c[i - 1]);
        let h = c[i + 1..].iter().take_while(|&&h| h == '#').count();
        let end = if at(i, "//") {
            (i..n).find(|&j| c[j] == '\n').unwrap_or(n)
        } else if at(i, "/*") {
            find(i + 2, "*/")
        } else if c[i] == 'r' && (word_start || c[i - 1] == 'b') && at(i + 1 + h, "\"") {
            find(i + 2 + h, &format!("\"{}", "#".repeat(h)))
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < n && c[j] != '"' {
                j += 1 + (c[j] == '\\') as usize;
            }
            j + 1
        } else if c[i] == '\'' && (at(i + 1, "\\") || at(i + 2, "'")) {
            find(i + 2 + at(i + 1, "\\") as usize, "'")
        } else {
            i += 1;
            continue;
        };
        for ch in out[i..end.min(n)].iter_mut().filter(|ch| **ch != '\n') {
            *ch = ' ';
        }
        i = end;
    }
    out
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_' || ch == '$'
}

/// The `::`-separated path at `i` and where it ends (a macro's last segment ends in `!`).
fn read_path(code: &[char], mut i: usize) -> (Vec<String>, usize) {
    let skip_ws = |k: usize| (k..code.len()).find(|&j| !code[j].is_whitespace());
    let mut segs: Vec<String> = Vec::new();
    while let Some(end) = (i..code.len()).find(|&k| !is_ident(code[k])) {
        segs.extend((end > i).then(|| code[i..end].iter().collect()));
        i = end;
        match skip_ws(i) {
            Some(k) if code[k..].starts_with(&[':', ':']) => i = skip_ws(k + 2).unwrap_or(k),
            Some(k) if code[k] == '!' && code.get(k + 1) != Some(&'=') => {
                segs.last_mut().into_iter().for_each(|last| last.push('!'));
                break;
            }
            _ => break,
        }
    }
    (segs, i)
}

/// Expands a use tree (`a::{b, c::{d as e}, self}`) into its paths.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut depth = 0;
    let parts = tree.split(|ch| {
        depth += (ch == '{') as i32 - (ch == '}') as i32;
        ch == ',' && depth == 0
    });
    for part in parts.map(str::trim).filter(|p| !p.is_empty()) {
        let (head, group) = part.split_once('{').unwrap_or((part, ""));
        let mut path = prefix.to_vec();
        for seg in head
            .split(" as ")
            .next()
            .unwrap()
            .split("::")
            .map(str::trim)
        {
            path.extend((!seg.is_empty() && seg != "self").then(|| seg.to_owned()));
        }
        match group.rfind('}') {
            Some(close) => expand(&group[..close], &path, out),
            None => out.push(path),
        }
    }
}

/// A path made absolute from `module` (`crate`, `super`, `self` resolved);
/// `None` for a path that does not start at one of them.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let starts = |s: &&String| ["crate", "$crate", "super", "self"].contains(&s.as_str());
    path.first().filter(starts)?;
    let mut abs = module.to_vec();
    for seg in path.iter().take_while(starts) {
        match seg.as_str() {
            "super" => drop(abs.pop()),
            "self" => {}
            _ => abs.clear(),
        }
    }
    abs.extend(path.iter().skip_while(starts).cloned());
    Some(abs)
}

/// The `macro_rules!` names in blanked code, each with its `!`.
fn macros_in(code: &[char]) -> Vec<String> {
    let code: String = code.iter().collect();
    let names = code.split("macro_rules!").skip(1);
    let name = |rest: &str| {
        rest.trim_start()
            .split(|c| !is_ident(c))
            .next()
            .unwrap()
            .to_owned()
    };
    names.map(|rest| name(rest) + "!").collect()
}

/// The crate paths of one file, with their lines: each `use` path and each
/// path in code, made absolute; a one-segment macro call as it is.
fn uses_of(file: &str, code: &[char]) -> Vec<(usize, Vec<String>)> {
    let rel = &file[4..file.len() - 3];
    let mut module: Vec<String> = rel.split('/').map(String::from).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    let starts_word = |i: usize| is_ident(code[i]) && (i == 0 || !is_ident(code[i - 1]));
    let line = |i: usize| code[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let (mut out, mut i) = (Vec::new(), 0);
    while i < code.len() {
        let (segs, mut end) = if starts_word(i) {
            read_path(code, i)
        } else {
            (Vec::new(), i)
        };
        if segs == ["use"] {
            let semi = i + code[i..].iter().position(|&ch| ch == ';').unwrap();
            let tree: String = code[end..semi].iter().collect();
            let mut paths = Vec::new();
            let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
            expand(&tree, &[], &mut paths);
            for path in paths {
                // A path from a child module of this one stays in its folder.
                let path = absolute(&module, &path).unwrap_or([module.clone(), path].concat());
                out.push((line(i), path));
            }
            end = semi;
        } else if let Some(path) = absolute(&module, &segs).filter(|_| segs.len() > 1) {
            out.push((line(i), path));
        } else if segs.len() == 1 && segs[0].ends_with('!') {
            out.push((line(i), segs));
        }
        i = end.max(i + 1);
    }
    out
}

/// Every path in `sources` that lands in a higher folder, as
/// `file:line: ...`, and how many paths landed in another folder at all.
fn back_edges(sources: &BTreeMap<String, String>) -> (Vec<String>, usize) {
    let code: BTreeMap<&String, Vec<char>> = sources.iter().map(|(f, s)| (f, blank(s))).collect();
    // What the crate root imports or re-exports, by name (a glob names nothing).
    let (mut root, mut macros) = (HashMap::<String, String>::new(), HashMap::new());
    for (f, c) in &code {
        if *f == "src/lib.rs" {
            let imports = uses_of(f, c).into_iter().filter(|(_, p)| p.len() > 1);
            let named = imports.filter(|(_, p)| p.last().unwrap() != "*");
            root.extend(named.map(|(_, p)| (p.last().unwrap().clone(), p[0].clone())));
        }
        macros.extend(macros_in(c).into_iter().map(|m| (m, layer_of(f))));
    }
    let folder = |first: &str| {
        let mut first = first.trim_end_matches('!');
        for _ in 0..8 {
            match layer_of(&format!("src/{first}/")) {
                Some(l) => return Some(l),
                None => first = root.get(first)?,
            }
        }
        None
    };
    let (mut found, mut cross) = (Vec::new(), 0);
    for (file, c) in &code {
        let (from, local) = (layer_of(file).unwrap_or(0), macros_in(c));
        for (line, path) in uses_of(file, c) {
            let name = path.join("::");
            let to = match path.len() {
                1 if local.contains(&name) => None,
                1 if name.ends_with('!') => macros.get(&name).copied().flatten(),
                _ => folder(&path[0]),
            };
            cross += to.is_some_and(|to| to != from) as usize;
            let allowed = ALLOWED_UP.contains(&(file.as_str(), name.as_str()));
            if let Some(to) = to.filter(|&to| to > from && !allowed) {
                let layer = |l: usize| LAYERS.split(' ').nth(l).unwrap_or("root");
                let (a, b) = (layer(to), layer(from));
                found.push(format!(
                    "{file}:{line}: `{name}` is in `{a}` ({to}), above `{b}` ({from})"
                ));
            }
        }
    }
    found.dedup();
    (found, cross)
}

fn read_sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/engine");
    let (mut out, mut dirs) = (BTreeMap::new(), vec![root.join("src")]);
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&root).unwrap().to_string_lossy();
                out.insert(rel.into(), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn layers_point_one_way() {
    let sources = read_sources();
    assert!(ALLOWED_UP.len() <= 2, "at most two imports may run up");
    let unplaced: Vec<&String> = sources.keys().filter(|f| layer_of(f).is_none()).collect();
    assert!(unplaced.is_empty(), "not in a layer: {unplaced:?}");
    let (found, cross) = back_edges(&sources);
    // A scan that found next to nothing would pass vacuously.
    assert!(cross > 1000, "only {cross} paths across folders");
    let report = found.join("\n");
    assert!(found.is_empty(), "imports run up (see Layers):\n{report}");
}

/// A miniature crate: each way of reaching up is caught, with its line;
/// paths down, comments and literals are not.
#[test]
fn every_way_of_reaching_up_is_reported() {
    let lib = "mod base;\npub mod core;\npub mod ops;\npub use base::Error;\n\
               pub use self::core::graph;\nuse base::error;\n";
    let record = "use crate::Error;\nuse crate::error::Result;\nuse super::Var;\n\
                  use crate::graph::Var as V;\n//! crate::ops::Add \"crate::ops::Add\"\n\
                  fn f() { crate::ops::arith::or_panic(); }\n\
                  use crate::{base::Error as E, ops::{Add, Mul}};\n\
                  fn g() { rule!(); let _ = ('\"', r#\"crate::ops\"#); /* crate::ops */ }\n\
                  macro_rules! m { () => { $crate::ops::Add } }\n";
    let arith = "pub struct Add;\npub struct Mul;\npub fn or_panic() {}\n";
    let ops = "pub mod arith;\npub use arith::{Add, Mul};\nmacro_rules! rule { () => {} }\n";
    let files = [
        ("src/lib.rs", lib),
        ("src/base/mod.rs", "pub mod error;\npub use error::Error;\n"),
        ("src/base/error.rs", "pub enum Error {}\n"),
        ("src/core/mod.rs", "pub mod graph;\n"),
        ("src/core/graph/mod.rs", "mod record;\npub struct Var;\n"),
        ("src/core/graph/record.rs", record),
        ("src/ops/mod.rs", ops),
        ("src/ops/arith.rs", arith),
    ];
    let (found, _) = back_edges(&files.map(|(p, s)| (p.into(), s.into())).into());
    let at = found.iter().map(|f| f.split(": `").next().unwrap());
    let lines = [6, 7, 7, 8, 9].map(|l| format!("src/core/graph/record.rs:{l}"));
    assert!(at.eq(lines.iter().map(String::as_str)), "{found:#?}");
    let first = "`ops::arith::or_panic` is in `ops` (6), above `core` (4)";
    assert!(found[0].ends_with(first), "{found:#?}");
}
