//! Multi-GPU on the fake NCCL (tests/fake-cuda/libnccl.c): two ranks of one job, started as
//! torchrun starts them (`fakejob --ranks 2`), each all-reducing once a step. Exact counts and
//! bytes per collective and per rank, a planted straggler named with its own cause, and a
//! healthy pair and a job without NCCL that get no multi-GPU diagnosis.
use std::os::unix::process::CommandExt as _;

use gputrace_tests::{require_root, run_fakejob, run_fakejob_opts};
use serde_json::Value;

const STEPS: u64 = 300;
const BYTES: u64 = 1 << 20;

/// `fakejob --ranks 2`, each rank `host_us` of host work a step (the last rank
/// `straggler_us`), 5 kernels of 200 µs and one all-reduce of `BYTES`, then a sync.
fn two_ranks(host_us: u64, straggler_us: u64) -> Value {
    let (host, straggler, steps, bytes) = (host_us.to_string(), straggler_us.to_string(), STEPS.to_string(), BYTES.to_string());
    let (r, code, stderr) = run_fakejob(&[
        "--ranks",
        "2",
        // Each process's libraries are found within 200 ms of its loading them; a real job's
        // imports and set-up take longer than that before its first collective.
        "--settle-ms",
        "500",
        "--steps",
        &steps,
        "--driver-launches",
        "5",
        "--kernel-us",
        "200",
        "--host-us",
        &host,
        "--straggler-host-us",
        &straggler,
        "--allreduce-bytes",
        &bytes,
    ]);
    assert_eq!(code, 0, "{stderr}");
    r
}

fn ids(r: &Value) -> Vec<String> {
    r["diagnoses"].as_array().expect("diagnoses").iter().map(|d| d["id"].as_str().unwrap_or_default().to_owned()).collect()
}

#[test]
fn two_ranks_have_exact_collectives_and_a_healthy_pair_no_multi_gpu_diagnosis() {
    require_root();
    let r = two_ranks(1000, 1000);
    let n = &r["nccl"];
    assert_eq!(n["calls"].as_u64(), Some(2 * STEPS), "{n:#}");
    let all_reduce = &n["by_op"]["allreduce"];
    assert_eq!(all_reduce["count"].as_u64(), Some(2 * STEPS), "{n:#}");
    assert_eq!(all_reduce["bytes"].as_u64(), Some(2 * STEPS * BYTES), "float32 count × 4 bytes: {n:#}");
    assert_eq!(n["by_op"].as_object().map(serde_json::Map::len), Some(1), "only all-reduce: {n:#}");
    let ranks = n["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2, "{n:#}");
    for (i, rank) in ranks.iter().enumerate() {
        assert_eq!(rank["rank"].as_u64(), Some(i as u64), "{rank:#}");
        assert_eq!(rank["world_size"].as_u64(), Some(2));
        assert_eq!(rank["local_rank"].as_u64(), Some(i as u64), "LOCAL_RANK from its environment: {rank:#}");
        assert_eq!(rank["gpu"], i.to_string(), "no CUDA_VISIBLE_DEVICES: GPU LOCAL_RANK");
        assert_eq!(rank["calls"].as_u64(), Some(STEPS));
        assert_eq!(rank["bytes"].as_u64(), Some(STEPS * BYTES));
        assert_eq!(rank["launches"].as_u64(), Some(5 * STEPS), "{rank:#}");
    }
    // Each waits for its own GPU, the same; neither for the other.
    let waits: Vec<f64> = ranks.iter().map(|r| r["wait_share"].as_f64().expect("wait_share")).collect();
    assert!((waits[0] - waits[1]).abs() < 0.1, "{waits:?}");
    let found = ids(&r);
    assert!(!found.iter().any(|id| id == "straggler" || id == "comm-bound"), "{found:?}: {:#}", r["diagnoses"]);
}

#[test]
fn a_rank_whose_host_phase_is_three_times_longer_is_named_the_straggler_with_its_cause() {
    require_root();
    let r = two_ranks(1000, 3000);
    let d = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "straggler").cloned();
    let d = d.unwrap_or_else(|| panic!("no straggler: {:#} {:#}", r["diagnoses"], r["nccl"]));
    let summary = d["summary"].as_str().unwrap_or_default();
    // Rank 1 computes on its host three times as long: its own verdict is host-bound.
    assert!(summary.starts_with("rank 1 "), "{summary}");
    assert!(summary.contains("host-bound"), "{summary}");
    let ranks = r["nccl"]["ranks"].as_array().expect("ranks");
    assert_eq!(ranks[1]["verdict"], "host-bound", "{:#}", r["nccl"]);
    // Rank 0 waits for it: far more than rank 1 waits for anything.
    let wait = |i: usize| ranks[i]["wait_share"].as_f64().expect("wait_share");
    assert!(wait(0) > wait(1) + 0.2, "{:#}", r["nccl"]);
    // The step is 2 ms longer on rank 1 than rank 0's host work: about that much of rank 0's
    // step goes waiting; the diagnosis claims the others' excess wait, at most.
    let impact = d["impact"].as_f64().expect("impact");
    assert!(impact > 0.3 && impact <= wait(0) - wait(1) + 1e-9, "{d:#}");
    assert!(d["fix"].as_str().is_some_and(|f| f.contains("rank 1") && f.contains("--pid")), "{d:#}");
    // The promise, against the fixed twin: rank 1 with the others' host phase.
    let promised = d["saving"]["steps_per_s_after"].as_f64().unwrap_or_else(|| panic!("no steps/s after: {d:#}"));
    let twin = two_ranks(1000, 1000);
    let measured = twin["steps"]["per_second"].as_f64().unwrap_or_else(|| panic!("the twin has no steps: {:#}", twin["steps"]));
    assert!((promised / measured - 1.0).abs() < 0.15, "promised {promised:.0} steps/s, the fixed twin ran {measured:.0}");
}

#[test]
fn without_return_probes_the_collectives_are_counted_and_said_to_be() {
    require_root();
    let (r, code, stderr) = run_fakejob_opts(
        &["--entry-only"],
        &["--ranks", "2", "--settle-ms", "500", "--steps", "200", "--driver-launches", "5", "--kernel-us", "100", "--host-us", "500", "--allreduce-bytes", "4096"],
    );
    assert_eq!(code, 0, "{stderr}");
    let n = &r["nccl"];
    assert_eq!(n["counted_only"], true, "{n:#}");
    assert_eq!(n["calls"].as_u64(), Some(400), "every rank's all-reduces, from the counters: {n:#}");
    assert_eq!(n["by_op"]["allreduce"]["count"].as_u64(), Some(400), "{n:#}");
    assert_eq!(n["by_op"]["allreduce"]["bytes"].as_u64(), Some(0), "bytes are not known without the call records: {n:#}");
    let ranks = n["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2, "{n:#}");
    for rank in ranks {
        assert_eq!(rank["calls"].as_u64(), Some(200), "{rank:#}");
        assert_eq!(rank["launches"].as_u64(), Some(1000), "{rank:#}");
        assert!(rank["rank"].is_null() && rank["wait_share"].is_null(), "{rank:#}");
    }
    assert!(!ids(&r).iter().any(|id| id == "straggler" || id == "comm-bound"), "{:?}", ids(&r));
}

#[test]
fn a_job_without_nccl_reports_none() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "50", "--driver-launches", "5", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(r["nccl"].is_null(), "{:#}", r["nccl"]);
    let found = ids(&r);
    assert!(!found.iter().any(|id| id == "straggler" || id == "comm-bound"), "{found:?}");
}

/// `fakejob --ranks 2 ARGS` under `gputrace run` with the fake NVML describing a Gen4 x16 link.
fn two_ranks_on_gen4(args: &[&str]) -> Value {
    two_ranks_with_nvml(&[], args)
}

/// As [`two_ranks_on_gen4`], with `env` set for the fake NVML and NCCL too.
fn two_ranks_with_nvml(env: &[(&str, &str)], args: &[&str]) -> Value {
    let nvml = gputrace_tests::FakeNvml::new();
    let mut command = std::process::Command::new(gputrace_tests::gputrace());
    command.envs(env.iter().copied());
    nvml.apply(&mut command).env("FAKE_NVML_PCIE", "4,4,16,16").args(["run", "--json", "--"]).arg(gputrace_tests::fakejob());
    command.args(["--ranks", "2", "--settle-ms", "500", "--steps", "300", "--host-us", "200"]).args(args);
    let out = command.output().expect("gputrace runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    gputrace_tests::report_json(&out.stdout)
}

/// Even ranks whose all-reduce of 32 MiB a step takes longer on the link (25 GB/s in the fake
/// NCCL; NVML says Gen4 x16) than their host work and kernels: every rank waits after its
/// collectives, and the bytes explain the wait. The same ranks waiting as long for their
/// kernels, with 1 MiB to all-reduce, are not.
#[test]
fn even_ranks_that_wait_for_their_bytes_on_the_link_are_comm_bound() {
    require_root();
    let r = two_ranks_on_gen4(&["--driver-launches", "2", "--kernel-us", "50", "--allreduce-bytes", "33554432"]);
    let d = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "comm-bound").cloned();
    let d = d.unwrap_or_else(|| panic!("no comm-bound: {:#} {:#}", r["diagnoses"], r["nccl"]));
    assert!(d["impact"].as_f64().is_some_and(|i| i > 0.3), "{d:#}");
    assert!(!ids(&r).iter().any(|id| id == "straggler"), "{:?}", ids(&r));
    assert!(d["saving"]["speedup"].is_null(), "no promise the host cannot back: {d:#}");

    let compute = two_ranks_on_gen4(&["--driver-launches", "2", "--kernel-us", "700", "--allreduce-bytes", "1048576"]);
    let waits: Vec<f64> = compute["nccl"]["ranks"].as_array().expect("ranks").iter().map(|r| r["wait_share"].as_f64().expect("wait")).collect();
    assert!(waits.iter().all(|w| *w > 0.5), "they wait as long, for their kernels: {waits:?}");
    assert!(!ids(&compute).iter().any(|id| id == "comm-bound" || id == "straggler"), "{:?}", ids(&compute));
}

/// The same bytes over two NVLink links (NVML says so; the fake NCCL moves 50 GB/s, what two
/// links carry): the collectives' rate is the links', not the PCIe link's. Slow enough here to
/// bound the step, and said so with the links named.
#[test]
fn ranks_on_nvlink_are_judged_by_the_links_rate() {
    require_root();
    let env = [("FAKE_NVML_NVLINKS", "2"), ("FAKE_NCCL_BYTES_PER_US", "50000")];
    let r = two_ranks_with_nvml(&env, &["--driver-launches", "2", "--kernel-us", "50", "--allreduce-bytes", "67108864"]);
    assert_eq!(r["gpu"]["devices"][0]["nvlinks_active"].as_u64(), Some(2), "{:#}", r["gpu"]["devices"][0]);
    let d = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "comm-bound").cloned();
    let d = d.unwrap_or_else(|| panic!("no comm-bound: {:#} {:#}", r["diagnoses"], r["nccl"]));
    assert!(d["evidence"].to_string().contains("2 NVLink links (NVML), at 25 GB/s each assumed, 50.0 GB/s"), "{d:#}");
    // A quarter of the bytes beside kernels that take longer than they do: the ranks wait
    // for their kernels, not the links.
    let light = two_ranks_with_nvml(&env, &["--driver-launches", "2", "--kernel-us", "600", "--allreduce-bytes", "16777216"]);
    assert!(!ids(&light).iter().any(|id| id == "comm-bound"), "{:?}: {:#}", ids(&light), light["nccl"]);
}

/// `attach --pid` on the launcher of ranks already running (as on `torchrun`'s pid): every
/// rank is followed, each named by its placement from its environment; their communicators
/// were made before the trace, so their rank numbers are unknown and said so (null).
#[test]
fn attaching_to_a_running_launcher_follows_every_rank() {
    require_root();
    let mut job = std::process::Command::new(gputrace_tests::fakejob())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        // A group of its own, so that the ranks go with the launcher at the end.
        .process_group(0)
        .args(["--ranks", "2", "--steps", "4000", "--driver-launches", "5", "--kernel-us", "200", "--host-us", "1000", "--allreduce-bytes", "1048576"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("fakejob starts");
    // The ranks are set up and all-reducing well before this.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = std::process::Command::new(gputrace_tests::gputrace())
        .args(["attach", "--json", "--nvml-hz", "0", "--duration", "2", "--pid", &job.id().to_string()])
        .output()
        .expect("gputrace runs");
    let _ = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{}", job.id())]).status();
    let _ = job.wait();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = gputrace_tests::report_json(&out.stdout);
    let ranks = r["nccl"]["ranks"].as_array().unwrap_or_else(|| panic!("no ranks: {:#}", r["nccl"]));
    assert_eq!(ranks.len(), 2, "{:#}", r["nccl"]);
    let mut local: Vec<u64> = ranks.iter().map(|r| r["local_rank"].as_u64().unwrap_or(99)).collect();
    local.sort_unstable();
    assert_eq!(local, [0, 1], "{:#}", r["nccl"]);
    for rank in ranks {
        assert!(rank["rank"].is_null(), "the communicator was made before the trace: {rank:#}");
        // About 2 s of steps of ~2 ms each, every one with its all-reduce.
        assert!(rank["calls"].as_u64().is_some_and(|n| n > 300), "{rank:#}");
    }
}
