//! The one clock: `CLOCK_MONOTONIC`, which is what `bpf_ktime_get_ns` reads, so kernel and
//! user-space timestamps can be compared directly.

#[must_use]
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
    use super::rfc3339;

    #[test]
    fn rfc3339_in_utc() {
        assert_eq!(rfc3339(0.0), "");
        assert_eq!(rfc3339(1.5), "1970-01-01T00:00:01.500Z");
        // 2026-12-01T03:07:26Z, and a leap day.
        assert_eq!(rfc3339(1_796_094_446.0), "2026-12-01T03:07:26.000Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
    }
}
