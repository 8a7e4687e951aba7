//! The controller's layers, kept honest: reads every `crate::...` and `super::...` path in
//! `controller/src`, builds the graph of its modules (one per file), and fails on any import
//! cycle and on any edge the layer table of docs/architecture.md forbids (a module may import
//! its own layer and the layers below it, never one above). The table is parsed from the doc,
//! so the doc and this test cannot drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`core::store_sync`, `state`) for a source file under `src/`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        return "crate".into();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "bin") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments and string literals (so `crate::x` in a doc is no edge).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3; // a char literal such as '"'
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// How many inline modules (`mod name { ... }`) enclose byte `pos` of `code`.
fn inline_depth(code: &str, pos: usize) -> usize {
    let mut braces = 0usize;
    let mut opened: Vec<usize> = Vec::new();
    let mut pending_mod = false;
    let mut word = String::new();
    for c in code[..pos].chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if word == "mod" {
            pending_mod = true;
        }
        word.clear();
        match c {
            '{' => {
                braces += 1;
                if pending_mod {
                    opened.push(braces);
                }
                pending_mod = false;
            }
            '}' => {
                if opened.last() == Some(&braces) {
                    opened.pop();
                }
                braces = braces.saturating_sub(1);
            }
            ';' => pending_mod = false,
            _ => {}
        }
    }
    opened.len()
}

/// Module paths named after `crate::` / `super::`, resolved to the longest known module:
/// `crate::core::store_sync::order` → `core::store_sync`; `use crate::{a, b::c}` → a, b.
fn imports(from: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = BTreeSet::new();
    let resolve = |segs: &[String]| -> Option<String> {
        (1..=segs.len())
            .rev()
            .map(|n| segs[..n].join("::"))
            .find(|m| modules.contains(m))
    };
    for (start, kw) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        if start > 0 && code[..start].ends_with(|c: char| ident(c) || c == ':') {
            continue; // `kube_core::...`, `$crate::`
        }
        let mut base: Vec<String> = if kw == "crate::" {
            Vec::new()
        } else {
            from.split("::").map(String::from).collect()
        };
        // `super::` inside an inline `mod tests { ... }` first leaves that inline module;
        // from the file's own level it goes to the file module's parent.
        let mut inline = inline_depth(code, start);
        let mut rest = &code[start..];
        if kw == "crate::" {
            rest = &rest[kw.len()..];
        }
        while let Some(r) = rest.strip_prefix("super::") {
            if inline > 0 {
                inline -= 1;
            } else {
                base.pop();
            }
            rest = r;
        }
        let paths: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|s| s.trim().to_string())
                .collect()
        } else {
            vec![rest
                .chars()
                .take_while(|c| ident(*c) || *c == ':')
                .collect()]
        };
        for p in paths {
            let mut segs = base.clone();
            segs.extend(
                p.split("::")
                    .map(|s| s.trim().split(' ').next().unwrap_or("").to_string())
                    .filter(|s| !s.is_empty() && s.chars().all(ident) && s != "self"),
            );
            if let Some(m) = resolve(&segs) {
                if m != from {
                    out.insert(m);
                }
            }
        }
    }
    out
}

/// The layer table of docs/architecture.md: rows `| N | `a`, `b` | ... |` under the heading
/// "Layers", by top-level module.
fn layer_table(doc: &str) -> BTreeMap<String, u32> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/architecture.md has a `## Layers` section");
    let mut layers = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(Ok(n)) = cells.get(1).map(|c| c.parse::<u32>()) else {
            continue;
        };
        for m in cells[2].split(',') {
            let m = m.trim().trim_matches('`').trim_end_matches('/');
            if !m.is_empty() {
                layers.insert(m.to_string(), n);
            }
        }
    }
    assert!(
        !layers.is_empty(),
        "the Layers table of docs/architecture.md is empty"
    );
    layers
}

/// Every cycle's modules (strongly connected components with more than one module).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan, iteratively small enough to recurse: the graph has a few dozen modules.
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The modules of the crate whose sources are in `src`, its import edges, and its largest file
/// (lines, path relative to `root`).
type Graph = (
    BTreeSet<String>,
    BTreeMap<String, BTreeSet<String>>,
    (usize, String),
);

fn module_graph(src: &Path, root: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut largest = (0usize, String::new());
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let lines = text.lines().count();
        let name = f.strip_prefix(root).unwrap_or(f).display().to_string();
        if lines > largest.0 {
            largest = (lines, name);
        }
        let from = module_of(src, f);
        edges.insert(from.clone(), imports(&from, &code_only(&text), &modules));
    }
    (modules, edges, largest)
}

#[test]
fn the_agent_shim_imports_in_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-shim");
    let (modules, edges, _) = module_graph(&root.join("src"), &root);
    let cyc = cycles(&edges);
    println!(
        "agent-shim: {} modules, {} cycles",
        modules.len(),
        cyc.len()
    );
    assert!(
        cyc.is_empty(),
        "agent-shim modules import in a cycle: {}",
        cyc.iter()
            .map(|c| c.join(" ↔ "))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[test]
fn layers_hold_and_no_module_imports_in_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let doc = std::fs::read_to_string(root.join("../docs/architecture.md")).expect("doc");
    let layers = layer_table(&doc);

    let (modules, edges, largest) = module_graph(&src, root);

    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut problems = Vec::new();
    for m in &modules {
        if m != "crate" && !layers.contains_key(&top(m)) {
            problems.push(format!(
                "module `{m}` is in no layer: add `{}` to the Layers table of docs/architecture.md",
                top(m)
            ));
        }
    }
    let mut forbidden = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            let (Some(lf), Some(lt)) = (layers.get(&top(from)), layers.get(&top(to))) else {
                continue;
            };
            if lt > lf {
                forbidden.push(format!(
                    "`{from}` (layer {lf}) imports `{to}` (layer {lt}): an edge upward; move the \
                     shared item down, or invert the dependency (a trait, a callback, a message)"
                ));
            }
        }
    }
    let cyc = cycles(&edges);
    let n_edges: usize = edges.values().map(BTreeSet::len).sum();
    println!(
        "architecture: {} modules, {} edges, {} cycles, {} forbidden edges; largest file {} ({} lines)",
        modules.len(),
        n_edges,
        cyc.len(),
        forbidden.len(),
        largest.1,
        largest.0
    );
    for c in &cyc {
        problems.push(format!("import cycle among {}", c.join(" ↔ ")));
    }
    problems.extend(forbidden);
    assert!(
        problems.is_empty(),
        "the controller's layers are broken (docs/architecture.md, \"Layers\"):\n  {}",
        problems.join("\n  ")
    );
    assert!(
        largest.0 <= 1200,
        "{} has {} lines: split it along a seam (at most 1,200 lines per file in controller/)",
        largest.1,
        largest.0
    );
}
