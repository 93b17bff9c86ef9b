//! How bad a diagnosis is: a leaf type that the detectors, the sweep and the reports share.

use serde::{Deserialize, Serialize};

/// Ordered from the worst: `High < Medium < Low < Info` sorts the worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// The worst: act on it first (`high`; a report's diagnosis with an `impact` of 0.25 or more).
    High,
    /// Worth fixing (`medium`; an `impact` of 0.10 or more).
    Medium,
    /// Minor, or seen on thin evidence (`low`; an `impact` of 0.03 or more).
    Low,
    /// Below that, or a fact worth knowing rather than a loss (`info`).
    Info,
}

impl Severity {
    /// The name the JSON reports use (`high`, `medium`, `low`, `info`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::High => "high",
            Self::Medium => "medium",
            Self::Low => "low",
            Self::Info => "info",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tests and scripts compare with the JSON names.
impl PartialEq<&str> for Severity {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_keep_their_json_names() {
        for s in [Severity::High, Severity::Medium, Severity::Low, Severity::Info] {
            assert_eq!(serde_json::to_value(s).expect("serializes"), serde_json::json!(s.as_str()));
            assert_eq!(serde_json::from_value::<Severity>(serde_json::json!(s.as_str())).expect("reads back"), s);
        }
        assert!(Severity::High < Severity::Info);
    }
}
