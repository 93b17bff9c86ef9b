//! The published JSON Schemas of `gputrace.report/1` and `gputrace.sweep/1`
//! (`docs/schema/`), generated from the report types themselves; a test fails when the files
//! and the types disagree, and says how to write the files again.

use serde_json::Value;

/// The schema of a trace report (`attach`, `run`, `record`, `report`).
#[must_use]
pub fn report() -> Value {
    serde_json::to_value(schemars::schema_for!(crate::model::Report)).unwrap_or(Value::Null)
}

/// The schema of a sweep report.
#[must_use]
pub fn sweep() -> Value {
    serde_json::to_value(schemars::schema_for!(crate::sweep::model::SweepReport)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set to write the files instead of checking them (after changing a report type).
    const WRITE: &str = "GPUTRACE_WRITE_SCHEMA";

    fn check(generated: &Value, file: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schema").join(file);
        let text = serde_json::to_string_pretty(generated).expect("a schema serializes") + "\n";
        if std::env::var_os(WRITE).is_some() {
            std::fs::write(&path, &text).expect("writing the schema");
            return;
        }
        let published = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            published == text,
            "{} differs from the report types: run `{WRITE}=1 cargo test -p gputrace --lib report::schema` and commit it",
            path.display()
        );
    }

    #[test]
    fn the_published_schemas_are_the_report_types() {
        check(&report(), "report-1.json");
        check(&sweep(), "sweep-1.json");
    }
}
