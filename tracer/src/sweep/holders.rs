//! The GPU's own account of who holds it: NVML's per-device process lists (memory held) and
//! per-process utilization samples since the window began. One query at the end of the
//! window, on its own thread with a deadline, since NVML calls block and a hung driver must
//! not hang the sweep. NVML is loaded at run time; without it the sweep says so once.
//!
//! A thread stuck in a hung driver cannot be stopped, only left behind. So at most one query
//! is in flight ([`Flight`]): while the last one has not returned, a window starts none and
//! says why, rather than leave one more thread stuck in the driver every window of `serve`.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc,
    },
    thread,
    time::Duration,
};

use nvml_wrapper::{enums::device::UsedGpuMemory, error::NvmlError, Device, Nvml};

use crate::gpu::NoGpuView;

/// How long NVML may take to answer before the sweep goes on without it.
const NVML_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceView {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
}

/// One process on one device, as NVML lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessUse {
    pub device: u32,
    /// None where NVML will not say (`NVML_VALUE_NOT_AVAILABLE`: no permission, some
    /// containers, MIG without the right privilege).
    pub memory_bytes: Option<u64>,
    /// Highest SM utilization NVML sampled for it since the window began; None where
    /// NVML has no per-process samples (unsupported, or the process did not run).
    pub sm_util_pct: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuView {
    pub driver_version: Option<String>,
    pub devices: Vec<DeviceView>,
    /// Host pid → its use of each device.
    pub processes: BTreeMap<u32, Vec<ProcessUse>>,
    /// Whether per-process utilization samples could be read on every device: only then does
    /// a missing sample mean "did not run".
    pub utilization_known: bool,
    /// Whether NVML's process lists could be read on every device and name processes of our
    /// pid namespace: only then does a process missing from them hold no GPU memory.
    pub processes_listed: bool,
    /// Devices NVML counts and cannot reach (a GPU lost from the bus), each as `GPU N: why`.
    pub unreachable: Vec<String>,
}

/// Whether a query is running: one per engine, shared by its windows.
#[derive(Clone, Debug, Default)]
pub struct Flight(Arc<AtomicBool>);

/// The query in flight; dropped when its thread is done with NVML, answered or not.
#[derive(Debug)]
struct Boarded(Arc<AtomicBool>);

impl Flight {
    fn board(&self) -> Option<Boarded> {
        self.0.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).ok().map(|_| Boarded(self.0.clone()))
    }
}

impl Drop for Boarded {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Ask NVML; `since_unix_us` is the window's start on the wall clock, which NVML's
/// per-process samples use. `Err` says why there is no GPU view.
pub fn query(flight: &Flight, since_unix_us: u64) -> Result<GpuView, NoGpuView> {
    single_flight(flight, NVML_TIMEOUT, move || ask(since_unix_us))
}

/// `ask` on a thread of its own, its answer awaited for `timeout`; none started while the
/// last one `flight` saw has not returned.
fn single_flight<T: Send + 'static>(flight: &Flight, timeout: Duration, ask: impl FnOnce() -> Result<T, NoGpuView> + Send + 'static) -> Result<T, NoGpuView> {
    let boarded = flight.board().ok_or(NoGpuView::StillAsking(timeout))?;
    let (tx, rx) = mpsc::channel();
    // A spawn that fails drops the closure, and with it `boarded`: the next window may try.
    thread::Builder::new()
        .name("gputrace-nvml".into())
        .spawn(move || {
            let answer = ask();
            // Landed before the answer is handed over, so that the window that takes it can
            // start the next query at once.
            drop(boarded);
            let _ = tx.send(answer);
        })
        .map_err(NoGpuView::Thread)?;
    rx.recv_timeout(timeout).map_err(|_| NoGpuView::AnswerTimeout(timeout))?
}

fn ask(since_unix_us: u64) -> Result<GpuView, NoGpuView> {
    let nvml = Nvml::init().map_err(NoGpuView::Unavailable)?;
    let count = nvml.device_count().map_err(NoGpuView::Count)?;
    let mut view = GpuView { driver_version: nvml.sys_driver_version().ok(), utilization_known: count > 0, processes_listed: count > 0, ..GpuView::default() };
    for index in 0..count {
        let dev = match nvml.device_by_index(index) {
            Ok(dev) => dev,
            Err(e) => {
                // Its processes are not listed: nobody's absence from the lists means anything.
                view.unreachable.push(format!("GPU {index}: {e}"));
                view.utilization_known = false;
                view.processes_listed = false;
                continue;
            }
        };
        let memory = dev.memory_info().ok();
        view.devices.push(DeviceView {
            index,
            uuid: dev.uuid().unwrap_or_default(),
            name: dev.name().unwrap_or_default(),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
        });
        let (utilization, listed) = device_processes(&dev, index, since_unix_us, &mut view.processes);
        view.utilization_known &= utilization;
        view.processes_listed &= listed;
    }
    // Inside a container without the host's pid namespace NVML names host pids, none of
    // which is ours: its lists then say nothing about the processes we see.
    let ours = |pid: &u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    view.processes_listed &= view.processes.is_empty() || view.processes.keys().any(ours);
    Ok(view)
}

/// Add one device's processes; returns whether per-process utilization was readable and
/// whether the process lists were.
fn device_processes(dev: &Device<'_>, index: u32, since_unix_us: u64, out: &mut BTreeMap<u32, Vec<ProcessUse>>) -> (bool, bool) {
    let (compute, graphics) = (dev.running_compute_processes(), dev.running_graphics_processes());
    let lists_read = compute.is_ok() && graphics.is_ok();
    let listed = compute.unwrap_or_default().into_iter().chain(graphics.unwrap_or_default());
    let mut here: BTreeMap<u32, ProcessUse> = BTreeMap::new();
    for p in listed {
        let memory = match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        let entry = here.entry(p.pid).or_insert(ProcessUse { device: index, memory_bytes: None, sm_util_pct: None });
        // A process in both lists (compute and graphics) holds one pool: keep the larger.
        entry.memory_bytes = entry.memory_bytes.max(memory);
    }
    let (samples, known) = match dev.process_utilization_stats(since_unix_us) {
        Ok(samples) => (samples, true),
        // NVML_ERROR_NOT_FOUND: no process ran on this device since then.
        Err(NvmlError::NotFound) => (Vec::new(), true),
        Err(_) => (Vec::new(), false),
    };
    for s in samples {
        let entry = here.entry(s.pid).or_insert(ProcessUse { device: index, memory_bytes: None, sm_util_pct: None });
        entry.sm_util_pct = entry.sm_util_pct.max(Some(s.sm_util));
    }
    for (pid, u) in here {
        out.entry(pid).or_default().push(u);
    }
    (known, lists_read)
}

#[cfg(test)]
mod tests {
    use std::{sync::atomic::AtomicUsize, time::Instant};

    use super::*;

    const SHORT: Duration = Duration::from_millis(50);

    #[test]
    fn a_hung_query_holds_back_new_ones_instead_of_leaving_a_thread_per_window() {
        let flight = Flight::default();
        let started = Arc::new(AtomicUsize::new(0));
        let (release, driver) = mpsc::channel::<()>();
        let counted = started.clone();
        let first = single_flight(&flight, SHORT, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = driver.recv();
            Ok(1)
        });
        assert!(matches!(first, Err(NoGpuView::AnswerTimeout(t)) if t == SHORT), "{first:?}");
        // Window after window while the driver hangs: skipped at once, no thread started.
        for _ in 0..5 {
            let counted = started.clone();
            let began = Instant::now();
            let skipped = single_flight(&flight, SHORT, move || {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(2)
            });
            assert!(matches!(skipped, Err(NoGpuView::StillAsking(_))), "{skipped:?}");
            assert!(began.elapsed() < SHORT, "a skipped query does not wait");
        }
        assert_eq!(started.load(Ordering::SeqCst), 1, "one thread in the driver, not one a window");
        // The driver answers at last: the next window asks again.
        release.send(()).expect("the hung query still waits");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match single_flight(&flight, Duration::from_secs(5), || Ok(3)) {
                Ok(v) => {
                    assert_eq!(v, 3);
                    break;
                }
                Err(NoGpuView::StillAsking(_)) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn queries_that_answer_never_hold_the_next_back() {
        let flight = Flight::default();
        for i in 0..3 {
            assert_eq!(single_flight(&flight, Duration::from_secs(5), move || Ok(i)).expect("an answer"), i);
        }
        let failed = single_flight::<u32>(&flight, Duration::from_secs(5), || Err(NoGpuView::NoDevice));
        assert!(matches!(failed, Err(NoGpuView::NoDevice)), "{failed:?}");
        assert_eq!(single_flight(&flight, Duration::from_secs(5), || Ok(4)).expect("an answer"), 4);
    }
}
