//! Layers point one way (DESIGN.md decision 10, ARCHITECTURE.md "Layers").
//!
//! Every file under `src/` belongs to a layer ([`LAYERS`], the same table as
//! ARCHITECTURE.md). A file may use what its own layer and the layers below
//! define, never what a layer above defines. This test reads every
//! `src/**/*.rs`, blanks comments, doc comments and string literals, and
//! resolves each path that names something of the crate:
//!
//! - every path of a `use` item (`use crate::...`, `use super::...`,
//!   `use self::...`, or a path starting at a child module);
//! - every `crate::`, `$crate::`, `super::` and `self::` path in code, and
//!   every path in code that starts at a child module of the current one;
//! - every invocation of a `#[macro_export]` macro (`crate::with_dtype!`,
//!   `unary_fn!`...), which belongs to the layer of the file defining it.
//!
//! A path is followed through re-exports (`pub use`, private imports seen
//! by child modules) to the file that defines the item, so `crate::Error`
//! lands in `error.rs`, not in `lib.rs`. A `pub use` of a child module's
//! item that the file does not otherwise use is a facade, not a dependency
//! (`ops/mod.rs` re-exports `registry::OpRegistry`): it is not an edge, and
//! the path through it still lands on the defining file.
//!
//! Test code inside `src/` is held to the same rule: a unit test of a lower
//! layer brings its own stand-ins rather than reaching up.
//!
//! What the test cannot see: a method call is not a path. An inherent
//! method defined in a higher layer on a lower layer's type (`Var::try_add`
//! is defined in `ops/arith.rs`) can be called from below without naming
//! anything; ARCHITECTURE.md lists where that happens.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The layers, lowest first, and the files in each. An entry ending in `/`
/// covers a directory; the longest matching entry decides. Keep this table
/// and ARCHITECTURE.md's "Layers" section the same.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &["src/error.rs", "src/fallible.rs", "src/tensor/dtype.rs"],
    ),
    ("tensor", &["src/tensor/", "src/test_util.rs"]),
    ("kernels", &["src/kernels/"]),
    (
        "core",
        &[
            "src/graph/",
            "src/ops/differentiable.rs",
            "src/ops/attributes.rs",
            "src/ops/rule/facts.rs",
            "src/ops/scalar_lane.rs",
            "src/autograd/scalar_node.rs",
            "src/autograd/store.rs",
        ],
    ),
    ("autograd", &["src/autograd/"]),
    ("ops", &["src/ops/"]),
    ("data", &["src/data/"]),
    ("nn", &["src/nn/"]),
    ("optim", &["src/optim/"]),
    ("io", &["src/io/"]),
    ("distributed", &["src/distributed/"]),
    ("viz", &["src/viz/"]),
    ("expr", &["src/expr/"]),
    ("onnx", &["src/onnx/"]),
    ("root", &["src/lib.rs", "src/prelude.rs"]),
];

/// The layer of `file` (a path like `src/graph/record.rs`): its index in
/// [`LAYERS`], or `None` if no entry covers it.
fn layer_of(file: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, entries)) in LAYERS.iter().enumerate() {
        for entry in *entries {
            let hit = if entry.ends_with('/') {
                file.starts_with(entry)
            } else {
                file == *entry
            };
            if hit && best.is_none_or(|(_, len)| entry.len() > len) {
                best = Some((i, entry.len()));
            }
        }
    }
    best.map(|(i, _)| i)
}

fn layer_name(i: usize) -> &'static str {
    LAYERS[i].0
}

// ---------------------------------------------------------------------------
// Blanking comments and literals

/// `src` with comments (line, block, doc) and the contents of string, raw
/// string and char literals replaced by spaces; newlines are kept, and the
/// result has exactly as many chars as `src`, so offsets and line numbers
/// carry over. Lifetimes and labels (`'g`, `'outer:`) are kept.
fn blank(src: &str) -> Vec<char> {
    let c: Vec<char> = src.chars().collect();
    let n = c.len();
    let mut out = c.clone();
    let blank_range = |out: &mut Vec<char>, a: usize, b: usize| {
        for ch in out.iter_mut().take(b.min(n)).skip(a) {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < n {
        if c[i] == '/' && i + 1 < n && c[i + 1] == '/' {
            let mut j = i;
            while j < n && c[j] != '\n' {
                j += 1;
            }
            blank_range(&mut out, i, j);
            i = j;
        } else if c[i] == '/' && i + 1 < n && c[i + 1] == '*' {
            let (mut depth, mut j) = (0usize, i);
            while j < n {
                if c[j] == '/' && j + 1 < n && c[j + 1] == '*' {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && j + 1 < n && c[j + 1] == '/' {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank_range(&mut out, i, j);
            i = j;
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && {
                let mut j = i + 1;
                while j < n && c[j] == '#' {
                    j += 1;
                }
                j < n && c[j] == '"'
            }
        {
            // A raw string: r"..." or r#"..."#, any number of hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            loop {
                if j >= n {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|k| j + k < n && c[j + k] == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank_range(&mut out, i + 1, j);
            i = j;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < n && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            blank_range(&mut out, i, j + 1);
            i = j + 1;
        } else if c[i] == '\'' && i + 1 < n && c[i + 1] == '\\' {
            // An escaped char literal: '\n', '\'', '\u{..}'.
            let mut j = i + 3;
            while j < n && c[j] != '\'' {
                j += 1;
            }
            blank_range(&mut out, i, j + 1);
            i = j + 1;
        } else if c[i] == '\'' && i + 2 < n && c[i + 2] == '\'' {
            blank_range(&mut out, i, i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The module tree and the `use` items of each module

type ModPath = Vec<String>;

/// One name a `use` item brings into a module.
#[derive(Debug, Clone)]
struct Import {
    /// The module the `use` sits in (inline modules included).
    module: ModPath,
    /// The full path, e.g. `["crate", "ops", "arith", "or_panic"]`; a glob
    /// ends in `"*"`.
    path: Vec<String>,
    /// The name it is known by in `module` (the alias, if renamed).
    name: String,
    /// `pub use`, `pub(crate) use`...: a re-export.
    public: bool,
    line: usize,
    /// Where the `use` item is, in chars: `start..end`.
    span: (usize, usize),
}

struct File {
    path: String,
    module: ModPath,
    code: Vec<char>,
    /// The offset of each line's first char.
    line_starts: Vec<usize>,
    /// Inline modules: `(start, end, name)` of the body in chars.
    inline: Vec<(usize, usize, String)>,
    imports: Vec<Import>,
    /// `macro_rules!` names defined in this file.
    macros: Vec<String>,
    /// Those of them with `#[macro_export]` (crate-root macros).
    exported: Vec<String>,
}

fn module_of_file(path: &str) -> ModPath {
    let rel = path.strip_prefix("src/").expect("a path under src/");
    let rel = rel.strip_suffix(".rs").expect("a .rs file");
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn is_ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Whether the word `word` starts at `i` (and is a whole word).
fn word_at(code: &[char], i: usize, word: &str) -> bool {
    let w: Vec<char> = word.chars().collect();
    i + w.len() <= code.len()
        && code[i..i + w.len()] == w[..]
        && (i == 0 || !is_ident_char(code[i - 1]))
        && (i + w.len() == code.len() || !is_ident_char(code[i + w.len()]))
}

fn skip_ws(code: &[char], mut i: usize) -> usize {
    while i < code.len() && code[i].is_whitespace() {
        i += 1;
    }
    i
}

fn read_ident(code: &[char], i: usize) -> Option<(String, usize)> {
    let mut j = i;
    if j < code.len() && code[j] == '$' {
        j += 1;
    }
    while j < code.len() && is_ident_char(code[j]) {
        j += 1;
    }
    (j > i && !(j == i + 1 && code[i] == '$')).then(|| (code[i..j].iter().collect(), j))
}

/// The index just past the brace that closes the one at `open`.
fn matching_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, &ch) in code.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The 1-based line of offset `i`.
fn line_at(file: &File, i: usize) -> usize {
    file.line_starts.partition_point(|&start| start <= i)
}

/// The module at offset `i` of `file`: the file's module plus the inline
/// modules around `i`.
fn module_at(file: &File, i: usize) -> ModPath {
    let mut m = file.module.clone();
    let mut around: Vec<&(usize, usize, String)> = file
        .inline
        .iter()
        .filter(|(a, b, _)| *a < i && i < *b)
        .collect();
    around.sort_by_key(|(a, _, _)| *a);
    m.extend(around.into_iter().map(|(_, _, name)| name.clone()));
    m
}

/// Expands a use tree (`a::{b, c::{d as e}, self}`) into full paths with
/// the name each is known by.
fn expand_use_tree(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in tree.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    parts.push(cur);
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        if let Some(open) = part.find('{') {
            let close = part.rfind('}').expect("a closed use group");
            let mut p = prefix.to_vec();
            p.extend(
                part[..open]
                    .split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            expand_use_tree(&part[open + 1..close], &p, out);
        } else {
            let (path, alias) = match part.split_once(" as ") {
                Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
                None => (part, None),
            };
            let mut full = prefix.to_vec();
            full.extend(
                path.split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            if full.last().map(String::as_str) == Some("self") {
                full.pop();
            }
            let name = alias.unwrap_or_else(|| full.last().cloned().unwrap_or_default());
            out.push((full, name));
        }
    }
}

/// Whether the item starting at `i` has a visibility (`pub`, `pub(crate)`,
/// `pub(in path)`...): for a `use`, a re-export.
fn is_public(code: &[char], i: usize) -> bool {
    let mut k = i;
    while k > 0 && code[k - 1].is_whitespace() {
        k -= 1;
    }
    if k > 0 && code[k - 1] == ')' {
        // Back to the matching `(`.
        let mut depth = 0;
        while k > 0 {
            k -= 1;
            match code[k] {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        while k > 0 && code[k - 1].is_whitespace() {
            k -= 1;
        }
    }
    k >= 3 && code[k - 3..k] == ['p', 'u', 'b'] && (k == 3 || !is_ident_char(code[k - 4]))
}

fn parse_file(path: &str, src: &str) -> File {
    let code = blank(src);
    let line_starts = std::iter::once(0)
        .chain(
            code.iter()
                .enumerate()
                .filter(|&(_, &ch)| ch == '\n')
                .map(|(k, _)| k + 1),
        )
        .collect();
    let inline = inline_modules(&code);
    let (macros, exported) = macro_definitions(&code);
    let mut file = File {
        path: path.to_string(),
        module: module_of_file(path),
        code,
        line_starts,
        inline,
        imports: Vec::new(),
        macros,
        exported,
    };
    file.imports = use_items(&file);
    file
}

/// Inline modules (`mod name { ... }`): the span of each body and its name.
fn inline_modules(code: &[char]) -> Vec<(usize, usize, String)> {
    let mut inline = Vec::new();
    for i in 0..code.len() {
        if word_at(code, i, "mod")
            && let Some((name, k)) = read_ident(code, skip_ws(code, i + 3))
        {
            let k = skip_ws(code, k);
            if k < code.len() && code[k] == '{' {
                inline.push((k, matching_brace(code, k), name));
            }
        }
    }
    inline
}

/// The `macro_rules!` names of a file, and those of them that are
/// `#[macro_export]`.
fn macro_definitions(code: &[char]) -> (Vec<String>, Vec<String>) {
    let (mut macros, mut exported) = (Vec::new(), Vec::new());
    for i in 0..code.len() {
        if word_at(code, i, "macro_rules") {
            let j = skip_ws(code, i + "macro_rules".len());
            if j < code.len()
                && code[j] == '!'
                && let Some((name, _)) = read_ident(code, skip_ws(code, j + 1))
            {
                let before: String = code[i.saturating_sub(80)..i].iter().collect();
                if before.contains("#[macro_export]") {
                    exported.push(name.clone());
                }
                macros.push(name);
            }
        }
    }
    (macros, exported)
}

/// Every name the `use` items of `file` bring in.
fn use_items(file: &File) -> Vec<Import> {
    let code = &file.code;
    let mut imports = Vec::new();
    for i in 0..code.len() {
        if !word_at(code, i, "use") {
            continue;
        }
        let Some(end) = code[i..].iter().position(|&ch| ch == ';').map(|p| i + p) else {
            continue;
        };
        let public = is_public(code, i);
        let tree: String = code[i + 3..end].iter().collect();
        let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
        let tree = tree.replace(" ::", "::").replace(":: ", "::");
        let mut paths = Vec::new();
        expand_use_tree(&tree, &[], &mut paths);
        let module = module_at(file, i);
        for (path, name) in paths {
            imports.push(Import {
                module: module.clone(),
                path,
                name,
                public,
                line: line_at(file, i),
                span: (i, end),
            });
        }
    }
    imports
}

// ---------------------------------------------------------------------------
// Resolving paths to the files that define them

struct Crate {
    files: Vec<File>,
    /// Module path -> index of the file that is that module.
    file_modules: HashMap<ModPath, usize>,
    /// Inline module path -> index of the file holding it.
    inline_modules: HashMap<ModPath, usize>,
    /// `#[macro_export]` macro name -> index of the file defining it.
    exported_macros: HashMap<String, usize>,
}

impl Crate {
    fn new(sources: &BTreeMap<String, String>) -> Self {
        let files: Vec<File> = sources.iter().map(|(p, s)| parse_file(p, s)).collect();
        let mut file_modules = HashMap::new();
        let mut inline_modules = HashMap::new();
        let mut exported_macros = HashMap::new();
        for (k, f) in files.iter().enumerate() {
            file_modules.insert(f.module.clone(), k);
            for (a, _, _) in &f.inline {
                inline_modules.insert(module_at(f, a + 1), k);
            }
            for m in &f.exported {
                exported_macros.insert(m.clone(), k);
            }
        }
        Crate {
            files,
            file_modules,
            inline_modules,
            exported_macros,
        }
    }

    fn is_module(&self, m: &ModPath) -> bool {
        self.file_modules.contains_key(m) || self.inline_modules.contains_key(m)
    }

    fn file_of_module(&self, m: &ModPath) -> Option<usize> {
        self.file_modules
            .get(m)
            .or_else(|| self.inline_modules.get(m))
            .copied()
    }

    fn child(&self, m: &ModPath, name: &str) -> Option<ModPath> {
        let mut c = m.clone();
        c.push(name.to_string());
        self.is_module(&c).then_some(c)
    }

    /// Whether `path`, seen from module `from`, names something of this
    /// crate (rather than of std or a dependency).
    fn is_internal(&self, from: &ModPath, path: &[String]) -> bool {
        match path.first().map(String::as_str) {
            Some("crate" | "$crate" | "super" | "self") => true,
            Some(first) => self.child(from, first).is_some(),
            None => false,
        }
    }

    /// The file that defines what `path` names, seen from module `from`;
    /// `None` for something outside the crate.
    fn resolve(&self, from: &ModPath, path: &[String], depth: usize) -> Option<usize> {
        if depth > 32 {
            return None;
        }
        let mut cur = from.clone();
        for (i, seg) in path.iter().enumerate() {
            match seg.as_str() {
                "crate" | "$crate" if i == 0 => cur.clear(),
                "super" => {
                    cur.pop();
                }
                "self" => {}
                "*" => return self.file_of_module(&cur),
                _ => {
                    if let Some(c) = self.child(&cur, seg) {
                        cur = c;
                        continue;
                    }
                    let file = self.file_of_module(&cur)?;
                    let f = &self.files[file];
                    if let Some(imp) = f
                        .imports
                        .iter()
                        .find(|imp| imp.module == cur && imp.name == *seg && !imp.path.is_empty())
                    {
                        if !self.is_internal(&cur, &imp.path) {
                            return None; // a re-export of a dependency
                        }
                        let mut next = imp.path.clone();
                        next.extend_from_slice(&path[i + 1..]);
                        return self.resolve(&cur, &next, depth + 1);
                    }
                    if cur.is_empty()
                        && let Some(&k) = self.exported_macros.get(seg)
                    {
                        return Some(k);
                    }
                    return Some(file); // defined in this module's file
                }
            }
        }
        self.file_of_module(&cur)
    }
}

// ---------------------------------------------------------------------------
// Edges and the check

/// One use of something the crate defines: `file:line` names `what`, which
/// `target` defines.
#[derive(Debug, Clone)]
struct Edge {
    file: String,
    line: usize,
    what: String,
    target: String,
}

/// Reads a path of `::`-separated identifiers starting at `i` (spaces
/// allowed around `::`); returns the segments, whether it ends in `!` (a
/// macro) and where it ends.
fn read_path(code: &[char], i: usize) -> (Vec<String>, bool, usize) {
    let mut segs = Vec::new();
    let mut j = i;
    let mut end = i;
    while let Some((seg, k)) = read_ident(code, j) {
        segs.push(seg);
        end = k;
        // Another segment after `::`? (Not `::<T>` or `::{`.)
        let colons = skip_ws(code, k);
        if colons + 1 >= code.len() || code[colons] != ':' || code[colons + 1] != ':' {
            break;
        }
        j = skip_ws(code, colons + 2);
    }
    let j = end;
    let k = skip_ws(code, j);
    let bang = k < code.len() && code[k] == '!' && code.get(k + 1) != Some(&'=');
    (segs, bang, j)
}

fn edges(krate: &Crate) -> Vec<Edge> {
    let mut out = Vec::new();
    for f in &krate.files {
        let mut push = |line: usize, what: String, target: Option<usize>| {
            if let Some(t) = target {
                let target = krate.files[t].path.clone();
                if target != f.path {
                    out.push(Edge {
                        file: f.path.clone(),
                        line,
                        what,
                        target,
                    });
                }
            }
        };
        // `use` items.
        for imp in &f.imports {
            if !krate.is_internal(&imp.module, &imp.path) {
                continue;
            }
            let facade = imp.public
                && imp.path.len() > 1
                && krate.child(&imp.module, &imp.path[0]).is_some()
                && count_word(&f.code, &imp.name) <= 1;
            if facade {
                continue;
            }
            push(
                imp.line,
                imp.path.join("::"),
                krate.resolve(&imp.module, &imp.path, 0),
            );
        }
        // Paths and macro calls in code.
        let code = &f.code;
        let in_use = |i: usize| {
            f.imports
                .iter()
                .any(|imp| imp.span.0 <= i && i < imp.span.1)
        };
        let mut i = 0;
        while i < code.len() {
            let starts_word = (i == 0 || !(is_ident_char(code[i - 1]) || code[i - 1] == '$'))
                && (is_ident_char(code[i]) || code[i] == '$');
            let after_colons = i >= 2 && {
                let k = code[..i].iter().rposition(|ch| !ch.is_whitespace());
                k.is_some_and(|k| k >= 1 && code[k] == ':' && code[k - 1] == ':')
            };
            if !starts_word || after_colons || in_use(i) {
                i += 1;
                continue;
            }
            let (segs, bang, end) = read_path(code, i);
            if segs.is_empty() {
                i += 1;
                continue;
            }
            let module = module_at(f, i);
            let line = line_at(f, i);
            let first = segs[0].as_str();
            if segs.len() > 1 && krate.is_internal(&module, &segs) {
                let target = krate.resolve(&module, &segs, 0);
                push(
                    line,
                    format!("{}{}", segs.join("::"), if bang { "!" } else { "" }),
                    target,
                );
            } else if segs.len() == 1
                && bang
                && !f.macros.iter().any(|m| m == first)
                && let Some(&k) = krate.exported_macros.get(first)
            {
                push(line, format!("{first}!"), Some(k));
            }
            i = end.max(i + 1);
        }
    }
    out
}

fn count_word(code: &[char], word: &str) -> usize {
    (0..code.len()).filter(|&i| word_at(code, i, word)).count()
}

/// Every edge that runs up the layers, as a readable line.
fn back_edges(sources: &BTreeMap<String, String>) -> Vec<String> {
    let krate = Crate::new(sources);
    let mut all = edges(&krate);
    all.sort_by(|a, b| (&a.file, a.line, &a.what).cmp(&(&b.file, b.line, &b.what)));
    let mut found = Vec::new();
    for e in all {
        let (Some(from), Some(to)) = (layer_of(&e.file), layer_of(&e.target)) else {
            continue; // reported by `every_source_file_has_a_layer`
        };
        if to > from {
            found.push(format!(
                "{}:{}: `{}` is defined in {}, layer `{}` ({}), above this file's layer `{}` ({})",
                e.file,
                e.line,
                e.what,
                e.target,
                layer_name(to),
                to,
                layer_name(from),
                from
            ));
        }
    }
    found.dedup();
    found
}

fn read_sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("a readable src/") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under the crate root");
                let rel = rel.to_string_lossy().replace('\\', "/");
                out.insert(
                    rel,
                    std::fs::read_to_string(&path).expect("a readable file"),
                );
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = BTreeMap::new();
    walk(&root.join("src"), root, &mut out);
    out
}

#[test]
fn layers_point_one_way() {
    let sources = read_sources();
    assert!(
        sources.len() > 100,
        "found only {} files under src/",
        sources.len()
    );
    let found = back_edges(&sources);
    assert!(
        found.is_empty(),
        "{} import(s) run back up the layers (see ARCHITECTURE.md, \"Layers\"):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn every_source_file_has_a_layer() {
    let missing: Vec<String> = read_sources()
        .into_keys()
        .filter(|f| layer_of(f).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "files in no layer (add them to LAYERS and ARCHITECTURE.md): {missing:?}"
    );
}

#[test]
fn every_layer_entry_matches_a_file() {
    let sources = read_sources();
    for (name, entries) in LAYERS {
        for entry in *entries {
            assert!(
                sources
                    .keys()
                    .any(|f| f == entry || (entry.ends_with('/') && f.starts_with(entry))),
                "layer `{name}` lists {entry}, which matches no file"
            );
        }
    }
}

/// The edges the checker finds in the real crate include the ones it must
/// see: otherwise an empty list would prove nothing.
#[test]
fn the_real_crate_has_the_edges_it_should() {
    let krate = Crate::new(&read_sources());
    let all = edges(&krate);
    let has = |file: &str, target: &str| all.iter().any(|e| e.file == file && e.target == target);
    // A `use` through a re-export: crate::graph::Var is defined in var.rs.
    assert!(has("src/autograd/backward.rs", "src/graph/var.rs"));
    // A root re-export: crate::Gradients lands in autograd/gradients.rs.
    assert!(has("src/optim/mod.rs", "src/autograd/gradients.rs"));
    // A crate-root macro: crate::with_dtype! is defined in tensor/mod.rs.
    assert!(has("src/io/safetensors.rs", "src/tensor/mod.rs"));
    // `super::` from a file of a directory module.
    assert!(has("src/graph/record.rs", "src/graph/mod.rs"));
    assert!(all.len() > 1000, "only {} edges found", all.len());
}

fn synthetic(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect()
}

/// A miniature crate with the real layout: `lib.rs`, `error.rs`, a graph
/// and ops with a concrete op file.
fn mini_crate(graph_record: &str) -> BTreeMap<String, String> {
    synthetic(&[
        (
            "src/lib.rs",
            "mod error;\npub mod graph;\npub mod ops;\npub use error::Error;\n",
        ),
        ("src/error.rs", "pub enum Error {}\n"),
        ("src/graph/mod.rs", "mod record;\npub struct Var;\n"),
        ("src/graph/record.rs", graph_record),
        (
            "src/ops/mod.rs",
            "pub mod arith;\nmod differentiable;\npub use arith::Add;\npub use differentiable::Differentiable;\n",
        ),
        (
            "src/ops/differentiable.rs",
            "pub trait Differentiable {}\n",
        ),
        (
            "src/ops/arith.rs",
            "pub struct Add;\npub fn or_panic() {}\n\
             #[macro_export]\nmacro_rules! binary_rule { () => {} }\n",
        ),
    ])
}

#[test]
fn a_synthetic_back_edge_is_reported_with_file_line_and_layers() {
    let found = back_edges(&mini_crate(
        "use super::Var;\nuse crate::Error;\n\nfn f() {\n    crate::ops::arith::or_panic();\n}\n",
    ));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("src/graph/record.rs:5: `crate::ops::arith::or_panic`"));
    assert!(
        found[0].contains("src/ops/arith.rs, layer `ops`"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("this file's layer `core`"),
        "{}",
        found[0]
    );
}

#[test]
fn use_items_groups_aliases_and_re_exports_are_followed() {
    // `Add` through ops/mod.rs's re-export lands in arith.rs; a group and an
    // alias are expanded.
    let found = back_edges(&mini_crate(
        "use crate::{error::Error as E, ops::{Add, Differentiable}};\n",
    ));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("src/graph/record.rs:1: `crate::ops::Add`"));
    // The op trait itself sits in the core layer: no edge.
    assert!(back_edges(&mini_crate("use crate::ops::Differentiable;\n")).is_empty());
}

#[test]
fn macros_belong_to_the_file_defining_them() {
    let found = back_edges(&mini_crate(
        "fn f() {\n    crate::binary_rule!();\n    binary_rule!();\n}\n",
    ));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("src/graph/record.rs:2: `crate::binary_rule!`"));
    assert!(found[1].starts_with("src/graph/record.rs:3: `binary_rule!`"));
}

#[test]
fn comments_strings_and_lifetimes_are_not_paths() {
    let found = back_edges(&mini_crate(
        "//! See crate::ops::arith::Add.\n\
         /// Like [`crate::ops::arith::or_panic`].\n\
         fn f<'g>(_: &'g str) -> char {\n\
             let _ = \"crate::ops::arith::Add\";\n\
             let _ = r#\"crate::ops::arith::Add\"#;\n\
             /* crate::ops::arith::Add /* nested */ crate::ops::arith::Add */\n\
             '\"'\n\
         }\n",
    ));
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn super_paths_in_inline_test_modules_resolve_from_the_inline_module() {
    // In `mod tests`, `super` is the file's module and `super::super` its
    // parent (graph), so `super::super::Var` is graph/mod.rs: no edge; a
    // test module reaching up to ops is one.
    let ok = back_edges(&mini_crate(
        "#[cfg(test)]\nmod tests {\n    use super::super::Var;\n}\n",
    ));
    assert!(ok.is_empty(), "{ok:#?}");
    let up = back_edges(&mini_crate(
        "#[cfg(test)]\nmod tests {\n    use crate::ops::arith::Add;\n}\n",
    ));
    assert_eq!(up.len(), 1, "{up:#?}");
    assert!(up[0].starts_with("src/graph/record.rs:3:"));
}

#[test]
fn the_layer_table_decides_by_the_longest_entry() {
    let layer = |f: &str| layer_name(layer_of(f).expect("a layer"));
    assert_eq!(layer("src/ops/differentiable.rs"), "core");
    assert_eq!(layer("src/ops/rule/facts.rs"), "core");
    assert_eq!(layer("src/ops/mod.rs"), "ops");
    assert_eq!(layer("src/ops/arith.rs"), "ops");
    assert_eq!(layer("src/ops/nn/softmax.rs"), "ops");
    assert_eq!(layer("src/autograd/scalar_node.rs"), "core");
    assert_eq!(layer("src/autograd/fast.rs"), "autograd");
    assert_eq!(layer("src/tensor/dtype.rs"), "base");
    assert_eq!(layer("src/tensor/mod.rs"), "tensor");
    assert!(layer_of("src/new_module.rs").is_none());
}
