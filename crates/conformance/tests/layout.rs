//! The workspace's layout, checked from the sources (issue 39), here because this crate builds
//! without the node:
//!
//! - no circle of files in any crate: every directory under `crates/` with a `src/` is read, so
//!   a crate added later is covered without touching this test;
//! - the backend crates' tests build without the node: `skua-conformance` depends on `skua-core`
//!   only, and no backend crate reaches `skua-server` (or the edge, the control plane, the
//!   testkit) through its dependencies or dev-dependencies.
//!
//! The file graph is the one `file_cycles.py` (in the project's shared tools) draws: each file
//! is a module; `crate::a::b`, `super::x`, `self::x` and grouped `use crate::{a, b::c}` paths
//! name the deepest module file that exists; a file naming its own ancestor is not an arrow (a
//! parent declares and re-exports its children); test code (`#[cfg(test)]` to the end of a
//! file, files named `tests.rs`) and `//` comments are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path of names from the crate root (`[]` is `lib.rs` or `main.rs`).
type Module = Vec<String>;

/// The `crates/` directory.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("crates/").to_path_buf()
}

/// Every crate under `crates/` with a `src/`: its directory name and its `src/`.
fn crates() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(crates_dir())
        .expect("read crates/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| (p.file_name().expect("a name").to_string_lossy().into_owned(), p.join("src")))
        .collect();
    out.sort();
    out
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Module → file, for every file of `src` but `tests.rs` files. A `main.rs` beside a `lib.rs`
/// is a crate of its own (it names the library by the crate's name): the module `main`, which
/// no file of the library names.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let has_lib = src.join("lib.rs").is_file();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = BTreeMap::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let rel = file.strip_prefix(src).expect("under src").with_extension("");
        let mut module: Module = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let bin_beside_lib = has_lib && module == ["main"];
        if !bin_beside_lib && module.last().is_some_and(|l| matches!(l.as_str(), "mod" | "lib" | "main")) {
            module.pop();
        }
        out.insert(module, file);
    }
    out
}

/// The source without test code and `//` comments.
fn production_text(text: &str) -> String {
    let text = text.find("#[cfg(test)]").map_or(text, |at| &text[..at]);
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The `::name` segments at `at`: the names and where they end.
fn segments(text: &[u8], mut at: usize) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    while text[at..].starts_with(b"::") {
        let start = at + 2;
        let end = start + text[start..].iter().take_while(|c| is_word(**c)).count();
        if end == start {
            break;
        }
        names.push(String::from_utf8_lossy(&text[start..end]).into_owned());
        at = end;
    }
    (names, at)
}

/// Expands the inside of a `{…}` group of a `use` under `prefix` into whole paths.
fn expand(prefix: &[String], body: &str, out: &mut Vec<Vec<String>>) {
    let mut items = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    items.push(cur);
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        let split = |s: &str| s.split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect::<Vec<_>>();
        let nested =
            item.find("::{").filter(|at| item.ends_with('}') && item[..*at].bytes().all(|c| is_word(c) || c == b':'));
        let mut path = prefix.to_vec();
        match nested {
            Some(at) => {
                path.extend(split(&item[..at]));
                expand(&path, &item[at + 3..item.len() - 1], out);
            }
            None => {
                path.extend(split(item.split(" as ").next().unwrap_or(item)));
                out.push(path);
            }
        }
    }
}

/// Every `crate::…`, `super::…` and `self::…` path of `text`, grouped imports expanded; each
/// starts with its keyword.
fn paths_in(text: &str) -> Vec<Vec<String>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for keyword in ["crate", "super", "self"] {
        let mut from = 0;
        while let Some(found) = text[from..].find(keyword) {
            let at = from + found;
            from = at + keyword.len();
            if at > 0 && is_word(bytes[at - 1]) {
                continue;
            }
            let (names, end) = segments(bytes, from);
            if bytes[end..].starts_with(b"::{") {
                let start = end + 3;
                let (mut depth, mut i) = (1, start);
                while i < bytes.len() && depth > 0 {
                    depth += match bytes[i] {
                        b'{' => 1,
                        b'}' => -1,
                        _ => 0,
                    };
                    i += 1;
                }
                let mut prefix = vec![keyword.to_owned()];
                prefix.extend(names.iter().cloned());
                let body = if depth == 0 { &text[start..i - 1] } else { &text[start..] };
                expand(&prefix, body, &mut out);
            }
            if !names.is_empty() {
                let mut path = vec![keyword.to_owned()];
                path.extend(names);
                out.push(path);
            }
        }
    }
    out
}

/// Module → the modules it names.
fn file_graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = modules(src);
    let resolve =
        |parts: &[String]| (1..=parts.len()).rev().map(|n| parts[..n].to_vec()).find(|m| files.contains_key(m));
    let mut graph = BTreeMap::new();
    for (module, file) in &files {
        let text = production_text(&std::fs::read_to_string(file).expect("read a source file"));
        let mut deps = BTreeSet::new();
        for path in paths_in(&text) {
            let (head, mut rest) = (path[0].as_str(), &path[1..]);
            let mut base: Module = match head {
                "crate" => Vec::new(),
                "self" => module.clone(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            if head == "super" {
                while rest.first().is_some_and(|r| r == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            base.extend(rest.iter().cloned());
            let Some(target) = resolve(&base) else { continue };
            let ancestor = target.len() < module.len() && module[..target.len()] == target[..];
            if target != *module && !target.is_empty() && !ancestor {
                deps.insert(target);
            }
        }
        graph.insert(module.clone(), deps);
    }
    graph
}

/// Groups of two or more modules that reach each other (strongly connected components).
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&Module, BTreeSet<Module>> = graph.keys().map(|m| (m, reach(m))).collect();
    let mut groups: Vec<BTreeSet<Module>> = Vec::new();
    for m in graph.keys() {
        if !reaches[m].contains(m) || groups.iter().any(|g| g.contains(m)) {
            continue;
        }
        groups.push(graph.keys().filter(|o| reaches[m].contains(*o) && reaches[*o].contains(m)).cloned().collect());
    }
    groups
}

fn show(m: &Module) -> String {
    if m.is_empty() { "lib".to_owned() } else { m.join("/") }
}

#[test]
fn no_crate_has_a_circle_of_files() {
    let crates = crates();
    let names: Vec<&str> = crates.iter().map(|(n, _)| n.as_str()).collect();
    for expected in ["core", "conformance", "server"] {
        assert!(names.contains(&expected), "crates/{expected} not found among {names:?}");
    }
    let mut report = String::new();
    for (name, src) in &crates {
        let graph = file_graph(src);
        assert!(!graph.is_empty(), "crates/{name}/src has no .rs file");
        for group in circles(&graph) {
            report.push_str(&format!("crates/{name}: circle among"));
            for m in &group {
                let inside: Vec<String> = graph[m].iter().filter(|d| group.contains(*d)).map(show).collect();
                report.push_str(&format!("\n  {} -> {inside:?}", show(m)));
            }
            report.push('\n');
        }
    }
    assert!(report.is_empty(), "files name each other in a circle (move what they share to a lower module):\n{report}");
}

/// A graph built from sources written here, to show the reader finds circles through each kind
/// of path and leaves out what it should.
#[test]
fn the_reader_sees_every_kind_of_path() {
    let dir = std::env::temp_dir().join(format!("skua-layout-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    let _ = std::fs::remove_dir_all(&dir);
    write("lib.rs", "mod a; mod b; mod c; mod d; mod e; pub use crate::a::A;");
    // a -> b through a grouped import, b -> a through `super::`: a circle.
    write("a.rs", "use crate::{b::{B, self}, c};\npub struct A;");
    write("b.rs", "use super::a::A as Other;\npub struct B;");
    // c -> d only in a comment and in test code: no arrow.
    write("c.rs", "// crate::d::D\n#[cfg(test)]\nmod tests { use crate::d::D; }");
    write("d.rs", "pub struct D; fn f() -> crate::c::C { todo() }");
    // e and its child: the child naming its parent is no arrow, the parent naming it is.
    write("e/mod.rs", "mod inner; pub use self::inner::I;");
    write("e/inner.rs", "use super::super::e::X; use crate::e;");
    let graph = file_graph(&dir);
    let m = |s: &str| -> Module { s.split('/').filter(|p| !p.is_empty()).map(str::to_owned).collect() };
    assert_eq!(graph[&m("a")], [m("b"), m("c")].into_iter().collect());
    assert_eq!(graph[&m("b")], [m("a")].into_iter().collect());
    assert!(graph[&m("c")].is_empty(), "{:?}", graph[&m("c")]);
    assert_eq!(graph[&m("d")], [m("c")].into_iter().collect());
    assert_eq!(graph[&m("e")], [m("e/inner")].into_iter().collect());
    assert!(graph[&m("e/inner")].is_empty(), "{:?}", graph[&m("e/inner")]);
    assert_eq!(graph[&m("")], [m("a")].into_iter().collect());
    assert_eq!(circles(&graph), vec![[m("a"), m("b")].into_iter().collect::<BTreeSet<_>>()]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Package name → its manifest's text, for every crate under `crates/`.
fn manifests() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(crates_dir()).expect("read crates/") {
        let Ok(text) = std::fs::read_to_string(entry.expect("dir entry").path().join("Cargo.toml")) else { continue };
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \"").and_then(|r| r.strip_suffix('"')))
            .expect("a package name")
            .to_owned();
        out.insert(name, text);
    }
    out
}

/// The `skua-*` packages `manifest` depends on: normal and build dependencies, and with `dev`
/// the dev-dependencies too (any target).
fn skua_deps(manifest: &str, dev: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let is_deps_table = |t: &str| {
                let kind = t.rsplit('.').next().unwrap_or(t);
                kind == "dependencies" || kind == "build-dependencies" || (dev && kind == "dev-dependencies")
            };
            in_deps = is_deps_table(header);
            // `[dependencies.skua-x]`
            if let Some((table, name)) = header.rsplit_once('.')
                && name.starts_with("skua-")
                && is_deps_table(table)
            {
                out.insert(name.to_owned());
            }
            continue;
        }
        if in_deps && line.starts_with("skua-") {
            let name: String =
                line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
            out.insert(name);
        }
    }
    out
}

#[test]
fn backend_tests_build_without_the_node() {
    let manifests = manifests();
    let own = skua_deps(&manifests["skua-conformance"], true);
    assert_eq!(own, BTreeSet::from(["skua-core".to_owned()]), "skua-conformance depends on skua-core only");
    let node = ["skua-server", "skua-edge", "skua-engine", "skua-control", "skua-testkit"];
    for backend in ["skua-core", "skua-store", "skua-bus", "skua-presence", "skua-webhooks", "skua-conformance"] {
        let text = manifests.get(backend).unwrap_or_else(|| panic!("{backend} not found under crates/"));
        let mut reached = skua_deps(text, true);
        let mut todo: Vec<String> = reached.iter().cloned().collect();
        while let Some(p) = todo.pop() {
            let text = manifests.get(&p).unwrap_or_else(|| panic!("{p} (a dependency of {backend}) not under crates/"));
            for d in skua_deps(text, false) {
                if reached.insert(d.clone()) {
                    todo.push(d);
                }
            }
        }
        let bad: Vec<&str> = node.into_iter().filter(|n| reached.contains(*n)).collect();
        assert!(bad.is_empty(), "`cargo test -p {backend}` would build {bad:?} (it reaches {reached:?})");
    }
}

#[test]
fn dependency_tables_are_read() {
    let manifest = "[package]\nname = \"x\"\n[dependencies]\nskua-core.workspace = true\nserde = \"1\"\n\
                    [dev-dependencies]\nskua-testkit = { workspace = true }\n\
                    [target.'cfg(unix)'.dependencies]\nskua-bus.workspace = true\n\
                    [dependencies.skua-store]\nworkspace = true\n[dev-dependencies.skua-edge]\nworkspace = true\n";
    let set = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(skua_deps(manifest, false), set(&["skua-bus", "skua-core", "skua-store"]));
    assert_eq!(skua_deps(manifest, true), set(&["skua-bus", "skua-core", "skua-edge", "skua-store", "skua-testkit"]));
}
