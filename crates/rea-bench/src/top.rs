//! `rea top` on the scale file (100,000 realistic jobs) with the queries'
//! history (1,000,000 lines): its first frame (connect, overview, first
//! page, drawn at 80×24), a key answered (key, the daemon's page where the
//! key needs one, the frame redrawn; p99), and a run's end on screen after
//! it happened (through the subscription); each beside today's `rea
//! status` measured in the same run on the same daemon. `rea top` runs
//! in-process as `rea_top::Headless`: the screen's own state, requests and
//! drawing, into ratatui's test backend instead of a terminal.

use std::time::{Duration, Instant};

use rea_top::Headless;

use super::report::Figure;
use super::scale::{self, Shape};
use super::util::{self, Daemon, TempDir};
use super::Settings;

const PROBE: &str = "top-probe";

pub(crate) fn top(s: &Settings) -> Vec<Figure> {
    let n = s.scale_jobs;
    let dir = TempDir::new("top");
    let mut text = scale::big_file(n, Shape::Realistic);
    text.push_str(&format!(
        "[jobs.{PROBE}]\nschedule = \"@yearly\"\ncommand = \"true\"\n\n"
    ));
    dir.write_jobs(&text);
    super::queries::generate(&dir, s.history_lines);
    eprintln!("top: {n} realistic jobs, {} history lines", s.history_lines);
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(300));
    let mut out = Vec::new();
    let shown = format!("{n} jobs, {} history lines", s.history_lines);
    let reps = s.reps.max(5);

    // `rea status` as this build answers it, on the same daemon.
    let mut status = Vec::new();
    let mut status_rss = 0;
    for _ in 0..s.reps {
        let c = util::measure(&mut util::rea(&dir, &["status"]));
        status.push(c.wall);
        status_rss = status_rss.max(c.max_rss_kb);
    }
    let status = util::median(&status);
    out.push(Figure::info(
        "top",
        format!(
            "`rea status` as this build answers it, {shown}, median of {}",
            s.reps
        ),
        format!(
            "{} ({} client peak)",
            util::ms(status),
            util::mb(status_rss)
        ),
    ));

    // First frame: a new connection each time.
    let state = dir.state();
    let mut first = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let h = Headless::open(&state, Duration::from_secs(60), 80, 24)
            .unwrap_or_else(|e| util::die(format!("rea top: {e}")));
        first.push(t.elapsed());
        if !h.screen().contains(&format!("{} jobs", n + 1)) {
            util::die(format!(
                "rea top's first frame lacks the job count:\n{}",
                h.screen()
            ));
        }
    }
    let first = util::median(&first);
    out.push(Figure::check(
        "top",
        format!(
            "`rea top` first frame (connect, overview, first page, drawn 80×24), median of {reps}"
        ),
        format!("{} (rea status: {})", util::ms(first), util::ms(status)),
        "≤ 200 ms",
        first <= Duration::from_millis(200),
    ));

    // Keys on the job table: moves, pages, and sorts and filters the
    // daemon answers with a new first page.
    let mut h = Headless::open(&state, Duration::from_secs(60), 80, 24)
        .unwrap_or_else(|e| util::die(format!("rea top: {e}")));
    let _ = h.key("2");
    let mut all = Vec::new();
    let mut fetching = Vec::new();
    for i in 0..500 {
        let key = match i % 10 {
            0 => "s",
            5 => "f",
            3 | 7 => "PageDown",
            _ => "Down",
        };
        let t = Instant::now();
        h.key(key)
            .unwrap_or_else(|e| util::die(format!("rea top key {key}: {e}")));
        let took = t.elapsed().as_secs_f64() * 1000.0;
        all.push(took);
        if matches!(key, "s" | "f") {
            fetching.push(took);
            // A page came (not an error): the rows of the realistic file
            // (every other `s` is under `f`, failing only: none fail).
            if i % 20 == 0 && !h.screen().contains("-task-") {
                util::die(format!("rea top's job table is empty:\n{}", h.screen()));
            }
        }
    }
    let p99 = util::percentile(&all, 99.0);
    let p99_fetch = util::percentile(&fetching, 99.0);
    out.push(Figure::check(
        "top",
        format!(
            "`rea top` key → frame, p99 of {} keys on the job table (moves, pages, sorts)",
            all.len()
        ),
        format!("{p99:.2} ms (rea status: {})", util::ms(status)),
        "≤ 16 ms",
        p99 <= 16.0,
    ));
    out.push(Figure::check(
        "top",
        format!(
            "`rea top` key that asks the daemon for a new sorted/filtered page → frame, p99 of {}",
            fetching.len()
        ),
        format!("{p99_fetch:.2} ms"),
        "≤ 16 ms",
        p99_fetch <= 16.0,
    ));

    // A run's end on screen: from its end as the daemon recorded it to the
    // frame that shows it, pushed by the subscription.
    let _ = h.key("1");
    h.subscribe()
        .unwrap_or_else(|e| util::die(format!("rea top: {e}")));
    let mut c = d.client();
    let mut shown_after = Vec::new();
    for _ in 0..reps {
        let r = c
            .call(&format!(r#"{{"v":1,"op":"trigger","job":"{PROBE}"}}"#))
            .unwrap_or_else(|| util::die("trigger: no answer"));
        let run = r["data"]["run"]
            .as_str()
            .unwrap_or_else(|| util::die(format!("trigger: {r}")))
            .to_string();
        let at = h
            .wait_for(&format!("run {run} succeeded"), Duration::from_secs(10))
            .unwrap_or_else(|e| util::die(format!("rea top never showed run {run}'s end: {e}")));
        let rec = c
            .call(&format!(r#"{{"v":1,"op":"find_run","run":"{run}"}}"#))
            .unwrap_or_else(|| util::die("find_run: no answer"));
        let ended = rec["data"]["ended"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .unwrap_or_else(|| util::die(format!("find_run: {rec}")));
        let lag = (at - ended.with_timezone(&chrono::Utc))
            .to_std()
            .unwrap_or_default();
        shown_after.push(lag);
    }
    let lag = shown_after.iter().max().copied().unwrap_or_default();
    out.push(Figure::check(
        "top",
        format!("a run's end shown by `rea top` after it happened, worst of {reps}"),
        format!(
            "{} (rea status: re-run it, {} each)",
            util::ms(lag),
            util::ms(status)
        ),
        "≤ 1 s",
        lag <= Duration::from_secs(1),
    ));
    d.stop();
    out
}
