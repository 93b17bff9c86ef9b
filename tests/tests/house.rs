//! The house rules that the compiler does not check (issues 39 and 59): no import cycle
//! among the modules of any folder of any crate, so that data flows one way (the report's
//! types, `tracer-model`, at the bottom; the pure analysis, `tracer-analysis`, above it;
//! `session`, `cli` and the exports at the top), and a newcomer can read it stage by stage.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tracer/src")
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

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The index of the `}` that closes the `{` at `open` (the end where none does).
fn matching_brace(chars: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    chars.len()
}

/// The paths of a use group's members (what is between its braces), each under `prefix`,
/// nested groups expanded.
fn group_paths(prefix: &[String], group: &[char], found: &mut Vec<Vec<String>>) {
    let mut start = 0;
    let mut depth = 0usize;
    let mut members = Vec::new();
    for (i, c) in group.iter().enumerate() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                members.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    members.push(&group[start..]);
    for member in members {
        let text: String = member.iter().collect();
        let text = text.trim();
        let (head, nested) = match text.find("::{") {
            Some(at) => (&text[..at], Some(at + 2)),
            None => (text, None),
        };
        let segments: Vec<String> = prefix.iter().cloned().chain(head.split("::").map(|s| s.split_whitespace().next().unwrap_or_default().to_owned())).filter(|s| !s.is_empty() && s.chars().all(is_ident)).collect();
        match nested {
            Some(at) => {
                let inner: Vec<char> = text[at..].chars().collect();
                let close = matching_brace(&inner, 0);
                group_paths(&segments, &inner[1..close.min(inner.len())], found);
            }
            None if segments.len() > prefix.len() => found.push(segments),
            None => {}
        }
    }
}

/// Every path a piece of code names, as its segments: `a::b::c`, and for a group
/// `a::{b::x, c, d::{e, f}}` each of `a::b::x`, `a::c`, `a::d::e` and `a::d::f`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let ident_at = |i: usize| -> (String, usize) {
        let mut j = i;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        (chars[i..j].iter().collect(), j)
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = is_ident(chars[i]) && !chars[i].is_ascii_digit() && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let (first, mut j) = ident_at(i);
        let mut segments = vec![first];
        while chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
            j += 2;
            if chars.get(j) == Some(&'{') {
                let close = matching_brace(&chars, j);
                group_paths(&segments, &chars[j + 1..close], &mut found);
                j = close + 1;
                break;
            }
            if chars.get(j).is_some_and(|c| is_ident(*c)) {
                let (next, end) = ident_at(j);
                segments.push(next);
                j = end;
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            found.push(segments);
        }
        i = j.max(i + 1);
    }
    found
}

/// The module path of a source file under `root`: `detect/whatif/model.rs` is
/// `detect::whatif::model`, a folder's `mod.rs` (and the crate's `lib.rs`, `main.rs`) the
/// folder's own.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("under the root").with_extension("");
    let mut segments: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if segments.last().is_some_and(|l| ["mod", "lib", "main"].contains(&l.as_str())) {
        segments.pop();
    }
    segments
}

/// The modules inside module `path`: its folder's files and folders.
fn children(root: &Path, path: &[String]) -> BTreeSet<String> {
    let dir = path.iter().fold(root.to_owned(), |d, s| d.join(s));
    let Ok(entries) = fs::read_dir(&dir) else { return BTreeSet::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").filter(|n| !["mod", "lib", "main"].contains(n)).map(str::to_owned)
            }
        })
        .collect()
}

/// Where a path named in module `at` leads, as an absolute module path: through `crate::`,
/// `super::` and `self::`, or a child of `at` named bare; None for anything else (a
/// dependency's path, a type's associated item).
fn resolve(root: &Path, at: &[String], path: &[String]) -> Option<Vec<String>> {
    match path.first()?.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "super" | "self" => {
            let mut base = at.to_vec();
            let mut rest = path;
            while let Some(head) = rest.first().filter(|h| *h == "super" || *h == "self") {
                if head == "super" {
                    base.pop();
                }
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        first if children(root, at).contains(first) => Some(at.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

/// For each folder (module) of the source tree under `root`, its children and which of them
/// each imports (a child imports another when code anywhere inside it names a path into the
/// other). A folder's own `mod.rs` stands for the folder, above its children: it is not one
/// of them. The binaries under `bin/` are apart.
fn sibling_graphs(root: &Path) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files.iter().filter(|f| !f.strip_prefix(root).is_ok_and(|r| r.starts_with("bin"))) {
        let at = module_of(root, file);
        for path in paths(&code_of(file)) {
            let Some(to) = resolve(root, &at, &path) else { continue };
            for level in 0..at.len() {
                let folder = &at[..level];
                let (Some(from), Some(target)) = (at.get(level), to.get(level)) else { continue };
                if to[..level] == *folder && target != from && children(root, folder).contains(target) {
                    graphs.entry(folder.to_vec()).or_default().entry(from.clone()).or_default().insert(target.clone());
                }
            }
        }
    }
    graphs
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

fn crate_root(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

/// Every cycle among the modules of one folder, in every folder of the crates' sources.
fn cycles_in(root: &Path) -> Vec<String> {
    let mut cycles = Vec::new();
    for (folder, graph) in sibling_graphs(root) {
        let mut seen: Vec<BTreeSet<String>> = Vec::new();
        for m in graph.keys() {
            if let Some(c) = cycle_from(&graph, m) {
                let members: BTreeSet<String> = c.iter().cloned().collect();
                if !seen.contains(&members) {
                    cycles.push(format!("{} in {}/: {}", root.display(), folder.join("/"), c.join(" → ")));
                    seen.push(members);
                }
            }
        }
    }
    cycles
}

#[test]
fn no_two_modules_of_one_folder_import_each_other_even_through_others() {
    let graphs = sibling_graphs(&source_root());
    let top = &graphs[&Vec::new()];
    assert!(top.len() > 15 && top["session"].contains("probes"), "the graph was read: {top:#?}");
    let analysis = sibling_graphs(&crate_root("tracer-analysis"));
    let detect = &analysis[&vec!["detect".to_owned()]];
    assert!(detect["diagnoses"].contains("whatif") && detect["rank"].contains("diagnoses"), "folders inside are read: {detect:#?}");
    let crates = ["tracer", "tracer-analysis", "tracer-common", "tracer-model", "xtask", "tests"];
    let cycles: Vec<String> = crates.into_iter().flat_map(|c| cycles_in(&crate_root(c))).collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_pure_analysis_is_a_crate_without_aya_or_io() {
    // Decoding, the evidence and the detectors are functions of their inputs: a recording's
    // offline report is the live one. They are a crate of their own, which the compiler keeps
    // from reaching the tracer (the probes, the terminal, the files written); what it may use
    // is this list: the wire types (without their aya feature), the report's types, and
    // serialization.
    let deps = dependencies_of("tracer-analysis/Cargo.toml");
    let allowed: BTreeSet<String> = ["gputrace-common", "gputrace-model", "serde", "serde_json", "thiserror"].into_iter().map(String::from).collect();
    assert_eq!(deps, allowed, "tracer-analysis depends on {deps:?}");
    let manifest = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tracer-analysis/Cargo.toml")).expect("a manifest");
    assert!(!manifest.contains("\"user\""), "the wire types without aya");
    let mut files = Vec::new();
    rust_files(&crate_root("tracer-analysis"), &mut files);
    assert!(files.len() > 40, "the sources were read: {}", files.len());
    for file in files {
        let code = code_of(&file);
        for io in ["std::fs", "std::process", "std::net", "File::open", "read_to_string("] {
            assert!(!code.contains(io), "{} does I/O: {io}", file.display());
        }
    }
}

#[test]
fn no_two_source_files_share_a_name_across_stages() {
    // A file's name says its stage's part (docs/development.md): `memory.rs` twice, one the
    // evidence's and one the detectors', had a reader open the wrong one. A folder's `mod.rs`,
    // a crate's root and its unit tests' `tests.rs` are the exceptions.
    let mut seen: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for c in ["tracer", "tracer-analysis", "tracer-common", "tracer-model"] {
        let mut files = Vec::new();
        rust_files(&crate_root(c), &mut files);
        for f in files {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !["mod.rs", "lib.rs", "main.rs", "tests.rs"].contains(&name.as_str()) && !f.components().any(|p| p.as_os_str() == "bin") {
                seen.entry(name).or_default().push(f);
            }
        }
    }
    let twice: Vec<String> = seen.iter().filter(|(_, at)| at.len() > 1).map(|(n, at)| format!("{n}: {at:?}")).collect();
    assert!(seen.len() > 100, "the sources were read: {}", seen.len());
    assert!(twice.is_empty(), "file names used twice:\n{}", twice.join("\n"));
}

#[test]
fn a_cycle_between_two_files_of_a_folder_is_caught() {
    let dir = std::env::temp_dir().join(format!("gputrace-house-cycle-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("a")).expect("scratch");
    fs::write(dir.join("lib.rs"), "mod a;\nmod c;\n").expect("write");
    fs::write(dir.join("c.rs"), "use crate::a::x;\n").expect("write");
    fs::write(dir.join("a/mod.rs"), "mod x;\nmod y;\n").expect("write");
    fs::write(dir.join("a/x.rs"), "use super::y::Y;\nfn f() { crate::c::g() }\n").expect("write");
    fs::write(dir.join("a/y.rs"), "use super::{x::X, super::c};\n#[cfg(test)]\nmod tests { use crate::a::x; }\n").expect("write");
    let graphs = sibling_graphs(&dir);
    assert_eq!(graphs[&vec!["a".to_owned()]]["y"], ["x".to_owned()].into(), "{graphs:#?}");
    let cycles = cycles_in(&dir);
    assert_eq!(cycles.len(), 2, "x ↔ y inside a/, and a ↔ c at the top: {cycles:?}");
    let _ = fs::remove_dir_all(&dir);
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
    let firsts: BTreeSet<String> = paths(&code_of(&file)).into_iter().filter(|p| p[0] == "crate").map(|p| p[1].clone()).collect();
    assert_eq!(firsts, ["a", "e"].into_iter().map(String::from).collect());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_reader_of_paths_sees_groups_and_paths() {
    let code = "use crate::{a::x, b, c::{d, e::{f, g as h}}};\nlet v = crate::f::g(crate::h);\nuse super::{super::k, m};";
    let found: Vec<String> = paths(code).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(found, ["crate::a::x", "crate::b", "crate::c::d", "crate::c::e::f", "crate::c::e::g", "crate::f::g", "crate::h", "super::super::k", "super::m"], "{found:?}");
}
