//! A validator for the JSON Schema keywords that our published schemas use (docs/schema/,
//! written by schemars from the report types), in place of the `jsonschema` crate: that crate
//! and its dependencies took ~60 s of CPU in every clean CI build (issue 55) to check a subset
//! this file covers in full. A keyword it does not know fails the check, so a schema that
//! starts using one cannot pass unchecked.

use serde_json::{Map, Value};

/// Every place `instance` breaks `schema` (whose `$defs` are `root`'s), as "path: what".
#[must_use]
pub fn violations(root: &Value, instance: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(root, root, instance, "", &mut out);
    out
}

/// Keywords that say nothing about validity.
const ANNOTATIONS: &[&str] = &["description", "default", "title", "$schema", "$defs", "examples", "deprecated", "readOnly", "writeOnly"];

fn check(root: &Value, schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let s = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return out.push(format!("{path}: nothing is allowed here")),
        Value::Object(s) => s,
        other => return out.push(format!("{path}: the schema is not an object: {other}")),
    };
    for (key, arg) in s {
        match key.as_str() {
            k if ANNOTATIONS.contains(&k) => {}
            "$ref" => match resolve(root, arg) {
                Some(target) => check(root, target, v, path, out),
                None => out.push(format!("{path}: unresolved $ref {arg}")),
            },
            "type" => {
                let types: Vec<&str> = match arg {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if !types.iter().any(|t| is_type(v, t)) {
                    out.push(format!("{path}: {} is not of type {arg}", short(v)));
                }
            }
            "format" => check_format(arg.as_str().unwrap_or(""), v, path, out),
            "minimum" => {
                if let (Some(x), Some(min)) = (v.as_f64(), arg.as_f64()) {
                    if x < min {
                        out.push(format!("{path}: {x} is below the minimum {min}"));
                    }
                }
            }
            "maximum" => {
                if let (Some(x), Some(max)) = (v.as_f64(), arg.as_f64()) {
                    if x > max {
                        out.push(format!("{path}: {x} is above the maximum {max}"));
                    }
                }
            }
            "const" => {
                if v != arg {
                    out.push(format!("{path}: {} is not {arg}", short(v)));
                }
            }
            "enum" => {
                if !arg.as_array().is_some_and(|a| a.contains(v)) {
                    out.push(format!("{path}: {} is none of {arg}", short(v)));
                }
            }
            "properties" | "required" | "additionalProperties" | "patternProperties" => {
                if key == "properties" {
                    if let Some(obj) = v.as_object() {
                        check_object(root, s, obj, path, out);
                    }
                }
            }
            "items" => {
                if let Some(items) = v.as_array() {
                    for (i, item) in items.iter().enumerate() {
                        check(root, arg, item, &format!("{path}/{i}"), out);
                    }
                }
            }
            "minItems" | "maxItems" => {
                if let (Some(a), Some(n)) = (v.as_array(), arg.as_u64()) {
                    let len = a.len() as u64;
                    if (key == "minItems" && len < n) || (key == "maxItems" && len > n) {
                        out.push(format!("{path}: {len} items breaks {key} {n}"));
                    }
                }
            }
            "anyOf" | "oneOf" | "allOf" => {
                let branches = arg.as_array().map(Vec::as_slice).unwrap_or_default();
                let passing = branches.iter().filter(|b| violations_under(root, b, v, path).is_empty()).count();
                let ok = match key.as_str() {
                    "anyOf" => passing >= 1,
                    "oneOf" => passing == 1,
                    _ => passing == branches.len(),
                };
                if !ok {
                    out.push(format!("{path}: {} matches {passing} of {} branches of {key}", short(v), branches.len()));
                }
            }
            other => out.push(format!("{path}: the schema uses `{other}`, which tests/src/schema_check.rs does not check")),
        }
    }
    // An object schema without `properties` still has its other object keywords checked.
    if !s.contains_key("properties") && (s.contains_key("required") || s.contains_key("additionalProperties") || s.contains_key("patternProperties")) {
        if let Some(obj) = v.as_object() {
            check_object(root, s, obj, path, out);
        }
    }
}

fn violations_under(root: &Value, schema: &Value, v: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    check(root, schema, v, path, &mut out);
    out
}

fn check_object(root: &Value, s: &Map<String, Value>, obj: &Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let properties = s.get("properties").and_then(Value::as_object);
    for name in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !obj.contains_key(name) {
            out.push(format!("{path}: `{name}` is required"));
        }
    }
    for (name, value) in obj {
        let at = format!("{path}/{name}");
        if let Some(p) = properties.and_then(|p| p.get(name)) {
            check(root, p, value, &at, out);
            continue;
        }
        let mut matched = false;
        for (pattern, p) in s.get("patternProperties").and_then(Value::as_object).into_iter().flatten() {
            match pattern.as_str() {
                // The one pattern schemars writes for maps keyed by numbers.
                r"^\d+$" => {
                    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
                        matched = true;
                        check(root, p, value, &at, out);
                    }
                }
                other => out.push(format!("{path}: pattern {other} is not one tests/src/schema_check.rs knows")),
            }
        }
        if matched {
            continue;
        }
        match s.get("additionalProperties") {
            None | Some(Value::Bool(true)) => {}
            Some(extra) => check(root, extra, value, &at, out),
        }
    }
}

fn resolve<'a>(root: &'a Value, reference: &Value) -> Option<&'a Value> {
    let pointer = reference.as_str()?.strip_prefix('#')?;
    root.pointer(pointer)
}

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|x| x.fract() == 0.0),
        _ => false,
    }
}

/// schemars' numeric formats: the value must fit the named type.
fn check_format(format: &str, v: &Value, path: &str, out: &mut Vec<String>) {
    let Some(x) = v.as_f64() else { return };
    let fits = match format {
        "uint64" | "uint" => v.is_u64(),
        "uint32" => v.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
        "int32" => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        "int64" | "int" => v.is_i64() || v.is_u64(),
        "double" | "float" => x.is_finite(),
        _ => return out.push(format!("{path}: format {format} is not one tests/src/schema_check.rs knows")),
    };
    if !fits {
        out.push(format!("{path}: {} is no {format}", short(v)));
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.char_indices().nth(77).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}
