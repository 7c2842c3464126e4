//! `rea status` at scale (issue 21): 100,000 realistic jobs and 1,000,000
//! history records. The new `rea status` (the overview and a page of job
//! summaries) beside the old full `status` answer in the same run (what
//! `rea status --json` still asks for), the daemon's RSS after 100 status
//! queries and 10 subscribers, how soon a subscriber sees a run's end,
//! and the wakeups 10 idle subscribers cost a quiet daemon.

use std::fs;
use std::io::{BufWriter, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rea_core::record::{Event, Record, RunStatus, Trigger};

use super::report::Figure;
use super::scale::{big_file, Shape};
use super::util::{self, Client, Daemon, TempDir};
use super::Settings;

/// `rea status` queries before the daemon's RSS is read again.
const QUERIES: usize = 100;
/// Subscribers held open.
const SUBSCRIBERS: usize = 10;

/// The realistic file's job names (`scale::realistic_file`).
fn job_name(i: usize) -> String {
    let team = ["billing", "search", "ops", "data", "web", "mail"][i % 6];
    format!("{team}-task-{i:06}")
}

/// `lines` history records (a started and a final line per run) spread
/// over the jobs, a run every 5 ms ending a minute ago (so each job's last
/// run is recent and start-up has little to catch up), between a previous
/// daemon's start and stop lines: about 1% failed, a few timed out.
fn write_history(dir: &TempDir, jobs: usize, lines: usize) {
    let state = dir.state();
    fs::create_dir_all(&state).unwrap_or_else(|e| util::die(e));
    let _ = fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700));
    let f = fs::File::create(state.join("history.jsonl")).unwrap_or_else(|e| util::die(e));
    let mut out = BufWriter::with_capacity(1 << 20, f);
    let runs = lines / 2;
    let end = Utc::now() - chrono::Duration::minutes(1);
    let start = end - chrono::Duration::milliseconds(5 * runs as i64);
    let mut rng = fastrand::Rng::with_seed(21);
    let mut write = |rec: &Record| {
        serde_json::to_writer(&mut out, rec).unwrap_or_else(|e| util::die(e));
        out.write_all(b"\n").unwrap_or_else(|e| util::die(e));
    };
    let mut daemon = Record::new(Event::DaemonStarted, start - chrono::Duration::seconds(1));
    daemon.detail = Some(serde_json::json!({"pid": 1234, "version": "0.1.0"}));
    write(&daemon);
    for k in 0..runs {
        let job = job_name(k % jobs);
        let scheduled: DateTime<Utc> = start + chrono::Duration::milliseconds(5 * k as i64);
        let duration = rng.u64(5..5_000);
        let ended = scheduled + chrono::Duration::milliseconds(duration as i64);
        let roll = rng.u32(0..1000);
        let status = match roll {
            0..=9 => RunStatus::Failed,
            10..=11 => RunStatus::TimedOut,
            _ => RunStatus::Succeeded,
        };
        let mut rec = Record::new(Event::Run, scheduled);
        rec.job = Some(job);
        rec.run = Some(format!(
            "{:010x}{:04x}",
            scheduled.timestamp_millis(),
            k & 0xffff
        ));
        rec.attempt = Some(1);
        rec.trigger = Some(Trigger::Schedule);
        rec.status = Some(RunStatus::Started);
        rec.scheduled = Some(scheduled);
        rec.started = Some(scheduled);
        rec.pid = Some(10_000 + (k % 50_000) as u32);
        write(&rec);
        rec.ts = ended;
        rec.status = Some(status);
        rec.ended = Some(ended);
        rec.duration_ms = Some(duration);
        rec.exit_code = (status != RunStatus::TimedOut).then_some(i32::from(roll < 10));
        rec.output = Some("ok\n".into());
        rec.output_bytes = Some(3);
        write(&rec);
    }
    let mut stopped = Record::new(Event::DaemonStopped, end + chrono::Duration::seconds(6));
    stopped.reason = Some("signal".into());
    write(&stopped);
    out.flush().unwrap_or_else(|e| util::die(e));
}

fn rss(d: &Daemon) -> u64 {
    util::proc_status_kb(d.pid(), "VmRSS").unwrap_or(0)
}

/// A subscriber: hangs up when dropped.
struct Held(std::os::unix::net::UnixStream);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// A subscriber that reads every line on a thread of its own, noting how
/// long after its `at` each `run_ended` arrived.
fn subscribe(dir: &TempDir, latencies: &Arc<Mutex<Vec<f64>>>) -> Held {
    let mut c = Client::connect(&dir.state()).unwrap_or_else(|e| util::die(e));
    let first = c.call(r#"{"v":1,"op":"subscribe"}"#);
    if first.as_ref().is_none_or(|v| v["ok"] != true) {
        util::die(format!("subscribe refused: {first:?}"));
    }
    let held = Held(c.try_clone_writer());
    let latencies = Arc::clone(latencies);
    std::thread::spawn(move || {
        while let Some(v) = c.recv() {
            let data = &v["data"];
            if data["event"] == "run_ended" {
                if let Some(at) = data["at"]
                    .as_str()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                {
                    let late = (Utc::now() - at.with_timezone(&Utc)).num_milliseconds();
                    latencies
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(late as f64);
                }
            }
        }
    });
    held
}

pub(crate) fn status(s: &Settings) -> Vec<Figure> {
    let jobs = s.scale_jobs;
    let lines = s.history_lines;
    eprintln!("status: {jobs} realistic jobs, {lines} history records");
    let dir = TempDir::new("status");
    dir.write_jobs(&big_file(jobs, Shape::Realistic));
    let began = Instant::now();
    write_history(&dir, jobs, lines);
    eprintln!(
        "status: history written in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let mut d = Daemon::spawn(&dir);
    let ready = d.wait_ready(Duration::from_secs(900));
    std::thread::sleep(Duration::from_secs(3));
    let rss0 = rss(&d);

    // The new `rea status`: the overview and the first page.
    let mut walls = Vec::with_capacity(QUERIES);
    let mut bytes = 0;
    for _ in 0..QUERIES {
        let c = util::measure(&mut util::rea(&dir, &["status"]));
        if !c.status.success() {
            util::die("rea status failed");
        }
        bytes = c.stdout.len();
        walls.push(c.wall);
    }
    let client_rss = util::peak_rss_kb(&dir, &["status"]);
    let rss_queries = rss(&d);
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let subs: Vec<Held> = (0..SUBSCRIBERS)
        .map(|_| subscribe(&dir, &latencies))
        .collect();
    std::thread::sleep(Duration::from_secs(10));
    let rss_subs = rss(&d);
    let ms_sorted: Vec<f64> = walls.iter().map(|w| w.as_secs_f64() * 1e3).collect();
    let median = util::median(&walls);
    let p99 = util::percentile(&ms_sorted, 99.0);
    let late: Vec<f64> = latencies.lock().unwrap_or_else(|e| e.into_inner()).clone();

    // Today's baseline, same daemon, after: the complete `status` answer.
    let mut old_walls = Vec::new();
    let mut old_bytes = 0;
    for _ in 0..s.reps {
        let c = util::measure(&mut util::rea(&dir, &["status", "--json"]));
        old_bytes = c.stdout.len();
        old_walls.push(c.wall);
    }
    let old_client_rss = util::peak_rss_kb(&dir, &["status", "--json"]);
    let rss_old = rss(&d);
    drop(subs);
    d.stop();

    // A quiet daemon with 10 idle subscribers: its wakeups.
    let idle = TempDir::new("status-idle");
    let mut text = String::from("[daemon]\nmax_concurrent = 8\n\n");
    for i in 0..1000 {
        text.push_str(&format!(
            "[jobs.idle-{i:04}]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\n"
        ));
    }
    idle.write_jobs(&text);
    let mut q = Daemon::spawn(&idle);
    q.wait_ready(Duration::from_secs(30));
    let quiet = Arc::new(Mutex::new(Vec::new()));
    let idle_subs: Vec<Held> = (0..SUBSCRIBERS).map(|_| subscribe(&idle, &quiet)).collect();
    std::thread::sleep(Duration::from_secs(1));
    let (v0, i0, threads) = util::ctxt_switches(q.pid());
    std::thread::sleep(Duration::from_secs(s.idle_secs));
    let (v1, i1, _) = util::ctxt_switches(q.pid());
    drop(idle_subs);
    q.stop();

    let delta = |kb: u64| (kb as f64 - rss0 as f64) * 100.0 / rss0.max(1) as f64;
    let mut figures = vec![
        Figure::info(
            "status",
            format!("daemon ready with {jobs} jobs and {lines} history records"),
            util::ms(ready),
        ),
        Figure::check(
            "status",
            format!("`rea status` (overview + first page), median of {QUERIES}; p99 {p99:.1} ms"),
            util::ms(median),
            "≤ 50 ms",
            median <= Duration::from_millis(50),
        ),
        Figure::info(
            "status",
            "baseline: the complete `status` answer (`rea status --json`), same daemon, median",
            format!(
                "{} ({} bytes; `rea status` prints {bytes})",
                util::ms(util::median(&old_walls)),
                old_bytes
            ),
        ),
        Figure::info(
            "status",
            "client peak RSS: `rea status` / baseline `rea status --json`",
            format!("{} / {}", util::mb(client_rss), util::mb(old_client_rss)),
        ),
        Figure::check(
            "status",
            format!(
                "daemon RSS after {QUERIES} `rea status` and {SUBSCRIBERS} subscribers (from {})",
                util::mb(rss0)
            ),
            format!(
                "{} ({:+.1}%; {:+.1}% after the queries alone)",
                util::mb(rss_subs),
                delta(rss_subs),
                delta(rss_queries)
            ),
            "±5%",
            delta(rss_subs).abs() <= 5.0,
        ),
        Figure::info(
            "status",
            "baseline: daemon RSS after the complete answer too",
            format!("{} ({:+.1}%)", util::mb(rss_old), delta(rss_old)),
        ),
        Figure::check(
            "status",
            format!(
                "{SUBSCRIBERS} idle subscribers, quiet daemon (1,000 jobs none due): voluntary context switches over {} s, all {threads} threads",
                s.idle_secs
            ),
            format!("{} (+{} involuntary)", v1 - v0, i1 - i0),
            "0 wakeups",
            v1 == v0,
        ),
    ];
    if late.is_empty() {
        figures.push(Figure::info(
            "status",
            "a run's end seen by a subscriber",
            "no run ended while subscribed",
        ));
    } else {
        let max = late.iter().copied().fold(0.0, f64::max);
        figures.push(Figure::check(
            "status",
            format!(
                "a run's end seen by a subscriber after it ended: p99 of {} (`at` has ms precision)",
                late.len()
            ),
            format!("{:.0} ms (max {max:.0} ms)", util::percentile(&late, 99.0)),
            "≤ 1 s",
            util::percentile(&late, 99.0) <= 1000.0,
        ));
    }
    figures
}
