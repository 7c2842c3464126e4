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

/// An instant bound for `--since`/`--until` (`flag` names it in errors):
/// a duration back from `now` (`2h`, `7d`), `now`, `today` and `yesterday`
/// (their midnight in `tz`), `YYYY-MM-DD` (its midnight in `tz`),
/// `YYYY-MM-DD HH:MM[:SS]` in `tz`, or RFC 3339 with an offset.
pub(crate) fn parse_bound(
    flag: &str,
    text: &str,
    now: DateTime<Utc>,
    tz: Tz,
) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(d) = rea_core::duration::parse(t) {
        let d = Duration::from_std(d).map_err(|e| format!("{flag} {text:?}: {e}"))?;
        return Ok(now - d);
    }
    let midnight = |day: NaiveDate| local(day.and_time(NaiveTime::MIN), tz, text);
    let today = now.with_timezone(&tz).date_naive();
    match t.to_ascii_lowercase().as_str() {
        "now" => return Ok(now),
        "today" => return midnight(today),
        "yesterday" => return midnight(today - Duration::days(1)),
        _ => {}
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
        "{flag} {text:?}: write a duration back from now (\"2h\", \"7d\"), \"today\", \"yesterday\", a date (2026-11-29), a local time (\"2026-11-29 08:00\") or an RFC 3339 instant (2026-11-29T08:00:00Z)"
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
    }

    #[test]
    fn shown_times_name_their_zone() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(show(now(), tz), "2026-11-29 13:00:00 CET");
        assert_eq!(show(now(), Tz::UTC), "2026-11-29 12:00:00 UTC");
    }
}
