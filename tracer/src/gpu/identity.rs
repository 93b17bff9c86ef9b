//! Which GPUs the job can see. CUDA and NVML number devices differently: CUDA orders them
//! fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`, NVML by PCI bus, and
//! `CUDA_VISIBLE_DEVICES` renumbers what CUDA shows. UUIDs are the one common name.

use super::DeviceInfo;
use crate::model::CudaEnv;

/// The CUDA device variables of `pid`'s environment (its initial one: a later `os.environ`
/// change is not seen); none where the process is gone or not ours to read.
#[must_use]
pub fn cuda_env_of(pid: u32) -> CudaEnv {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    parse_cuda_env(&env)
}

/// The CUDA device variables of an environment block (`NAME=value` entries, NUL apart).
#[must_use]
pub fn parse_cuda_env(environ: &[u8]) -> CudaEnv {
    let mut out = CudaEnv::default();
    for var in environ.split(|b| *b == 0) {
        let var = String::from_utf8_lossy(var);
        if let Some(v) = var.strip_prefix("CUDA_VISIBLE_DEVICES=") {
            out.visible_devices = Some(v.to_owned());
        } else if let Some(v) = var.strip_prefix("CUDA_DEVICE_ORDER=") {
            out.device_order = Some(v.to_owned());
        }
    }
    out
}

/// Whether a job with environment `env` can see `device`: Some(true/false) where the
/// environment decides it, None where it cannot be told (integer indices in CUDA's default,
/// fastest-first order).
#[must_use]
pub fn sees(env: &CudaEnv, device: &DeviceInfo, all: &[DeviceInfo]) -> Option<bool> {
    let Some(list) = &env.visible_devices else { return Some(true) };
    let by_bus = env.device_order.as_deref() == Some("PCI_BUS_ID");
    let mut undecided = false;
    // CUDA stops at the first entry it cannot parse; so does this.
    for entry in list.split(',').map(str::trim).take_while(|e| !e.is_empty()) {
        if entry.starts_with("MIG-") {
            // A MIG instance's UUID is not its GPU's: which GPU it lives on is not told here.
            undecided = true;
        } else if entry.starts_with("GPU-") {
            // A unique prefix of the UUID is enough for CUDA.
            if device.uuid.starts_with(entry) {
                return Some(true);
            }
        } else if let Ok(i) = entry.parse::<usize>() {
            if by_bus || all.len() == 1 {
                // NVML's order is by PCI bus id: the same as CUDA's in this mode.
                let mut by_pci: Vec<&DeviceInfo> = all.iter().collect();
                by_pci.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
                if by_pci.get(i).is_some_and(|d| d.uuid == device.uuid) {
                    return Some(true);
                }
            } else {
                undecided = true;
            }
        } else {
            break;
        }
    }
    if undecided {
        None
    } else {
        Some(false)
    }
}

/// Whether gputrace runs in a pid namespace of its own (a container): NVML then reports
/// host pids, which are not the pids gputrace sees, so "whose memory is it" cannot be
/// answered by pid.
#[must_use]
pub fn in_child_pid_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("NSpid:").map(|v| v.split_whitespace().count() > 1)))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(uuid: &str, bus: &str) -> DeviceInfo {
        DeviceInfo { uuid: uuid.into(), pci_bus_id: bus.into(), ..DeviceInfo::default() }
    }

    #[test]
    fn visible_devices_by_uuid_and_by_bus_order() {
        let all = [dev("GPU-aaaa", "0000:81:00.0"), dev("GPU-bbbb", "0000:01:00.0")];
        let env = parse_cuda_env(b"HOME=/root\0CUDA_VISIBLE_DEVICES=GPU-bb\0");
        assert_eq!(sees(&env, &all[1], &all), Some(true));
        assert_eq!(sees(&env, &all[0], &all), Some(false));
        let by_bus = CudaEnv { visible_devices: Some("0".into()), device_order: Some("PCI_BUS_ID".into()) };
        assert_eq!(sees(&by_bus, &all[1], &all), Some(true), "index 0 by bus is 0000:01");
        assert_eq!(sees(&by_bus, &all[0], &all), Some(false));
        let fastest_first = CudaEnv { visible_devices: Some("1".into()), device_order: None };
        assert_eq!(sees(&fastest_first, &all[0], &all), None, "CUDA's default order cannot be known from NVML");
        assert_eq!(sees(&CudaEnv::default(), &all[0], &all), Some(true), "no variable: every device");
        let empty = CudaEnv { visible_devices: Some(String::new()), device_order: None };
        assert_eq!(sees(&empty, &all[0], &all), Some(false), "an empty list hides every device");
        let bad = CudaEnv { visible_devices: Some("x,GPU-aaaa".into()), device_order: None };
        assert_eq!(sees(&bad, &all[0], &all), Some(false), "CUDA stops at the first bad entry");
    }
}
