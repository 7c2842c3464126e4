//! Instants as people read and write them on the command line. Inside,
//! every instant is UTC; the query commands (`history`, `pending`,
//! `status`) show them in the machine's zone, as `date`, `journalctl` and
//! `ls -l` do, unless `--utc` is given; and the times a person types
//! (`--since yesterday`, `--until "2026-11-29 08:00"`, `rea at 14:30`) are
//! read in that same zone. `--json` output never changes: RFC 3339 in UTC,
//! a stable schema for scripts.
//!
//! The machine's zone is `$TZ`, else `/etc/localtime` (as `rea_config::zone`
//! resolves `"local"`); an unreadable one falls back to UTC, which the shown
//! times then say (`UTC` after each).

use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// The zone instants are shown (and typed times read) in: UTC with
/// `--utc`, else the machine's.
pub(crate) fn zone(utc: bool) -> Tz {
    if utc {
        return Tz::UTC;
    }
    rea_config::zone::resolve("local").unwrap_or(Tz::UTC)
}

/// `2026-11-29 10:23:50 CET`: seconds, and the zone's abbreviation so a
/// reader never has to guess which zone a time is in.
pub(crate) fn show(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

/// A wall-clock time in `tz` as an instant: the earlier one in a
/// fall-back repeat, an error in a spring-forward gap.
pub(crate) fn local(naive: NaiveDateTime, tz: Tz, text: &str) -> Result<DateTime<Utc>, String> {
    tz.from_local_datetime(&naive)
        .earliest()
        .map(|d| d.with_timezone(&Utc))
        .ok_or_else(|| format!("{text:?} does not exist in {tz} (a daylight saving gap)"))
}

/// `YYYY-MM-DD HH:MM[:SS]` (or with `T`), without an offset.
pub(crate) fn naive_date_time(text: &str) -> Option<NaiveDateTime> {
    [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|fmt| NaiveDateTime::parse_from_str(text, fmt).ok())
}

/// A duration as people type it on a command line: rea's own spelling
/// (`30m`, `1h30m`) and the words `at(1)` and `journalctl` take (`30
/// minutes`, `1 hour 30 min`, `2 days`, `90 sec`), spaces allowed.
pub(crate) fn human_duration(text: &str) -> Result<std::time::Duration, String> {
    const WORDS: &[(&[&str], &str)] = &[
        (
            &["ms", "msec", "msecs", "millisecond", "milliseconds"],
            "ms",
        ),
        (&["s", "sec", "secs", "second", "seconds"], "s"),
        (&["m", "min", "mins", "minute", "minutes"], "m"),
        (&["h", "hr", "hrs", "hour", "hours"], "h"),
        (&["d", "day", "days"], "d"),
        (&["w", "week", "weeks"], "w"),
    ];
    let compact: String = text.split_whitespace().collect();
    if compact.is_empty() {
        return Err(format!("{text:?}: the duration is empty"));
    }
    let mut canonical = String::new();
    let mut rest = compact.as_str();
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{text:?}: expected a number before {rest:?}"));
        }
        let (number, after) = rest.split_at(digits);
        let letters = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (word, next) = after.split_at(letters);
        if word.is_empty() {
            return Err(format!(
                "{text:?}: a unit is missing after {number} (write e.g. \"{number}m\" or \"{number} minutes\")"
            ));
        }
        let lower = word.to_ascii_lowercase();
        let Some((_, unit)) = WORDS
            .iter()
            .find(|(words, _)| words.contains(&lower.as_str()))
        else {
            return Err(format!(
                "{text:?}: unknown unit {word:?} (units: ms, s/sec/seconds, m/min/minutes, h/hours, d/days, w/weeks)"
            ));
        };
        canonical.push_str(number);
        canonical.push_str(unit);
        rest = next;
    }
    rea_core::duration::parse(&canonical).map_err(|e| format!("{text:?}: {e}"))
}

/// An instant bound for `--since`/`--until` (`flag` names it in errors):
/// a duration back from `now` (`2h`, `7d`, `-2h` and `+2h` as journalctl
/// writes them, `2 hours ago`), `now`, `today`, `yesterday` and `tomorrow`
/// (their midnight in `tz`), `YYYY-MM-DD` (its midnight in `tz`),
/// `YYYY-MM-DD HH:MM[:SS]` and `HH:MM[:SS]` (today) in `tz`, or RFC 3339
/// with an offset.
pub(crate) fn parse_bound(
    flag: &str,
    text: &str,
    now: DateTime<Utc>,
    tz: Tz,
) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let (relative, forward) = if let Some(r) = t.strip_prefix('-') {
        (Some(r), false)
    } else if let Some(r) = t.strip_prefix('+') {
        (Some(r), true)
    } else if let Some(r) = lower.strip_suffix("ago") {
        (Some(&t[..r.len()]), false)
    } else if t.starts_with(|c: char| c.is_ascii_digit()) && !t.contains([':', '-']) {
        (Some(t), false)
    } else {
        (None, false)
    };
    if let Some(r) = relative {
        let d = human_duration(r).map_err(|e| format!("{flag} {e}"))?;
        let d = Duration::from_std(d).map_err(|e| format!("{flag} {text:?}: {e}"))?;
        return Ok(if forward { now + d } else { now - d });
    }
    let midnight = |day: NaiveDate| local(day.and_time(NaiveTime::MIN), tz, text);
    let today = now.with_timezone(&tz).date_naive();
    match lower.as_str() {
        "now" => return Ok(now),
        "today" => return midnight(today),
        "yesterday" => return midnight(today - Duration::days(1)),
        "tomorrow" => return midnight(today + Duration::days(1)),
        _ => {}
    }
    for fmt in ["%H:%M:%S", "%H:%M"] {
        if let Ok(time) = NaiveTime::parse_from_str(t, fmt) {
            return local(today.and_time(time), tz, text);
        }
    }
    if let Ok(i) = DateTime::parse_from_rfc3339(t) {
        return Ok(i.with_timezone(&Utc));
    }
    if let Some(n) = naive_date_time(t) {
        return local(n, tz, text);
    }
    if let Ok(day) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return midnight(day);
    }
    Err(format!(
        "{flag} {text:?}: write a duration back from now (\"2h\", \"-2h\", \"2 hours ago\"), \"today\", \"yesterday\", a date (2026-11-29), a local time (\"08:00\", \"2026-11-29 08:00\") or an RFC 3339 instant (2026-11-29T08:00:00Z)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn bound(text: &str, tz: &str) -> String {
        let tz: Tz = tz.parse().unwrap();
        parse_bound("--since", text, now(), tz)
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|e| e)
    }

    #[test]
    fn bounds_read_like_people_write_them() {
        assert_eq!(bound("2h", "UTC"), "2026-11-29T10:00:00+00:00");
        assert_eq!(bound("now", "UTC"), "2026-11-29T12:00:00+00:00");
        // 12:00Z is 20:00 in Shanghai: today began at 16:00Z the day before.
        assert_eq!(bound("today", "Asia/Shanghai"), "2026-11-28T16:00:00+00:00");
        assert_eq!(
            bound("Yesterday", "Asia/Shanghai"),
            "2026-11-27T16:00:00+00:00"
        );
        assert_eq!(bound("today", "UTC"), "2026-11-29T00:00:00+00:00");
        assert_eq!(
            bound("2026-11-01", "Europe/Berlin"),
            "2026-10-31T23:00:00+00:00"
        );
        assert_eq!(
            bound("2026-11-01 08:30", "Europe/Berlin"),
            "2026-11-01T07:30:00+00:00"
        );
        assert_eq!(
            bound("2026-11-01T08:00:00+01:00", "Asia/Shanghai"),
            "2026-11-01T07:00:00+00:00"
        );
        // New York's spring-forward gap.
        assert!(bound("2026-03-08 02:30", "America/New_York").contains("daylight saving gap"));
        assert!(bound("teatime", "UTC").starts_with("--since \"teatime\": write a duration"));
        // journalctl's and people's spellings.
        assert_eq!(bound("-1h", "UTC"), "2026-11-29T11:00:00+00:00");
        assert_eq!(bound("+1h", "UTC"), "2026-11-29T13:00:00+00:00");
        assert_eq!(bound("2 hours ago", "UTC"), "2026-11-29T10:00:00+00:00");
        assert_eq!(bound("-30 min", "UTC"), "2026-11-29T11:30:00+00:00");
        assert_eq!(bound("1h 30m", "UTC"), "2026-11-29T10:30:00+00:00");
        assert_eq!(bound("tomorrow", "UTC"), "2026-11-30T00:00:00+00:00");
        assert_eq!(bound("08:00", "Europe/Berlin"), "2026-11-29T07:00:00+00:00");
        assert_eq!(
            bound("-3 fortnights", "UTC"),
            "--since \"3 fortnights\": unknown unit \"fortnights\" (units: ms, s/sec/seconds, m/min/minutes, h/hours, d/days, w/weeks)"
        );
        assert_eq!(
            bound("-30", "UTC"),
            "--since \"30\": a unit is missing after 30 (write e.g. \"30m\" or \"30 minutes\")"
        );
    }

    #[test]
    fn durations_read_as_at_and_journalctl_write_them() {
        let secs = |t: &str| human_duration(t).map(|d| d.as_secs());
        assert_eq!(secs("30 minutes"), Ok(1800));
        assert_eq!(secs("30m"), Ok(1800));
        assert_eq!(secs("1 hour 30 min"), Ok(5400));
        assert_eq!(secs("2 Days"), Ok(172_800));
        assert_eq!(secs("1 week"), Ok(604_800));
        assert_eq!(secs("90 sec"), Ok(90));
        assert!(secs("30 minutes 1 hour").is_err(), "largest unit first");
        assert!(secs("").is_err());
    }

    #[test]
    fn shown_times_name_their_zone() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(show(now(), tz), "2026-11-29 13:00:00 CET");
        assert_eq!(show(now(), Tz::UTC), "2026-11-29 12:00:00 UTC");
    }
}
