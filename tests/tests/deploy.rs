//! The deployment files (`deploy/`): each parses, the systemd unit verifies, the DaemonSet and
//! the unit grant the same capabilities, the dashboard and the alerts ask only for metrics
//! that `serve` exposes (the table of docs/serve.md, which `serve`'s own tests hold to), and
//! only loopback (the unit) or the scraper (the DaemonSet's `NetworkPolicy`) reaches the port.
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
    for path in ["deploy/daemonset.yaml", "deploy/servicemonitor.yaml", "deploy/networkpolicy.yaml", "deploy/prometheus/gputrace-alerts.yaml"] {
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

/// The words of a command line: the unit's `ExecStart=` or a container's `args`.
fn flag<'a>(args: &[&'a str], name: &str) -> Option<&'a str> {
    args.iter().position(|a| *a == name).and_then(|i| args.get(i + 1).copied())
}

#[test]
fn only_loopback_or_the_scraper_reaches_the_metrics() {
    // The unit: the loopback address, and no whole command lines.
    let unit = read("deploy/gputrace.service");
    let exec: Vec<&str> = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart").split_whitespace().collect();
    let listen: std::net::SocketAddr = flag(&exec, "--listen").expect("--listen").parse().expect("IP:PORT");
    assert!(listen.ip().is_loopback(), "the unit serves every user's processes on {listen}");
    assert!(!exec.contains(&"--full-command"), "{exec:?}");

    // The DaemonSet: the pod's address, its port reached only from the scraper's pods.
    let ds = yaml("deploy/daemonset.yaml").into_iter().find(|d| d["kind"].as_str() == Some("DaemonSet")).expect("a DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"].as_vec().expect("args").iter().map(|a| a.as_str().expect("a word")).collect();
    assert!(!args.contains(&"--full-command") && !args.contains(&"--publish-full-command-to-network"), "{args:?}");
    let port = c["ports"][0]["containerPort"].as_i64().expect("a port");
    let np = yaml("deploy/networkpolicy.yaml").into_iter().find(|d| d["kind"].as_str() == Some("NetworkPolicy")).expect("a NetworkPolicy");
    assert_eq!(np["metadata"]["namespace"], ds["metadata"]["namespace"], "the policy must live beside the pods");
    // It selects the DaemonSet's pods (a selector of no labels would select every pod).
    let selected = np["spec"]["podSelector"]["matchLabels"].as_hash().expect("matchLabels");
    let labels = ds["spec"]["template"]["metadata"]["labels"].as_hash().expect("the pods' labels");
    assert!(!selected.is_empty() && selected.iter().all(|(k, v)| labels.get(k) == Some(v)), "{selected:?} against {labels:?}");
    let types: Vec<&str> = np["spec"]["policyTypes"].as_vec().expect("policyTypes").iter().filter_map(Yaml::as_str).collect();
    assert!(types.contains(&"Ingress"), "{types:?}");
    let rules = np["spec"]["ingress"].as_vec().expect("ingress rules");
    assert!(!rules.is_empty());
    for rule in rules {
        // No `from` (or an empty one) lets everyone in; nor may a peer be an address block or
        // a selector of no labels.
        let from = rule["from"].as_vec().unwrap_or_else(|| panic!("a rule without `from` admits everyone: {rule:?}"));
        assert!(!from.is_empty(), "{rule:?}");
        for peer in from {
            assert!(peer["ipBlock"].is_badvalue(), "{peer:?}");
            for selector in ["namespaceSelector", "podSelector"] {
                let labels = peer[selector]["matchLabels"].as_hash().unwrap_or_else(|| panic!("{selector} with labels: {peer:?}"));
                assert!(!labels.is_empty(), "an empty {selector} selects everything: {peer:?}");
            }
        }
        let ports: Vec<i64> = rule["ports"].as_vec().expect("ports").iter().map(|p| p["port"].as_i64().expect("a number")).collect();
        assert_eq!(ports, [port], "only the metrics port");
    }
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
