//! The repository stands alone: every path a document, a comment or a script cites exists,
//! and nothing cites the team's shared folder outside the repository. And the schema check
//! every JSON report of these tests passes through can fail.
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// The text files of the repository: sources, docs, scripts, manifests.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "corpus" || name == "artifacts" {
            continue;
        }
        if path.is_dir() {
            text_files(&path, out);
        } else if ["rs", "md", "py", "sh", "toml"].iter().any(|x| name.ends_with(&format!(".{x}"))) {
            out.push(path);
        }
    }
}

/// Repository paths cited in `text`: `docs/…`, `validation/…`, `tracer/…` and the like,
/// ending in a file extension.
fn cited(text: &str) -> Vec<String> {
    const ROOTS: [&str; 10] = ["docs/", "validation/", "tracer/", "tracer-ebpf/", "tracer-common/", "tracer-model/", "tracer-analysis/", "tests/", "xtask/", "fuzz/"];
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for root in ROOTS {
        let mut from = 0;
        while let Some(i) = text[from..].find(root).map(|i| from + i) {
            from = i + root.len();
            // Only where the path starts: not inside a longer word or path.
            if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || b"/_-.".contains(&bytes[i - 1])) {
                continue;
            }
            let end = text[i..].find(|c: char| !(c.is_ascii_alphanumeric() || "/_.-".contains(c))).map_or(text.len(), |n| i + n);
            let path = text[i..end].trim_end_matches('.');
            // `fuzz_targets/NAME.rs`: a pattern, not a path.
            let placeholder = path.split('/').any(|part| part.split('.').next().is_some_and(|stem| stem.len() > 1 && stem.chars().all(|c| c.is_ascii_uppercase())));
            if [".md", ".rs", ".py", ".sh", ".toml", ".h", ".c"].iter().any(|x| path.ends_with(x)) && !path.contains('*') && !placeholder {
                out.push(path.to_owned());
            }
        }
    }
    out
}

#[test]
fn every_cited_path_exists_and_nothing_cites_outside_the_repository() {
    let root = root();
    let mut files = Vec::new();
    text_files(&root, &mut files);
    assert!(files.len() > 50, "found the sources: {}", files.len());
    let mut missing = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(&root).unwrap_or(file).display().to_string();
        if text.contains("../shared") && !rel.ends_with("tests/tests/docs.rs") {
            missing.push(format!("{rel} cites ../shared (copy what it needs into docs/)"));
        }
        for path in cited(&text) {
            if !root.join(&path).exists() {
                missing.push(format!("{rel} cites {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn citations_are_found_where_paths_start() {
    assert_eq!(cited("see docs/report.md, and `tracer/src/stacks/mod.rs:42`."), ["docs/report.md", "tracer/src/stacks/mod.rs"]);
    assert!(cited("a/docs/x.md and mydocs/y.md").is_empty());
}

#[test]
fn a_report_that_breaks_the_published_schema_is_caught() {
    // The check every JSON report of these tests goes through must be able to fail.
    let broken = serde_json::json!({"schema": "gputrace.report/1", "verdict": 5});
    assert!(std::panic::catch_unwind(|| gputrace_tests::assert_valid(&broken)).is_err());
    let sweep = serde_json::json!({"schema": "gputrace.sweep/1"});
    assert!(std::panic::catch_unwind(|| gputrace_tests::assert_valid(&sweep)).is_err(), "required fields missing");
}

/// The schema check that every report of these tests passes through
/// (`gputrace_tests::schema_check`, in place of the `jsonschema` crate): each keyword it
/// knows rejects what it forbids, and a keyword it does not know fails the check.
#[test]
fn each_keyword_catches_what_it_forbids() {
    let schema = serde_json::json!({
        "$defs": {"Kind": {"type": "string", "enum": ["a", "b"]}},
        "type": "object",
        "required": ["n", "kind"],
        "properties": {
            "n": {"type": "integer", "format": "uint32", "minimum": 0},
            "x": {"type": ["number", "null"], "format": "double"},
            "kind": {"$ref": "#/$defs/Kind"},
            "list": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "one": {"oneOf": [{"const": 1}, {"const": 2}]},
            "map": {"type": "object", "patternProperties": {r"^\d+$": {"type": "boolean"}}, "additionalProperties": false}
        }
    });
    assert!(gputrace_tests::schema_check::violations(&schema, &serde_json::json!({"n": 3, "kind": "a", "x": null, "list": ["p"], "one": 2, "map": {"12": true}})).is_empty());
    let bad = serde_json::json!({"n": -1, "kind": "c", "x": "s", "list": ["p", "q", 3], "one": 5, "map": {"k": true, "7": 1}});
    let v = gputrace_tests::schema_check::violations(&schema, &bad);
    for what in ["/n", "/kind", "/x", "/list: 3 items", "/list/2", "/one", "/map/k", "/map/7"] {
        assert!(v.iter().any(|m| m.contains(what)), "{what} in {v:#?}");
    }
    assert!(gputrace_tests::schema_check::violations(&schema, &serde_json::json!({"kind": "a"})).iter().any(|m| m.contains("`n` is required")));
    assert!(gputrace_tests::schema_check::violations(&serde_json::json!({"pattern": "x"}), &serde_json::json!("y")).iter().any(|m| m.contains("does not check")), "an unknown keyword fails");
    assert!(!gputrace_tests::schema_check::violations(&serde_json::json!({"type": "integer", "format": "uint32"}), &serde_json::json!(5_000_000_000_u64)).is_empty());
}
