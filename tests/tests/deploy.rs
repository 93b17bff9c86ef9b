//! The deployment files (`deploy/`): each parses, the systemd unit verifies, the DaemonSet and
//! the unit grant the same capabilities, and the dashboard and the alerts ask only for metrics
//! that `serve` exposes (the table of docs/serve.md, which `serve`'s own tests hold to).
use std::{collections::BTreeSet, path::PathBuf, process::Command};

use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Vec<Yaml> {
    let docs = YamlLoader::load_from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"));
    assert!(!docs.is_empty(), "{path} holds no document");
    docs
}

/// The metric names docs/serve.md lists (its table's first column), counters with `_total`.
fn documented_metrics() -> BTreeSet<String> {
    let doc = read("docs/serve.md");
    let mut names = BTreeSet::new();
    for line in doc.lines().filter(|l| l.starts_with("| `gputrace_")) {
        let first = line.split('|').nth(1).expect("a cell");
        names.extend(first.split('`').filter(|s| s.starts_with("gputrace_")).map(str::to_owned));
    }
    names
}

/// The `gputrace_…` names a PromQL expression reads.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("gputrace_") {
        let name: String = rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[i + name.len()..];
        out.push(name);
    }
    out
}

#[test]
fn every_yaml_parses_and_the_capabilities_agree() {
    for path in ["deploy/daemonset.yaml", "deploy/servicemonitor.yaml", "deploy/prometheus/gputrace-alerts.yaml"] {
        yaml(path);
    }
    let ds = yaml("deploy/daemonset.yaml").into_iter().find(|d| d["kind"].as_str() == Some("DaemonSet")).expect("a DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["capabilities"]["drop"][0].as_str(), Some("ALL"));
    let added: BTreeSet<String> = sc["capabilities"]["add"].as_vec().expect("capabilities").iter().map(|c| format!("CAP_{}", c.as_str().expect("a name"))).collect();
    assert!(!c["resources"]["requests"].is_badvalue() && !c["resources"]["limits"].is_badvalue(), "resources are set");
    let unit = read("deploy/gputrace.service");
    let bounding: BTreeSet<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("a bounding set")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(added, bounding, "the DaemonSet and the unit grant different capabilities");
    assert!(!bounding.contains("CAP_SYS_ADMIN"));
    // Each capability granted is explained in docs/serve.md.
    let doc = read("docs/serve.md");
    for cap in &bounding {
        assert!(doc.contains(&format!("`{cap}`")), "{cap} is not explained in docs/serve.md");
    }
}

#[test]
fn the_dashboard_and_the_alerts_read_only_served_metrics() {
    let served = documented_metrics();
    assert!(served.contains("gputrace_idle_gpu_holder_bytes") && served.contains("gputrace_sweeps_total"), "{served:?}");
    let dashboard: serde_json::Value = serde_json::from_str(&read("deploy/grafana/gputrace-dashboard.json")).expect("the dashboard is JSON");
    let mut exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    assert!(exprs.len() >= 6, "{exprs:?}");
    let alerts = yaml("deploy/prometheus/gputrace-alerts.yaml");
    let rules = alerts[0]["groups"][0]["rules"].as_vec().expect("rules");
    let names: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert!(names.contains(&"GpuIdleHolder") && names.contains(&"GpuJobInputStarved"), "{names:?}");
    exprs.extend(rules.iter().filter_map(|r| r["expr"].as_str().map(str::to_owned)));
    for expr in &exprs {
        for name in metrics_in(expr) {
            assert!(served.contains(&name), "{name} (in `{expr}`) is not a metric serve exposes");
        }
    }
    assert!(exprs.iter().any(|e| e.contains("gputrace_job_diagnosis_ratio")), "the dashboard shows each job's bottleneck");
}

#[test]
fn the_systemd_unit_verifies() {
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze is not installed here: the unit is not verified");
        return;
    };
    assert!(probe.status.success());
    // Verified against a binary that exists here; `man:` pages are not installed in CI.
    let unit = read("deploy/gputrace.service").replace("/usr/bin/gputrace", "/bin/true").replace("Documentation=man:gputrace-serve(1)\n", "");
    let dir = std::env::temp_dir().join(format!("gputrace-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("gputrace.service");
    std::fs::write(&path, unit).expect("written");
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().expect("systemd-analyze runs");
    let _ = std::fs::remove_dir_all(&dir);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}
