//! How values read on the screen: durations, instants in a job's zone,
//! the sparkline of outcomes, and text from outside (a job's output, a
//! job's name) made safe to put on a terminal.

use std::time::Duration;

use chrono::{DateTime, Local, Utc};
use rea_core::shown::Layout;

/// `1.2s`, `3m10s`, `-` for none.
pub(crate) fn duration_ms(ms: Option<u64>) -> String {
    match ms {
        Some(ms) => rea_core::duration::format(Duration::from_millis(ms)),
        None => "-".into(),
    }
}

/// How long since `since`, to the second: `42s`, `3m10s`, `2h5m`.
pub(crate) fn elapsed(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - since).num_seconds().max(0) as u64;
    rea_core::duration::format(Duration::from_secs(secs))
}

/// `in 3m`, `12s ago`, `now`.
pub(crate) fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = t - now;
    let secs = d.num_seconds().unsigned_abs();
    if secs == 0 {
        return "now".into();
    }
    let s = rea_core::duration::format(Duration::from_secs(secs));
    if d > chrono::Duration::zero() {
        format!("in {s}")
    } else {
        format!("{s} ago")
    }
}

/// An instant as the job's zone reads it (`12-03 14:30 CET`), whatever
/// `utc` says; a job without a zone of its own runs in the machine's (the
/// daemon's, which `rea top` shares: it talks to a local socket), shown in
/// UTC with `utc`.
pub(crate) fn in_zone(t: DateTime<Utc>, zone: Option<&str>, utc: bool) -> String {
    match zone.and_then(|z| z.parse::<chrono_tz::Tz>().ok()) {
        Some(tz) => t.with_timezone(&tz).format("%m-%d %H:%M %Z").to_string(),
        None if utc => t.format("%m-%d %H:%M UTC").to_string(),
        None => t.with_timezone(&Local).format("%m-%d %H:%M").to_string(),
    }
}

/// A time of day for the overview's lists (the machine's zone, or UTC).
pub(crate) fn clock(t: DateTime<Utc>, utc: bool) -> String {
    if utc {
        t.format("%H:%M:%S").to_string()
    } else {
        t.with_timezone(&Local).format("%H:%M:%S").to_string()
    }
}

/// What one outcome character of [`rea_proto::live::JobSummary::outcomes`]
/// is, for colour: `Good`, `Bad`, or `Neutral` (skipped, missed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Good,
    Bad,
    Neutral,
}

/// The glyph and kind of an outcome: a low bar for a success, taller for
/// worse, a dot for a run that did not happen, so the line reads without
/// colour too.
pub(crate) fn outcome_glyph(c: char) -> (char, Outcome) {
    match c {
        's' => ('▁', Outcome::Good),
        'f' => ('█', Outcome::Bad),
        'e' => ('█', Outcome::Bad),
        'o' => ('▇', Outcome::Bad),
        't' => ('▆', Outcome::Bad),
        'k' => ('▅', Outcome::Bad),
        'i' => ('▄', Outcome::Bad),
        _ => ('·', Outcome::Neutral),
    }
}

/// The outcome of a history record's status, as the summaries spell them.
pub(crate) fn status_letter(status: &str) -> char {
    match status {
        "succeeded" | "success" => 's',
        "failed" => 'f',
        "timed_out" => 't',
        "killed" => 'k',
        "interrupted" => 'i',
        "oom_killed" => 'o',
        "skipped" => 'x',
        "missed" => 'm',
        _ => 'e',
    }
}

/// `text` on one line of the screen: a job's output or name must not
/// retitle, recolour or reprogram the terminal (`rea_core::shown`). Tabs
/// become spaces.
pub(crate) fn shown(text: &str) -> String {
    rea_core::shown::shown(text, Layout::ScreenLine)
}

/// A job's output as [`shown`] makes it, line breaks kept; a carriage
/// return (a progress bar redrawing its line) is dropped.
pub(crate) fn shown_keep_newlines(text: &str) -> String {
    rea_core::shown::shown(text, Layout::Screen)
}

/// `s` cut to `width` characters, with `…` where it was cut.
pub(crate) fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(shown("a\x1b[31mb"), "a^[[31mb");
        assert_eq!(shown("x\u{9b}y"), "xM-^[y");
        assert_eq!(shown("gnp\u{202e}.exe"), "gnp<U+202E>.exe");
        assert_eq!(shown("tab\there"), "tab    here");
    }

    #[test]
    fn instants_read_in_the_jobs_zone() {
        let t = Utc.with_ymd_and_hms(2026, 12, 3, 13, 30, 0).unwrap();
        assert_eq!(in_zone(t, Some("Europe/Paris"), false), "12-03 14:30 CET");
        assert_eq!(in_zone(t, Some("Europe/Paris"), true), "12-03 14:30 CET");
        assert_eq!(in_zone(t, None, true), "12-03 13:30 UTC");
        assert_eq!(
            in_zone(t, Some("America/New_York"), false),
            "12-03 08:30 EST"
        );
    }

    #[test]
    fn outcomes_read_without_colour() {
        let line: String = "ssft".chars().map(|c| outcome_glyph(c).0).collect();
        assert_eq!(line, "▁▁█▆");
        assert_eq!(outcome_glyph('x').1, Outcome::Neutral);
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(
            relative(
                Utc.timestamp_opt(100, 0).unwrap(),
                Utc.timestamp_opt(40, 0).unwrap()
            ),
            "in 1m"
        );
    }
}
