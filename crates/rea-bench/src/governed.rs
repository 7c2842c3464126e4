//! A cgroup per run against process groups, in the same run of the
//! benchmark, rounds interleaved so drifting load hits both alike:
//! throughput of short runs, and spawn lateness.

use std::time::Duration;

use super::report::Figure;
use super::{daemon_parts, throughput, util, Settings};

const OFF: &str = "cgroups = \"off\"\n";

pub(crate) fn governed(s: &Settings) -> Vec<Figure> {
    let mode = probe_mode();
    if !mode.starts_with("cgroup") {
        eprintln!("governed: SKIPPED: a daemon here gets no cgroups ({mode})");
        return vec![Figure::info(
            "governed",
            "a cgroup per run vs process groups",
            format!("not measured: {mode}"),
        )];
    }
    let n = s.throughput_runs;
    eprintln!("governed: throughput, {n} runs, {} rounds per mode", s.reps);
    let mut cg = Vec::new();
    let mut pg = Vec::new();
    for _ in 0..s.reps {
        pg.push(throughput::rea_round_with(n, OFF));
        cg.push(throughput::rea_round_with(n, ""));
    }
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let (c, p) = (util::median(&cg), util::median(&pg));
    let ratio = rate(c) / rate(p);
    let mut out = vec![
        Figure::check(
            "governed",
            format!(
                "throughput with a cgroup per run: {n} forced triggers of `true`, max_concurrent = 64; median of {}",
                s.reps
            ),
            format!("{:.2} s = {:.0} runs/s; {ratio:.2}× process groups", c.as_secs_f64(), rate(c)),
            "≥ 0.9× process groups",
            ratio >= 0.9,
        ),
        Figure::info(
            "governed",
            "  process groups (`cgroups = \"off\"`), same rounds",
            format!("{:.2} s = {:.0} runs/s", p.as_secs_f64(), rate(p)),
        ),
    ];
    let secs = s.precision_secs;
    eprintln!("governed: lateness, 8 jobs every second, {secs} s per mode");
    // In halves, ABBA (process groups, cgroups, cgroups, process groups):
    // the load of a shared machine drifts over a phase, and this spreads
    // the drift over both modes instead of charging it to the second.
    let half = (secs / 2).max(1);
    let (mut pg_late, mut pg_started) = daemon_parts::precision_phase_with(8, half, OFF);
    let (mut cg_late, mut cg_started) = daemon_parts::precision_phase_with(8, half, "");
    let (late, started) = daemon_parts::precision_phase_with(8, half, "");
    cg_late.extend(late);
    cg_started.extend(started);
    let (late, started) = daemon_parts::precision_phase_with(8, half, OFF);
    pg_late.extend(late);
    pg_started.extend(started);
    let (p99c, p99p) = (
        util::percentile(&cg_late, 99.0),
        util::percentile(&pg_late, 99.0),
    );
    out.push(Figure::check(
        "governed",
        "spawn lateness p99 with a cgroup per run, 8 jobs due in the same second (job's first clock read − scheduled)",
        format!("{p99c:.2} ms ({:+.2} ms against process groups)", p99c - p99p),
        "within +1 ms of process groups",
        p99c - p99p <= 1.0 && !cg_late.is_empty(),
    ));
    out.push(Figure::info(
        "governed",
        "  process groups, same phase length",
        format!("p99 {p99p:.2} ms"),
    ));
    // The median shows a cost every spawn pays (a write to cgroup.procs
    // waits for an RCU grace period when spawns are spaced out), which the
    // p99 of a loaded machine hides.
    let (p50c, p50p) = (
        util::percentile(&cg_late, 50.0),
        util::percentile(&pg_late, 50.0),
    );
    out.push(Figure::info(
        "governed",
        "  median lateness: a cgroup per run, process groups",
        format!("{p50c:.2} ms, {p50p:.2} ms ({:+.2} ms)", p50c - p50p),
    ));
    // The daemon's side of it: its "started" record (after the clone
    // returned) minus the scheduled instant.
    let (s50c, s50p) = (
        util::percentile(&cg_started, 50.0),
        util::percentile(&pg_started, 50.0),
    );
    out.push(Figure::info(
        "governed",
        "  median of the daemon's started − scheduled: a cgroup per run, process groups",
        format!("{s50c:.2} ms, {s50p:.2} ms ({:+.2} ms)", s50c - s50p),
    ));
    out
}

/// What a daemon started from here would get (its status line), from a
/// short-lived daemon.
fn probe_mode() -> String {
    let dir = util::TempDir::new("governed-probe");
    dir.write_jobs("[jobs.t]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n");
    let mut d = util::Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    let mut client = d.client();
    let mode = client
        .call(r#"{"v":1,"op":"status"}"#)
        .and_then(|v| {
            v["data"]["daemon"]["containment"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_default();
    d.stop();
    mode
}
