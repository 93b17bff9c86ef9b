//! The one clock: `CLOCK_MONOTONIC`, which is what `bpf_ktime_get_ns` reads, so kernel and
//! user-space timestamps can be compared directly.

/// Now on `CLOCK_MONOTONIC`, in ns: the clock of every event timestamp (`ts_ns`, `start_ns`).
#[must_use]
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn realtime_ns() -> i128 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// How far the wall clock is ahead of the monotonic clock now, in ns. Timestamps stamped on
/// the wall clock (NVML's sample buffers) map onto the monotonic clock with it. Taken afresh
/// for each reading: the wall clock is stepped and slewed (NTP), the monotonic one is not.
#[must_use]
pub fn wall_ahead_ns() -> i128 {
    // The wall clock read between two monotonic reads: the offset errs by half their gap.
    let before = monotonic_ns();
    let wall = realtime_ns();
    let after = monotonic_ns();
    wall - i128::from(before / 2 + after / 2)
}

/// The monotonic ns of a wall-clock µs timestamp, given [`wall_ahead_ns`]; 0 for a stamp
/// before the monotonic clock's zero (boot).
#[must_use]
pub fn monotonic_of_wall_us(wall_us: u64, wall_ahead_ns: i128) -> u64 {
    (i128::from(wall_us) * 1000 - wall_ahead_ns).clamp(0, i128::from(u64::MAX)) as u64
}

/// Wall-clock seconds since the epoch as RFC 3339 in UTC, to the millisecond
/// (`2026-12-01T03:07:26.123Z`); empty for 0 (unknown).
#[must_use]
pub fn rfc3339(unix_s: f64) -> String {
    if !(unix_s.is_finite() && unix_s > 0.0) {
        return String::new();
    }
    let ms = (unix_s * 1e3).round() as i64;
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, milli) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, public domain).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::{monotonic_ns, monotonic_of_wall_us, rfc3339, wall_ahead_ns};

    #[test]
    fn rfc3339_in_utc() {
        assert_eq!(rfc3339(0.0), "");
        assert_eq!(rfc3339(1.5), "1970-01-01T00:00:01.500Z");
        // 2026-12-01T03:07:26Z, and a leap day.
        assert_eq!(rfc3339(1_796_094_446.0), "2026-12-01T03:07:26.000Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn wall_stamps_map_onto_the_monotonic_clock() {
        let ahead = wall_ahead_ns();
        let wall_now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_micros() as u64;
        let mono_now = monotonic_ns();
        let mapped = monotonic_of_wall_us(wall_now_us, ahead);
        // Both clocks read within a few µs of each other; a loaded machine may preempt between.
        assert!(mapped.abs_diff(mono_now) < 50_000_000, "wall now mapped to {mapped}, monotonic now {mono_now}");
        assert_eq!(monotonic_of_wall_us(2_000, 1_000_000), 1_000_000, "2 ms wall, wall 1 ms ahead: 1 ms");
        assert_eq!(monotonic_of_wall_us(0, 5), 0, "before boot is clamped, not wrapped");
    }
}
