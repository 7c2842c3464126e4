//! Human durations as they appear in job files and on the command line:
//! `"90s"`, `"10m"`, `"1h30m"`, `"2d"`, `"250ms"`, and their display.
//!
//! Parsing is strict (units are required, no spaces, no signs) so that a typo
//! such as `"10"` is an error with a hint rather than ten nanoseconds.

use std::fmt;
use std::time::Duration;

/// Why a duration string was refused; `Display` is a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    pub message: String,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DurationError {}

const UNITS: &[(&str, u64)] = &[
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
    ("w", 7 * 86_400_000),
];

/// The longest duration rea accepts anywhere (job file, command line,
/// control socket): a century is far beyond any sensible timeout, delay or
/// interval, and the bound keeps every later addition to an instant free of
/// overflow.
pub const MAX: Duration = Duration::from_millis(100 * 365 * 86_400_000);

/// `ms` milliseconds, if within [`MAX`]; the error names `what`.
pub fn from_millis_checked(ms: u64, what: &str) -> Result<Duration, DurationError> {
    let d = Duration::from_millis(ms);
    if d > MAX {
        return Err(DurationError {
            message: format!("{what} of {ms} ms is longer than 100 years"),
        });
    }
    Ok(d)
}

fn err(input: &str, why: &str) -> DurationError {
    DurationError {
        message: format!(
            "invalid duration {input:?}: {why} (write e.g. \"90s\", \"10m\", \"1h30m\", \"2d\"; units: ms s m h d w)"
        ),
    }
}

/// Parses `"1h30m"`-style durations. `"0s"` (or `"0"`) is zero.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(err(input, "it is empty"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total_ms: u64 = 0;
    let mut last_unit_rank: Option<usize> = None;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(err(input, "expected a number"));
        }
        let number: u64 = s[start..i]
            .parse()
            .map_err(|_| err(input, "the number is too large"))?;
        let ustart = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[ustart..i];
        if unit.is_empty() {
            return Err(err(input, "a unit is missing after the number"));
        }
        let Some(rank) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(err(input, &format!("unknown unit {unit:?}")));
        };
        if let Some(last) = last_unit_rank {
            if rank >= last {
                return Err(err(
                    input,
                    "units must go from largest to smallest, each once",
                ));
            }
        }
        last_unit_rank = Some(rank);
        let ms = number
            .checked_mul(UNITS[rank].1)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(|| err(input, "it is too large"))?;
        total_ms = ms;
    }
    if Duration::from_millis(total_ms) > MAX {
        return Err(err(input, "it is longer than 100 years"));
    }
    Ok(Duration::from_millis(total_ms))
}

/// Compact display: `1h30m`, `45s`, `250ms`, `2d3h`. Exact for whole
/// milliseconds; at most two units are shown so it stays short in tables.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 10_000 && ms % 1_000 != 0 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let secs = ms / 1000;
    let parts = [
        (secs / 86_400, "d"),
        ((secs % 86_400) / 3_600, "h"),
        ((secs % 3_600) / 60, "m"),
        (secs % 60, "s"),
    ];
    let mut out = String::new();
    let mut shown = 0;
    for (v, u) in parts {
        if v == 0 && out.is_empty() {
            continue;
        }
        if shown == 2 {
            break;
        }
        if v != 0 {
            out.push_str(&format!("{v}{u}"));
        }
        shown += 1;
    }
    out
}

/// Exact round-trippable display (every unit), used when writing job files.
pub fn format_exact(d: Duration) -> String {
    let mut ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in UNITS.iter().rev().filter(|(u, _)| *u != "w") {
        if ms >= *size {
            out.push_str(&format!("{}{}", ms / size, unit));
            ms %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("2d").unwrap(), Duration::from_secs(172_800));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1w").unwrap(), Duration::from_secs(604_800));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_what_is_ambiguous() {
        for bad in [
            "",
            "10",
            "s",
            "1x",
            "1m1h",
            "1h1h",
            "-1s",
            "1.5h",
            "1 h",
            "99999999999999999999s",
            "200y",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse("1m1h")
            .unwrap_err()
            .to_string()
            .contains("largest to smallest"));
    }

    #[test]
    fn formats_short_and_exact() {
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(3 * 3600 + 12 * 60 + 5)), "3h12m");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_millis(42)), "42ms");
        assert_eq!(format(Duration::from_secs(86_400 + 60)), "1d");
        assert_eq!(format_exact(Duration::from_secs(86_400 + 61)), "1d1m1s");
        for s in ["90s", "1h30m", "2d", "250ms", "1d2h3m4s5ms"] {
            let d = parse(s).unwrap();
            assert_eq!(parse(&format_exact(d)).unwrap(), d);
        }
    }
}
