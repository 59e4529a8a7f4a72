//! The crate's modules stand in layers (issue 47): read from the source, each top-level
//! module's imports of the others (`crate::name` in code, not comments) must form no cycle,
//! the fence stands between the client and leader election (neither imports the other), and
//! the pure core (`plan`, and the value types it reads: `pod`) imports none of the shell.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Each top-level module of `src/` and the modules its code names as `crate::name`.
fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = Graph::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "main" || name == "lib" {
            continue;
        }
        let imports = graph.entry(name.clone()).or_default();
        for file in rust_files(&path) {
            let text = std::fs::read_to_string(&file).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                let code = line.split("//").next().unwrap_or_default();
                for (i, _) in code.match_indices("crate::") {
                    let rest = &code[i + "crate::".len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    if !rest[..end].is_empty() && rest[..end] != name {
                        imports.insert(rest[..end].to_string());
                    }
                }
            }
        }
    }
    graph
}

fn rust_files(path: &Path) -> Vec<std::path::PathBuf> {
    if path.is_file() {
        // Only Rust: test fixtures (a captured protobuf page) sit beside the code.
        let rust = path.extension().is_some_and(|e| e == "rs");
        return rust.then(|| path.to_path_buf()).into_iter().collect();
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        files.extend(rust_files(&entry.unwrap().path()));
    }
    files
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = graph();
    assert!(graph.len() > 20, "{graph:?}");
    // Depth-first from each module: a module reached again on the path is a cycle.
    fn visit(graph: &Graph, module: &str, path: &mut Vec<String>, done: &mut BTreeSet<String>) {
        if let Some(at) = path.iter().position(|m| m == module) {
            panic!("a cycle: {} -> {module}", path[at..].join(" -> "));
        }
        if !done.insert(module.to_string()) {
            return;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            visit(graph, next, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(&graph, module, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_fence_stands_between_the_client_and_leader_election() {
    let graph = graph();
    for (from, to) in [("client", "leader"), ("leader", "client")] {
        assert!(
            !graph[from].contains(to),
            "{from} imports {to}: {:?}",
            graph[from]
        );
    }
    assert!(graph["client"].contains("fence") && graph["leader"].contains("fence"));
}

#[test]
fn the_core_imports_none_of_the_shell() {
    let graph = graph();
    let shell = [
        "cache",
        "expectations",
        "controller",
        "client",
        "leader",
        "operator",
        "http",
    ];
    for core in ["plan", "pod"] {
        let imported: Vec<&str> = shell
            .into_iter()
            .filter(|m| graph[core].contains(*m))
            .collect();
        assert!(
            imported.is_empty(),
            "{core} imports {imported:?} of the shell"
        );
    }
}
