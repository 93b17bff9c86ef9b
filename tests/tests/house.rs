//! The house rules of `tracer/src` that the compiler does not check (issue 39): no import
//! cycle between its top-level modules, so that data flows one way (the report's types, the
//! crate `tracer-model`, at the bottom; `session`, `cli` and the exports at the top), and a
//! newcomer can read it stage by stage.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tracer/src")
}

/// The top-level modules: `NAME.rs` and `NAME/` beside `lib.rs` (the binaries are apart).
fn top_level_modules(root: &Path) -> BTreeSet<String> {
    fs::read_dir(root)
        .expect("tracer/src")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if path.is_dir() {
                (name != "bin").then_some(name)
            } else {
                name.strip_suffix(".rs").filter(|n| *n != "lib").map(str::to_owned)
            }
        })
        .collect()
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in fs::read_dir(path).expect("a source folder").filter_map(Result::ok) {
            rust_files(&e.path(), out);
        }
    } else if path.extension().is_some_and(|x| x == "rs") {
        out.push(path.to_owned());
    }
}

/// The code of a file without its comments and without the items under `#[cfg(test)]` (a
/// test may reach anywhere).
fn code_of(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("a source file");
    let text: String = text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    let mut code = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        code.push_str(&rest[..at]);
        rest = skip_item(&rest[at + "#[cfg(test)]".len()..]);
    }
    code.push_str(rest);
    code
}

/// What follows the item that `code` begins with: up to its `;`, or its matched braces.
fn skip_item(code: &str) -> &str {
    let (brace, semi) = (code.find('{'), code.find(';'));
    match (brace, semi) {
        (Some(b), s) if s.is_none_or(|s| b < s) => {
            let mut depth = 0usize;
            for (i, ch) in code[b..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            return &code[b + i + 1..];
                        }
                    }
                    _ => {}
                }
            }
            ""
        }
        (_, Some(s)) => &code[s + 1..],
        _ => "",
    }
}

/// The top-level module names a piece of code reaches through `crate::`: `crate::a::b`,
/// and each name at the first level of `crate::{a::x, b, c::{..}}`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item) = (0usize, String::new());
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
            names.insert(first_segment(&item));
        } else {
            names.insert(first_segment(rest));
        }
    }
    names
}

fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// Module -> the other top-level modules its code imports.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = source_root();
    let modules = top_level_modules(&root);
    modules
        .iter()
        .map(|m| {
            let mut files = Vec::new();
            let dir = root.join(m);
            rust_files(if dir.is_dir() { &dir } else { &root }, &mut files);
            if !dir.is_dir() {
                files.retain(|f| f == &root.join(format!("{m}.rs")));
            }
            let reached: BTreeSet<String> = files.iter().flat_map(|f| crate_paths(&code_of(f))).filter(|n| n != m && modules.contains(n)).collect();
            (m.clone(), reached)
        })
        .collect()
}

/// A cycle through `from`, if any: the modules along it.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn walk(graph: &BTreeMap<String, BTreeSet<String>>, at: &str, target: &str, path: &mut Vec<String>, seen: &mut BTreeSet<String>) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == target {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, next, target, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_owned()];
    walk(graph, from, from, &mut path, &mut BTreeSet::new()).then(|| {
        path.push(from.to_owned());
        path
    })
}

#[test]
fn no_two_top_level_modules_import_each_other_even_through_others() {
    let graph = import_graph();
    assert!(graph.len() > 20 && graph["session"].contains("detect"), "the graph was read: {graph:#?}");
    let cycles: Vec<String> = graph.keys().filter_map(|m| cycle_from(&graph, m)).map(|c| c.join(" → ")).collect();
    assert!(cycles.is_empty(), "import cycles between top-level modules of tracer/src:\n{}\n(the graph: {graph:#?})", cycles.join("\n"));
}

/// The dependencies a crate's manifest names under `[dependencies]`.
fn dependencies_of(manifest: &str) -> BTreeSet<String> {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(manifest)).expect("a manifest");
    let mut in_dependencies = false;
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies && !line.is_empty() && !line.starts_with('#') {
            names.insert(line.split(['=', ' ', '.']).next().unwrap_or_default().to_owned());
        }
    }
    names
}

#[test]
fn the_report_model_is_a_crate_that_depends_on_no_stage() {
    // The report's types (tracer-model) are filled by the stages and name none of them: the
    // compiler refuses an import of the tracer from there, as long as the crate does not
    // depend on it. Serialization is all it needs.
    let deps = dependencies_of("tracer-model/Cargo.toml");
    assert_eq!(deps, ["schemars", "serde"].into_iter().map(String::from).collect(), "tracer-model depends on {deps:?}");
    assert!(dependencies_of("tracer/Cargo.toml").contains("gputrace-model"), "the manifests were read");
}

#[test]
fn test_items_are_left_out_and_what_follows_them_is_read() {
    let dir = std::env::temp_dir().join(format!("gputrace-house-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("scratch");
    let file = dir.join("m.rs");
    fs::write(&file, "use crate::a;\n#[cfg(test)]\nmod tests { use crate::b; fn f() { if x { crate::c } } }\n#[cfg(test)]\nuse crate::d;\nfn g() { crate::e::h() } // crate::z\n").expect("write");
    assert_eq!(crate_paths(&code_of(&file)), ["a", "e"].into_iter().map(String::from).collect());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_reader_of_imports_sees_groups_and_paths() {
    let code = "use crate::{a::x, b, c::{d, e}};\nlet v = crate::f::g(crate::h);";
    assert_eq!(crate_paths(code), ["a", "b", "c", "f", "h"].into_iter().map(String::from).collect());
}
