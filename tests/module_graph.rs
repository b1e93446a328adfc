//! The module graph has no cycles and its leaves stay leaves.
//!
//! Reads every file under `src/`, maps it to its top-level module
//! (`src/sync/setup.rs` is `sync`), collects the `crate::` paths it names
//! outside comments, and fails on a cycle between top-level modules (naming
//! it) or on a leaf module that imports one of the running parts. This is
//! the check ARCHITECTURE.md's layering rests on: a new cycle fails CI.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers of ARCHITECTURE.md, lowest first. A module imports only its
/// own layer and the ones below: leaves import nothing of podwarden's
/// running parts, the core no orchestration, nothing below the edges an
/// edge. A new module must be given its layer here.
const LAYERS: &[(&str, &[&str])] = &[
    ("leaf", &["sys", "base", "model", "config"]),
    ("runtime boundary", &["runtime", "telemetry", "logs"]),
    ("node and pods", &["node", "pod"]),
    ("orchestration", &["agent"]),
    ("edge", &["api", "cli", "cluster"]),
];

fn layer_of(module: &str) -> Option<(usize, &'static str)> {
    LAYERS.iter().enumerate().find(|(_, (_, ms))| ms.contains(&module)).map(|(i, (name, _))| (i, *name))
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of `text` without comments (line and block) and string contents.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'"' {
            // a string literal (raw strings with quotes inside are not used
            // around `crate::` paths; escapes are skipped)
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // a char literal such as '"' or '\n'
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The top-level modules named by `crate::` paths in `code`, including
/// groups such as `crate::{agent, model::Pod}`.
fn referenced(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `podwarden_crate::`
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // split the top level of the group on commas
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() {
                            found.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in all {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "main" || module == "lib" {
            continue; // the binary and the module list
        }
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        let deps = g.entry(module.clone()).or_default();
        for d in referenced(&code) {
            if d != module && d != "self" && d != "super" {
                deps.insert(d);
            }
        }
    }
    g
}

/// Every cycle's strongly connected component (Tarjan), as sorted names.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t =
        T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), out: Vec::new() };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// Each cycle of `g`, with the edges that close it.
fn show_cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    cycles(g)
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| g[a].iter().filter(|b| c.contains(b)).map(move |b| format!("{a} -> {b}")))
                .collect();
            format!("{{{}}}: {}", c.join(", "), edges.join("; "))
        })
        .collect()
}

#[test]
fn no_cycle_between_modules() {
    let g = graph();
    assert!(g.contains_key("agent") && g["agent"].contains("pod"), "the graph reader found no edges: {g:?}");
    let shown = show_cycles(&g);
    assert!(shown.is_empty(), "import cycles between modules:\n{}", shown.join("\n"));
}

#[test]
fn imports_point_down_the_layers() {
    let g = graph();
    let mut bad = Vec::new();
    for (module, deps) in &g {
        let Some((rank, layer)) = layer_of(module) else {
            bad.push(format!("{module} is in no layer (add it to LAYERS and ARCHITECTURE.md)"));
            continue;
        };
        for d in deps {
            match layer_of(d) {
                Some((r, l)) if r > rank => bad.push(format!("{module} ({layer}) -> {d} ({l})")),
                Some(_) => {}
                None => bad.push(format!("{module} -> {d}, which is in no layer")),
            }
        }
    }
    assert!(bad.is_empty(), "imports against the layering:\n{}", bad.join("\n"));
}

#[test]
fn the_reader_sees_groups_and_ignores_comments() {
    let code = code_only(
        "use crate::{agent, model::{Pod, Uid}};\n// crate::http\nlet s = \"crate::api\"; /* crate::cli */ crate::thread::spawn",
    );
    let r = referenced(&code);
    assert_eq!(r.into_iter().collect::<Vec<_>>(), ["agent", "model", "thread"]);
}

/// ARCHITECTURE.md's code map names every source file: each `src/**.rs`
/// appears as a backticked path in the code map table.
#[test]
fn the_code_map_lists_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let map = arch.split("## Code map").nth(1).expect("ARCHITECTURE.md has a Code map section");
    let map = map.split("\n## ").next().unwrap();
    let mut listed = BTreeSet::new();
    for line in map.lines().filter(|l| l.starts_with('|')) {
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 {
                listed.insert(part.to_string());
            }
        }
    }
    let mut all = Vec::new();
    files(&root.join("src"), &mut all);
    let mut missing: Vec<String> = all
        .iter()
        .map(|f| f.strip_prefix(root).unwrap().to_string_lossy().into_owned())
        .filter(|f| !listed.contains(f))
        .collect();
    missing.sort();
    assert!(missing.is_empty(), "ARCHITECTURE.md's code map does not list: {}", missing.join(", "));
}

/// Every full path a `root::` prefix names in `code`, groups expanded:
/// `crate::{a::{b, c}, d}` gives `a::b`, `a::c` and `d`.
fn full_paths(code: &str, root: &str) -> Vec<Vec<String>> {
    fn ident_at(s: &str) -> &str {
        let n = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
        &s[..n]
    }
    /// Parses a path tree at `s` (after a `::`), appending each full path.
    fn tree(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        let s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        tree(&group[start..i], prefix, out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree(&group[start..i], prefix, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name = ident_at(s);
        if name.is_empty() || name == "self" {
            out.push(prefix.clone());
            return;
        }
        prefix.push(name.to_string());
        let rest = &s[name.len()..];
        if let Some(more) = rest.trim_start().strip_prefix("::") {
            tree(more, prefix, out);
        } else {
            out.push(prefix.clone());
        }
        prefix.pop();
    }
    let mut out = Vec::new();
    let pat = format!("{root}::");
    for (at, _) in code.match_indices(&pat) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        tree(&code[at + pat.len()..], &mut Vec::new(), &mut out);
    }
    out
}

/// The module path of a source file: `pod/phases/setup.rs` is
/// `pod::phases::setup`, `pod/phases/mod.rs` is `pod::phases`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    let last = segs.pop().unwrap();
    if last != "mod.rs" {
        segs.push(last.trim_end_matches(".rs").to_string());
    }
    segs
}

/// The file that holds the longest prefix of `path` that is a module.
fn file_of(src: &Path, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let p = path[..n].join("/");
        [format!("{p}.rs"), format!("{p}/mod.rs")].into_iter().find(|f| src.join(f).is_file())
    })
}

/// Which source files each file's production code (before its first
/// `#[cfg(test)]`) names through `crate::` and `super::` paths.
fn file_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in all {
        let rel = f.strip_prefix(&src).unwrap().to_path_buf();
        let name = rel.to_string_lossy().into_owned();
        if name == "main.rs" || name == "lib.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let production = text.split("\n#[cfg(test)]").next().unwrap();
        let code = code_only(production);
        let here = module_path(&rel);
        let mut paths = full_paths(&code, "crate");
        let parent = &here[..here.len().saturating_sub(1)];
        for p in full_paths(&code, "super") {
            paths.push(parent.iter().cloned().chain(p).collect());
        }
        let deps = g.entry(name.clone()).or_default();
        for p in paths {
            if let Some(to) = file_of(&src, &p)
                && to != name
            {
                deps.insert(to);
            }
        }
    }
    g
}

/// No two source files import each other, directly or around a circle
/// (a folder's `mod.rs` and the files below it included): each file can be
/// read after the ones it uses.
#[test]
fn no_circle_between_files() {
    let g = file_graph();
    assert!(
        g.get("agent/eviction.rs").is_some_and(|d| d.contains("agent/manager.rs")),
        "the file graph reader found no edges: {g:?}"
    );
    let shown = show_cycles(&g);
    assert!(shown.is_empty(), "import circles between files:\n{}", shown.join("\n"));
}

#[test]
fn the_path_reader_expands_nested_groups() {
    let code = code_only("use crate::{a::{b, c::D}, e};\nlet x = super::f::g(); crate::h::i");
    let crate_paths: Vec<String> = full_paths(&code, "crate").iter().map(|p| p.join("::")).collect();
    assert_eq!(crate_paths, ["a::b", "a::c::D", "e", "h::i"]);
    let super_paths: Vec<String> = full_paths(&code, "super").iter().map(|p| p.join("::")).collect();
    assert_eq!(super_paths, ["f::g"]);
}

/// The top of the tree stays readable: `lib.rs` names at most 13 modules
/// (12, and `cluster` since cluster mode),
/// each a folder whose `mod.rs` says what it owns and what it may use.
#[test]
fn few_top_level_modules_each_a_documented_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let modules: Vec<&str> =
        lib.lines().filter_map(|l| l.trim().strip_prefix("pub mod ")).map(|m| m.trim_end_matches(';')).collect();
    assert!(modules.len() <= 13, "lib.rs names {} modules (at most 13): {modules:?}", modules.len());
    for m in modules {
        let path = root.join("src").join(m).join("mod.rs");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{m}: {}: {e}", path.display()));
        let header: String = text.lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
        assert!(header.contains("May use") || header.contains("may use"), "{m}/mod.rs does not say what it may use");
    }
}

/// Every source file with the text before its first `#[cfg(test)]` (its
/// production code), relative to `src/`.
fn production_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut out: Vec<(String, String)> = all
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let production = text.split("\n#[cfg(test)]").next().unwrap().to_string();
            (f.strip_prefix(&src).unwrap().to_string_lossy().into_owned(), production)
        })
        .collect();
    out.sort();
    out
}

/// The error type of a `Result<T, E>` whose arguments start `args`: the
/// last top-level argument (`None` for a one-argument alias).
fn result_error_type(args: &str) -> Option<String> {
    let mut depth = 0;
    let mut last_comma = None;
    for (i, c) in args.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '>' if i > 0 && args[..i].ends_with('-') => {} // an arrow
            '>' if depth == 0 => return last_comma.map(|j: usize| args[j + 1..i].trim().to_string()),
            '>' => depth -= 1,
            ',' if depth == 0 => last_comma = Some(i),
            ';' | '{' => return None,
            _ => {}
        }
    }
    None
}

#[test]
fn the_error_type_is_the_last_argument() {
    assert_eq!(result_error_type("u8, String>").as_deref(), Some("String"));
    assert_eq!(result_error_type("BTreeMap<String, String>, D::Error>").as_deref(), Some("D::Error"));
    assert_eq!(result_error_type("Vec<(String, String)>, String>").as_deref(), Some("String"));
    assert_eq!(result_error_type("u8>").as_deref(), None);
}

/// Errors are typed to the edge: outside the CLI no function returns
/// `Result<_, String>` (strings only where a person reads the error).
#[test]
fn no_string_errors_outside_the_cli() {
    let mut found = Vec::new();
    for (name, text) in production_sources() {
        if name.starts_with("cli/") {
            continue;
        }
        let code = code_only(&text);
        for (at, _) in code.match_indices("Result<") {
            if result_error_type(&code[at + "Result<".len()..]).is_some_and(|e| e == "String") {
                let line = code[..at].matches('\n').count() + 1;
                found.push(format!("{name}:{line}"));
            }
        }
    }
    assert!(found.is_empty(), "Result<_, String> outside the CLI at: {}", found.join(", "));
}

/// Small pieces: no production file over 1,000 lines.
#[test]
fn no_file_over_a_thousand_production_lines() {
    let big: Vec<String> = production_sources()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > 1000)
        .map(|(name, text)| format!("{name} ({} lines)", text.lines().count()))
        .collect();
    assert!(big.is_empty(), "production files over 1,000 lines: {}", big.join(", "));
}

/// The length of each function in `code` (comments and strings removed),
/// from its `fn` line to its closing brace: (name, first line, lines).
fn function_lengths(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(at) = line.find("fn ") else { continue };
        if at > 0 && !line[..at].ends_with(' ') {
            continue; // part of a longer word
        }
        let name: String = line[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
        if name.is_empty() {
            continue;
        }
        let mut depth = 0i64;
        let mut opened = false;
        for (j, l) in lines.iter().enumerate().skip(i) {
            if !opened && l.trim_end().ends_with(';') && !l.contains('{') {
                break; // a declaration without a body
            }
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                out.push((name.clone(), i + 1, j - i + 1));
                break;
            }
        }
    }
    out
}

/// Small pieces: at most two functions over 120 lines in production code.
#[test]
fn at_most_two_functions_over_120_lines() {
    let mut long = Vec::new();
    for (name, text) in production_sources() {
        for (f, line, n) in function_lengths(&code_only(&text)) {
            if n > 120 {
                long.push(format!("{name}:{line} {f} ({n} lines)"));
            }
        }
    }
    assert!(long.len() <= 2, "{} functions over 120 lines (at most 2): {}", long.len(), long.join(", "));
}

#[test]
fn function_lengths_count_from_fn_to_its_brace() {
    let code = "fn a() {\n    let x = 1;\n}\nfn b();\npub fn c(\n    y: u8,\n) -> u8 {\n    y\n}\n";
    let got = function_lengths(code);
    assert_eq!(got, [("a".to_string(), 1, 3), ("c".to_string(), 5, 5)]);
}
