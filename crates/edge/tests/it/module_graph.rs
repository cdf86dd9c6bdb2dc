//! The edge's modules, and the engine's below them, form layers: no top-level module of either
//! crate reaches itself through `crate::` paths (issue 13, item 3).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `src` folder of the crate `name` of this workspace (`edge`, `engine`).
fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

/// Top-level module of the crate whose sources are in `src` → the top-level modules it names as
/// `crate::<module>`, comment lines (`//`, `///`, `//!`) ignored.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let deps = graph.entry(module.clone()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    graph
}

/// Groups of modules that reach each other (strongly connected components of two or more).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reach(m))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for m in graph.keys() {
        if !reaches[m].contains(m) || groups.iter().any(|g| g.contains(m)) {
            continue;
        }
        let group = graph.keys().filter(|o| reaches[m].contains(*o) && reaches[*o].contains(m)).cloned().collect();
        groups.push(group);
    }
    groups
}

/// Fails with the modules of the crate `name` that import each other in a circle.
fn assert_no_cycle(name: &str) {
    let src = crate_src(name);
    let graph = module_graph(&src);
    assert!(graph.len() > 5, "read only {} modules under {}", graph.len(), src.display());
    let found = cycles(&graph);
    let mut report = String::new();
    for group in &found {
        report.push_str("cycle among:");
        for m in group {
            let inside: Vec<&String> = graph[m].iter().filter(|d| group.contains(*d)).collect();
            report.push_str(&format!("\n  {m} -> {inside:?}"));
        }
        report.push('\n');
    }
    assert!(found.is_empty(), "the {name} crate's modules import each other in a circle:\n{report}");
}

#[test]
fn edge_modules_import_each_other_without_a_cycle() {
    assert_no_cycle("edge");
}

#[test]
fn engine_modules_import_each_other_without_a_cycle() {
    assert_no_cycle("engine");
}

#[test]
fn a_cycle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
        ("d".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]
    .into();
    assert_eq!(cycles(&graph), vec![BTreeSet::from(["a".to_owned(), "b".to_owned(), "c".to_owned()])]);
}

#[test]
fn the_engine_depends_on_no_transport() {
    let manifest =
        std::fs::read_to_string(crate_src("engine").join("../Cargo.toml")).expect("read the engine's manifest");
    for line in manifest.lines() {
        let name = line.split(['.', ' ', '=']).next().unwrap_or_default();
        assert!(
            !["axum", "tungstenite", "tokio-tungstenite", "hyper", "hyper-util", "skua-edge"].contains(&name),
            "the engine depends on a door's transport: {line}"
        );
    }
}
