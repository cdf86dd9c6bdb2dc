//! Human-readable durations of the settings: `500ms`, `5s`, `10m`, `2h`, `1d`.

use std::time::Duration;

/// The longest duration accepted: 36 500 days.
const MAX_MS: u64 = 36_500 * 86_400_000;

/// Parses `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d`.
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}: write e.g. 500ms, 5s, 10m, 2h"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("invalid duration {s:?}: the unit must be ms, s, m, h or d")),
    };
    // Timers add durations to the clock: anything past a century is refused, not overflowed.
    match n.checked_mul(unit_ms).filter(|&ms| ms <= MAX_MS) {
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => Err(format!("invalid duration {s:?}: at most 36500d")),
    }
}

/// `d` in the form [`parse`] reads, in the largest unit that divides it (`4s`, `250ms`, `2m`);
/// sub-millisecond parts are dropped.
pub fn format(d: Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    for (unit, per) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms != 0 && ms % per == 0 {
            return format!("{}{unit}", ms / per);
        }
    }
    if ms == 0 { "0s".to_owned() } else { format!("{ms}ms") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "5", "s", "5x", "-1s", "1.5s", "36501d", "18446744073709551615d", "99999999999999999999s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn format_is_read_back() {
        for (d, s) in [(0, "0s"), (250, "250ms"), (4000, "4s"), (1500, "1500ms"), (120_000, "2m"), (86_400_000, "1d")] {
            assert_eq!(format(Duration::from_millis(d)), s);
            assert_eq!(parse(s), Ok(Duration::from_millis(d)));
        }
    }
}
