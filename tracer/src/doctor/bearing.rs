//! The doctor's GPU checks in a report, where they bear on what it found (issue 35): the same
//! rules as `gputrace doctor` (`gpu::judge`), judged on what the session saw rather than on one
//! reading of the moment:
//! - the PCIe link as it ran while the GPU worked, against the most card and slot can do;
//! - the clock throttle reasons active in a good share of the window's readings;
//! - the other processes beside the job: those that computed, those that held memory;
//! - the CPUs the job may run on against the GPU's NUMA node.
//!
//! A warning is said only beside a diagnosis it explains or makes worse (a narrow link beside
//! slow copies, hot clocks beside a GPU-bound job); `gputrace doctor` says the rest.

use super::{
    gpu::{self, DeviceFacts, GpuFacts, JobFacts, Pcie},
    Status,
};
use crate::{
    detect::{diagnoses, Bearing},
    discover::cpus::CpuPlacement,
    model::{Diagnosis, DiagnosisId, GpuDevice},
};

/// A throttle reason is the window's when active in at least this share of its readings.
const THROTTLED_SHARE: f64 = 0.2;

/// Throttle reasons that hold a working GPU below its clocks. The power cap is left out: a
/// saturated GPU runs at its cap by design.
const SLOWDOWNS: [(&str, u64); 4] = [("hw-slowdown", 0x8), ("sw-thermal-slowdown", 0x20), ("hw-thermal-slowdown", 0x40), ("hw-power-brake-slowdown", 0x80)];

/// The diagnoses whose definitions say that `bearing` bears on them.
fn bearing_on(bearing: Bearing) -> Vec<DiagnosisId> {
    diagnoses::ALL.iter().filter(|d| d.bears_on.contains(&bearing)).map(|d| d.id).collect()
}

/// What the session saw of the job's device and of its placement.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// The device the job ran on.
    pub device: &'a GpuDevice,
    /// The traced job's pid (its process tree's root).
    pub target_pid: u32,
    /// The CPUs the job may run on and the machine's NUMA nodes; None where not known.
    pub placement: Option<&'a CpuPlacement>,
    /// The report is of a live session: the processes NVML names are this host's now (a
    /// recording's pids name whatever runs under them where it is read).
    pub live: bool,
}

/// One note per warning that bears on a diagnosis found, naming the diagnoses.
#[must_use]
pub fn notes(found: &[Diagnosis], seen: &Seen<'_>) -> Vec<String> {
    let mut notes = Vec::new();
    let mut say = |check: &super::Check, ids: &[DiagnosisId]| {
        let hit: Vec<&str> = found.iter().filter(|d| ids.contains(&d.id)).map(|d| d.id.as_str()).collect();
        if matches!(check.status, Status::Warn | Status::Fail) && !hit.is_empty() {
            notes.push(format!("{} (the `{}` check of gputrace doctor, bearing on {})", check.detail, check.name, hit.join(", ")));
        }
    };
    let checks = gpu::judge(&facts(seen, |_| false));
    for (name, bearing) in [("pcie-link", Bearing::PcieLink), ("numa", Bearing::Numa), ("clocks", Bearing::Clocks)] {
        if bearing == Bearing::Numa && !off_node(seen) {
            continue;
        }
        if let Some(check) = checks.iter().find(|c| c.name == name) {
            say(check, &bearing_on(bearing));
        }
    }
    // NVML names host pids: where none is the job's (a container's own pid namespace), the
    // job's own processes would read as others; and a recording's pids are not this host's.
    if !seen.live || !seen.device.processes.iter().any(|p| p.traced) {
        return notes;
    }
    let computing = gpu::judge(&facts(seen, |p| p.sm_util_pct.is_some_and(|u| u > 0.0)));
    let holding = gpu::judge(&facts(seen, |p| p.memory_bytes.is_some_and(|b| b > 0)));
    let others = |checks: &[super::Check]| checks.iter().find(|c| c.name == "other-processes").cloned();
    if let Some(check) = others(&computing) {
        say(&check, &bearing_on(Bearing::OthersComputing));
    }
    if let Some(check) = others(&holding) {
        say(&check, &bearing_on(Bearing::OthersHolding));
    }
    notes
}

/// Whether none of the CPUs the job may run on is on the GPU's node. A job allowed on every
/// CPU of a two-socket machine may well run near its GPU: the doctor warns of it, a report
/// does not charge a diagnosis to it without the job held away from the GPU.
fn off_node(seen: &Seen<'_>) -> bool {
    let (Some(p), Some(node)) = (seen.placement, seen.device.numa_node) else { return false };
    let local = p.nodes.get(&node).map_or(&[][..], Vec::as_slice);
    !p.cpus.is_empty() && !p.cpus.iter().any(|c| local.contains(c))
}

/// The doctor's facts of what the session saw, with the other processes `keep` lets through.
fn facts(seen: &Seen<'_>, keep: impl Fn(&crate::model::GpuProcess) -> bool) -> GpuFacts {
    let d = seen.device;
    let pcie = match (d.pcie_under_load, d.pcie_max_gen, d.pcie_max_width) {
        (Some(link), Some(max_gen), Some(max_width)) => Some(Pcie { gen: link.gen, max_gen, width: link.width, max_width }),
        _ => None,
    };
    let throttle = d
        .throttle_reasons
        .iter()
        .filter(|t| t.fraction >= THROTTLED_SHARE)
        .filter_map(|t| SLOWDOWNS.iter().find(|(name, _)| *name == t.reason).map(|(_, bit)| bit))
        .fold(0, |bits, bit| bits | bit);
    let device = DeviceFacts {
        index: d.index,
        name: d.name.clone(),
        pcie,
        // Under load by construction: the link was read while the GPU worked.
        busy_pct: Some(100),
        numa_node: d.numa_node,
        throttle: Some(throttle),
        persistence: None,
        mig: None,
        processes: d.processes.iter().filter(|p| !p.traced && keep(p)).map(|p| (p.pid, p.memory_bytes)).collect(),
    };
    let traced: Vec<u32> = d.processes.iter().filter(|p| p.traced).map(|p| p.pid).chain([seen.target_pid]).collect();
    GpuFacts {
        no_nvml: None,
        driver: None,
        cuda_driver: None,
        devices: vec![device],
        nodes: seen.placement.map(|p| p.nodes.clone()).unwrap_or_default(),
        job: Some(JobFacts { pid: seen.target_pid, tree: traced, cpus: seen.placement.map(|p| p.cpus.clone()), runtime: None }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuProcess, PcieLink, ThrottleSeen};

    fn diagnosis(id: DiagnosisId) -> Diagnosis {
        Diagnosis {
            id,
            severity: crate::severity::Severity::High,
            impact: 0.5,
            summary: String::new(),
            evidence: Vec::new(),
            fix: String::new(),
            bucket: None,
            saving: None,
            sites: Vec::new(),
        }
    }

    fn device() -> GpuDevice {
        serde_json::from_value(serde_json::json!({
            "index": 0, "uuid": "GPU-0", "name": "H200", "memory_used_bytes": 0, "memory_total_bytes": 0,
            "utilization_gpu_pct": null, "utilization": null, "utilization_source": "", "sm_activity_pct": null,
            "tensor_activity_pct": null, "target_memory_bytes": null, "pci_bus_id": "", "memory_util_pct": null,
            "sm_occupancy_pct": null, "power_w": null, "sm_clock_mhz": null, "pcie_rx_mb_s": null, "pcie_tx_mb_s": null,
            "throttle_reasons": [], "processes": [], "target_sm_util_pct": null, "visible_to_target": null,
            "pcie_max_gen": 5, "pcie_max_width": 16
        }))
        .expect("a device")
    }

    fn seen(device: &GpuDevice, placement: Option<&CpuPlacement>) -> Vec<String> {
        let found = [DiagnosisId::PageableCopy, DiagnosisId::GpuBound, DiagnosisId::HostBound, DiagnosisId::Oom].map(diagnosis);
        notes(&found, &Seen { device, target_pid: 10, placement, live: true })
    }

    #[test]
    fn a_sound_machine_adds_no_note() {
        let mut d = device();
        d.pcie_under_load = Some(PcieLink { gen: 5, width: 16 });
        d.numa_node = Some(0);
        let placement = CpuPlacement { cpus: (0..8).collect(), nodes: [(0, (0..8).collect()), (1, (8..16).collect())].into_iter().collect() };
        d.processes = vec![GpuProcess { pid: 10, traced: true, memory_bytes: Some(1 << 30), sm_util_pct: Some(90.0) }];
        d.throttle_reasons = vec![ThrottleSeen { reason: "sw-power-cap".into(), fraction: 0.9 }];
        assert_eq!(seen(&d, Some(&placement)), Vec::<String>::new());
        assert_eq!(seen(&device(), None), Vec::<String>::new(), "nothing read, nothing said");
    }

    #[test]
    fn a_link_trained_down_under_load_is_said_beside_the_copies() {
        let mut d = device();
        d.pcie_under_load = Some(PcieLink { gen: 3, width: 8 });
        let notes = seen(&d, None);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("Gen3 x8 of Gen5 x16") && notes[0].contains("bearing on pageable-copy"), "{}", notes[0]);
        let only_gpu_bound = notes_for(&d, &[DiagnosisId::GpuBound]);
        assert!(only_gpu_bound.is_empty(), "a narrow link does not bear on a GPU-bound job: {only_gpu_bound:?}");
    }

    fn notes_for(d: &GpuDevice, ids: &[DiagnosisId]) -> Vec<String> {
        let found: Vec<Diagnosis> = ids.iter().map(|&id| diagnosis(id)).collect();
        notes(&found, &Seen { device: d, target_pid: 10, placement: None, live: true })
    }

    #[test]
    fn hot_clocks_bear_on_a_gpu_bound_job_and_a_passing_one_does_not() {
        let mut d = device();
        d.throttle_reasons = vec![ThrottleSeen { reason: "hw-thermal-slowdown".into(), fraction: 0.5 }];
        let notes = notes_for(&d, &[DiagnosisId::GpuBound]);
        assert!(notes.len() == 1 && notes[0].contains("thermal") && notes[0].contains("gpu-bound"), "{notes:?}");
        d.throttle_reasons[0].fraction = 0.05;
        assert!(notes_for(&d, &[DiagnosisId::GpuBound]).is_empty(), "a passing slowdown");
        assert!(notes_for(&d, &[DiagnosisId::HostBound]).is_empty(), "clocks do not bear on host time");
    }

    #[test]
    fn others_that_compute_bear_on_gpu_time_and_others_that_hold_on_memory() {
        let mut d = device();
        d.processes = vec![
            GpuProcess { pid: 10, traced: true, memory_bytes: Some(1 << 30), sm_util_pct: Some(50.0) },
            GpuProcess { pid: 77, traced: false, memory_bytes: Some(20 << 30), sm_util_pct: Some(0.0) },
        ];
        assert!(notes_for(&d, &[DiagnosisId::GpuBound]).is_empty(), "an idle holder takes no GPU time");
        let oom = notes_for(&d, &[DiagnosisId::Oom]);
        assert!(oom.len() == 1 && oom[0].contains("77") && oom[0].contains("bearing on oom"), "{oom:?}");
        let found = [diagnosis(DiagnosisId::Oom)];
        assert!(notes(&found, &Seen { device: &d, target_pid: 10, placement: None, live: false }).is_empty(), "a recording's pids are not this host's");
        let mut container = d.clone();
        container.processes[0].traced = false;
        assert!(notes_for(&container, &[DiagnosisId::Oom]).is_empty(), "no process known as the job's: its own would read as others");
        d.processes[1].sm_util_pct = Some(40.0);
        let busy = notes_for(&d, &[DiagnosisId::GpuBound]);
        assert!(busy.len() == 1 && busy[0].contains("77"), "{busy:?}");
    }

    #[test]
    fn a_job_on_the_other_node_is_said_beside_host_time() {
        let mut d = device();
        d.numa_node = Some(1);
        let placement = CpuPlacement { cpus: (0..8).collect(), nodes: [(0, (0..8).collect()), (1, (8..16).collect())].into_iter().collect() };
        let found = [diagnosis(DiagnosisId::LaunchBound)];
        let notes = notes(&found, &Seen { device: &d, target_pid: 10, placement: Some(&placement), live: true });
        assert!(notes.len() == 1 && notes[0].contains("numactl --cpunodebind=1") && notes[0].contains("launch-bound"), "{notes:?}");
        let unpinned = CpuPlacement { cpus: (0..16).collect(), ..placement };
        let said = super::notes(&found, &Seen { device: &d, target_pid: 10, placement: Some(&unpinned), live: true });
        assert!(said.is_empty(), "a job free to run near its GPU: {said:?}");
    }
}
