//! Inline SVG: a job's outcomes as a sparkline, its 90 days as a heatmap,
//! its durations as a trend, and runs on a timeline. Colours are classes
//! of the embedded style sheet (no inline style: the pages' CSP allows
//! none); sizes are attributes. Each drawing is one element per colour
//! where it can be, so a page of 100 sparklines stays small.

use std::fmt::Write;

use chrono::{DateTime, Duration, Utc};

use crate::http::esc;

/// The class of an outcome letter (`JobSummary::outcomes`).
fn outcome_class(c: char) -> &'static str {
    match c {
        's' => "ok",
        'x' | 'm' => "skip",
        _ => "bad",
    }
}

/// One bar per outcome, oldest first: a path per class, each bar a
/// vertical stroke.
pub(crate) fn sparkline(outcomes: &str) -> String {
    let n = outcomes.chars().count();
    if n == 0 {
        return String::new();
    }
    let w = n * 3;
    let mut paths: [(&str, String); 3] = [
        ("ok", String::new()),
        ("bad", String::new()),
        ("skip", String::new()),
    ];
    for (i, c) in outcomes.chars().enumerate() {
        let class = outcome_class(c);
        let (y, h) = if class == "ok" { (4, 8) } else { (0, 12) };
        if let Some((_, d)) = paths.iter_mut().find(|(k, _)| *k == class) {
            let _ = write!(d, "M{} {y}v{h}", i * 3 + 1);
        }
    }
    let mut out = format!(
        "<svg class=\"spark\" width=\"{w}\" height=\"12\" viewBox=\"0 0 {w} 12\" role=\"img\" aria-label=\"{}\">",
        esc(outcomes)
    );
    for (class, d) in paths.iter().filter(|(_, d)| !d.is_empty()) {
        let _ = write!(out, "<path class=\"{class}\" d=\"{d}\"/>");
    }
    out.push_str("</svg>");
    out
}

/// A day's runs: successes and failures.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Day {
    pub(crate) ok: u32,
    pub(crate) bad: u32,
}

/// The heatmap image's width: 13 weeks of 11-pixel cells.
pub(crate) const HEATMAP_WIDTH: usize = 143;

/// 90 days in columns of weeks, oldest first, as an image of its own
/// (served apart, so its colours are attributes, not the sheet's classes):
/// each cell says how the day went (none, all good, some failed, all
/// failed).
pub(crate) fn heatmap(days: &[(chrono::NaiveDate, Day)]) -> String {
    let cell = 11;
    let cols = days.len().div_ceil(7).max(1);
    let w = cols * cell;
    let h = 7 * cell;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">"
    );
    for (i, (date, d)) in days.iter().enumerate() {
        let class = match (d.ok, d.bad) {
            (0, 0) => "#ebedf0",
            (_, 0) => "#40c463",
            (0, _) => "#e5534b",
            _ => "#f2cc60",
        };
        let _ = write!(
            out,
            "<rect fill=\"{class}\" x=\"{}\" y=\"{}\" width=\"9\" height=\"9\"><title>{date}: {} ok, {} failed</title></rect>",
            (i / 7) * cell,
            (i % 7) * cell,
            d.ok,
            d.bad
        );
    }
    out.push_str("</svg>");
    out
}

/// Durations (oldest first) as a line, scaled to the longest.
pub(crate) fn trend(durations_ms: &[u64]) -> String {
    let (w, h) = (400usize, 60usize);
    if durations_ms.is_empty() {
        return String::new();
    }
    let max = durations_ms.iter().copied().max().unwrap_or(1).max(1) as f64;
    let step = if durations_ms.len() > 1 {
        w as f64 / (durations_ms.len() - 1) as f64
    } else {
        0.0
    };
    let mut points = String::new();
    for (i, d) in durations_ms.iter().enumerate() {
        let x = i as f64 * step;
        let y = h as f64 - 2.0 - (*d as f64 / max) * (h as f64 - 4.0);
        let _ = write!(points, "{x:.0},{y:.0} ");
    }
    format!(
        "<svg class=\"trend\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"durations, longest {}\"><polyline points=\"{}\"/></svg>",
        crate::pages::ms(max as u64),
        points.trim_end()
    )
}

/// A bar on the timeline.
pub(crate) struct Bar {
    pub(crate) row: usize,
    pub(crate) start: DateTime<Utc>,
    pub(crate) end: DateTime<Utc>,
    pub(crate) class: &'static str,
    pub(crate) title: String,
}

/// Rows of bars between `from` and `to`, with a mark at `now` and the
/// hours; upcoming fires are thin bars of class `due`.
pub(crate) fn gantt(
    labels: &[String],
    bars: &[Bar],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> String {
    let label_w = 180.0;
    let plot_w = 900.0;
    let row_h = 16usize;
    let h = labels.len().max(1) * row_h + 20;
    let span = (to - from).num_milliseconds().max(1) as f64;
    let x = |t: DateTime<Utc>| {
        label_w + ((t - from).num_milliseconds() as f64 / span).clamp(0.0, 1.0) * plot_w
    };
    let mut out = format!(
        "<svg class=\"gantt\" width=\"{}\" height=\"{h}\" viewBox=\"0 0 {} {h}\" role=\"img\" aria-label=\"runs of the last 24 hours and the fires to come\">",
        label_w + plot_w,
        label_w + plot_w
    );
    let mut hour = from + Duration::hours(1);
    while hour < to {
        let hx = x(hour);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{hx:.0}\" y1=\"0\" x2=\"{hx:.0}\" y2=\"{h}\"/>"
        );
        hour += Duration::hours(3);
    }
    for (i, l) in labels.iter().enumerate() {
        let _ = write!(
            out,
            "<text x=\"2\" y=\"{}\">{}</text>",
            i * row_h + 12,
            esc(&l.chars().take(28).collect::<String>())
        );
    }
    for b in bars {
        let x0 = x(b.start);
        let w = (x(b.end) - x0).max(2.0);
        let _ = write!(
            out,
            "<rect class=\"{}\" x=\"{x0:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\"><title>{}</title></rect>",
            b.class,
            b.row * row_h + 2,
            row_h - 4,
            esc(&b.title)
        );
    }
    let nx = x(now);
    let _ = write!(
        out,
        "<line class=\"now\" x1=\"{nx:.0}\" y1=\"0\" x2=\"{nx:.0}\" y2=\"{h}\"/></svg>"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_is_small_and_escaped() {
        let s = sparkline(&"s".repeat(64));
        assert!(s.len() < 800, "{}", s.len());
        assert!(sparkline("sf<").contains("aria-label=\"sf&lt;\""));
        assert_eq!(sparkline(""), "");
    }
}
