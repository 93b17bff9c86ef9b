//! The `cpu` and `io` sections of the report.

use crate::model::{CgroupThrottle, Cpu, Io, IoEntry, MainThread, Preemptor, Quantiles, ThreadTime};
use crate::{
    evidence::sched_io::{IoStats, IoTotals},
    outcome::Outcome,
};

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Threads listed in `cpu.threads`, busiest first.
const MAX_THREADS_LISTED: usize = 32;

pub fn cpu(outcome: &Outcome) -> Cpu {
    let ev = &outcome.evidence;
    let main_thread = ev.main_thread().map(|(tid, _)| {
        let s = ev.sched.get(&tid).filter(|_| outcome.sched_traced);
        MainThread {
            tid,
            on_cpu_s: s.map(|s| secs(s.on_cpu_ns)),
            runqueue_s: s.map(|s| secs(s.runqueue_ns)),
            io_wait_s: s.map(|s| secs(s.blocked_ns)),
            sleep_s: s.map(|s| secs(s.sleep_ns)),
            preemptions: s.map(|s| s.preemptions),
            voluntary_switches: s.map(|s| s.voluntary_switches),
        }
    });
    let mut threads: Vec<ThreadTime> = ev
        .sched
        .iter()
        .map(|(&tid, s)| ThreadTime {
            tid,
            pid: s.pid,
            on_cpu_s: secs(s.on_cpu_ns),
            runqueue_s: secs(s.runqueue_ns),
            io_wait_s: secs(s.blocked_ns),
            sleep_s: secs(s.sleep_ns),
            preemptions: s.preemptions,
            voluntary_switches: s.voluntary_switches,
        })
        .collect();
    threads.sort_by(|a, b| (b.on_cpu_s + b.runqueue_s + b.io_wait_s).total_cmp(&(a.on_cpu_s + a.runqueue_s + a.io_wait_s)));
    threads.truncate(MAX_THREADS_LISTED);
    let mut preempted_by: Vec<Preemptor> =
        ev.preempted_by.iter().map(|p| Preemptor { tid: p.tid, pid: p.pid, command: p.command.clone(), count: p.count }).collect();
    preempted_by.sort_by_key(|p| std::cmp::Reverse(p.count));
    preempted_by.truncate(16);
    let cgroups = ev
        .cgroups
        .iter()
        .map(|(path, s)| CgroupThrottle {
            path: path.clone(),
            periods: s.nr_periods,
            throttled_periods: s.nr_throttled,
            throttled_s: s.throttled_usec as f64 / 1e6,
        })
        .collect();
    Cpu { main_thread, threads, preempted_by, cgroups }
}

fn entry(t: &IoTotals, pid: Option<u32>, device: Option<String>) -> IoEntry {
    let c = &t.counts;
    IoEntry { pid, device, reads: c.reads, read_bytes: c.read_bytes, writes: c.writes, write_bytes: c.write_bytes, wait_s: secs(t.wait_ns) }
}

pub fn io(s: &IoStats) -> Io {
    let t = &s.total;
    let latency_us = s.latency_quantile_us(0.5).map(|p50| Quantiles {
        p50,
        p95: s.latency_quantile_us(0.95).unwrap_or(p50),
        p99: s.latency_quantile_us(0.99).unwrap_or(p50),
        max: s.latency_quantile_us(1.0).unwrap_or(p50),
    });
    Io {
        counts: t.counts,
        wait_s: secs(t.wait_ns),
        latency_us,
        by_process: s.by_process.iter().map(|(&pid, t)| entry(t, Some(pid), None)).collect(),
        // The block tracepoints' dev_t is the kernel's internal form: major << 20 | minor.
        by_device: s.by_device.iter().map(|(&dev, t)| entry(t, None, Some(format!("{}:{}", dev >> 20, dev & 0xf_ffff)))).collect(),
    }
}
