//! One-shot jobs at volume: a million pending (memory, restart, the
//! engine's submit/cancel), durable submissions pipelined over one
//! connection (group commit), and ten thousand due in the same second.

use std::collections::HashMap;
use std::fs;
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};

use super::report::Figure;
use super::throughput::Tail;
use super::util::{self, Client, Daemon, TempDir};
use super::Settings;

const JOBS: &str = "[daemon]\nmax_concurrent = 64\n";

/// Writes `<state>/oneshots.jsonl` directly, in the journal's line format
/// (`src/oneshot.rs`, `Line::Add`): `n` one-shots `true`, due between one
/// hour and a day from now, so none fires while they are measured.
fn write_journal(state: &Path, n: usize) {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state)
        .unwrap_or_else(|e| util::die(format!("{}: {e}", state.display())));
    let path = state.join("oneshots.jsonl");
    let file = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| util::die(format!("{}: {e}", path.display())));
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let now = Utc::now();
    let submitted = now.to_rfc3339_opts(SecondsFormat::Millis, true);
    for i in 0..n {
        let due = now + chrono::Duration::seconds(3600 + (i % 82_800) as i64);
        let _ = writeln!(
            w,
            r#"{{"op":"add","job":{{"id":"shot-{i:07}","argv":["true"],"dir":"/","due":"{}","submitted":"{submitted}"}}}}"#,
            due.to_rfc3339_opts(SecondsFormat::Secs, true)
        );
    }
    w.flush()
        .unwrap_or_else(|e| util::die(format!("{}: {e}", path.display())));
}

/// Asks for the pending count (`limit` 1, so the answer stays small).
fn pending_count(c: &mut Client) -> Option<u64> {
    c.call(r#"{"v":1,"op":"pending","limit":1}"#)
        .and_then(|r| r["data"]["pending"].as_u64())
}

/// Start → ping answered, start → `pending` reports `n`, RSS and VmHWM (kB)
/// half a second later, and one `pending` round trip.
fn start_with_pending(dir: &TempDir, n: usize) -> (Duration, Duration, u64, u64, Duration) {
    let mut d = Daemon::spawn(dir);
    let ping = d.wait_ready(Duration::from_secs(120));
    let mut c = d.client();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if pending_count(&mut c) == Some(n as u64) {
            break;
        }
        if Instant::now() > deadline {
            util::die(format!("the daemon did not report {n} pending one-shots"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let pending = d.spawned_at.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let rss = util::proc_status_kb(d.pid(), "VmRSS").unwrap_or(0);
    let hwm = util::proc_status_kb(d.pid(), "VmHWM").unwrap_or(0);
    let t = Instant::now();
    let _ = pending_count(&mut c);
    let query = t.elapsed();
    // "Kill the daemon": the next start is a restart after a crash.
    d.kill();
    (ping, pending, rss, hwm, query)
}

fn ns_per(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e9 / n.max(1) as f64
}

/// The library's side of a million pending: replaying the journal,
/// restoring into the engine, and `Engine::submit` / `cancel_oneshot`.
fn library(dir: &TempDir, n: usize) -> Vec<Figure> {
    use super::alloc::live_bytes;
    use rea_core::engine::{Engine, Recovered};
    let mut out = Vec::new();
    let held = |before: usize| live_bytes().saturating_sub(before) as f64 / n as f64;

    let before = live_bytes();
    let t = Instant::now();
    let replayed = rea_store::oneshots::Journal::open(&dir.state())
        .unwrap_or_else(|e| util::die(format!("journal: {e}")));
    let open = t.elapsed();
    let open_held = held(before);
    if replayed.pending.len() != n {
        util::die(format!(
            "journal replay found {} one-shots, not {n}",
            replayed.pending.len()
        ));
    }
    out.push(Figure::info(
        "oneshots",
        format!("  phase: `Journal::open` replaying {n} lines"),
        format!("{} ({open_held:.0} bytes/one-shot held)", util::ms(open)),
    ));

    let config = rea_config::parse(JOBS.as_bytes(), &dir.jobs())
        .unwrap_or_else(|_| util::die("the one-shot benchmark's job file does not parse"));
    let now = Utc::now();
    let mut engine = Engine::new(&config.plan(), 1);
    let _ = engine.start(now, Recovered::default());
    let shots = replayed.pending;
    drop(replayed.journal);
    let before = live_bytes();
    let t = Instant::now();
    let _ = engine.restore(shots, now);
    let restore = t.elapsed();
    out.push(Figure::info(
        "oneshots",
        format!("  phase: `Engine::restore` of {n}"),
        format!(
            "{} ({:.0} bytes/one-shot held beyond the replayed `OneShot`s)",
            util::ms(restore),
            held(before)
        ),
    ));
    drop(engine);

    // Submit into an engine that already holds n, then cancel them all in
    // random order: the daemon's work per request, without socket or journal.
    let mut engine = Engine::new(&config.plan(), 2);
    let _ = engine.start(now, Recovered::default());
    let template = rea_core::oneshot::OneShot {
        id: "".into(),
        argv: vec!["true".into()].into(),
        shell: false,
        dir: std::path::Path::new("/").into(),
        due: now,
        submitted: now,
        rare: None,
    };
    let ids: Vec<String> = (0..n).map(|i| format!("shot-{i:07}")).collect();
    let shots: Vec<rea_core::oneshot::OneShot> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| rea_core::oneshot::OneShot {
            id: id.as_str().into(),
            due: now + chrono::Duration::seconds(3600 + (i % 82_800) as i64),
            ..template.clone()
        })
        .collect();
    let t = Instant::now();
    for shot in shots {
        if engine.submit(shot, now).is_err() {
            util::die("Engine::submit refused a fresh id");
        }
    }
    let submit = ns_per(t.elapsed(), n);
    let mut order: Vec<usize> = (0..n).collect();
    fastrand::Rng::with_seed(11).shuffle(&mut order);
    let t = Instant::now();
    for i in order {
        if engine.cancel_oneshot(&ids[i], false, now).is_err() {
            util::die("Engine::cancel_oneshot did not find a pending one-shot");
        }
    }
    let cancel = ns_per(t.elapsed(), n);
    for (what, ns) in [
        ("`Engine::submit` (heap insert + id map)", submit),
        ("`Engine::cancel_oneshot` (random order)", cancel),
    ] {
        out.push(Figure::check(
            "oneshots",
            format!("{what}, up to {n} pending, per op, in-process"),
            format!("{ns:.0} ns ({:.1} M ops/s)", 1e3 / ns),
            "≤ 2 µs",
            ns <= 2000.0,
        ));
    }
    out
}

/// A million (by default) pending one-shots: RSS, restart, per-op costs.
fn pending(s: &Settings, heap: &[Figure]) -> Vec<Figure> {
    let n = s.oneshots_pending;
    eprintln!("oneshots: {n} pending, {} restarts", s.reps);
    let dir = TempDir::new("oneshots");
    dir.write_jobs(JOBS);
    let t = Instant::now();
    write_journal(&dir.state(), n);
    let wrote = t.elapsed();
    let size = fs::metadata(dir.state().join("oneshots.jsonl")).map_or(0, |m| m.len());

    let mut ping = Vec::new();
    let mut ready = Vec::new();
    let mut rss = Vec::new();
    let mut hwm = Vec::new();
    let mut query = Vec::new();
    for _ in 0..s.reps {
        let (p, r, m, h, q) = start_with_pending(&dir, n);
        ping.push(p);
        ready.push(r);
        rss.push(m as f64);
        hwm.push(h as f64);
        query.push(q);
    }
    let rss = util::median_f(&rss) as u64;
    let hwm = util::median_f(&hwm) as u64;
    let ready = util::median(&ready);
    let mut out = vec![
        Figure::check(
            "oneshots",
            format!(
                "RSS with {n} pending one-shots loaded (VmRSS; VmHWM {}), median of {}",
                util::mb(hwm),
                s.reps
            ),
            util::mb(rss),
            "≤ 400 MB",
            rss <= 400 * 1024,
        ),
        Figure::check(
            "oneshots",
            format!(
                "restart (after SIGKILL) → ping answered and `pending` = {n}, median of {}",
                s.reps
            ),
            util::ms(ready),
            "≤ 5 s",
            ready <= Duration::from_secs(5),
        ),
        Figure::info(
            "oneshots",
            "  of which start → ping answered",
            util::ms(util::median(&ping)),
        ),
        Figure::info(
            "oneshots",
            format!("  one `pending` request (`limit` 1) with {n} pending"),
            util::ms(util::median(&query)),
        ),
        Figure::info(
            "oneshots",
            format!("  journal written directly: {n} `add` lines"),
            format!(
                "{:.0} MB in {}",
                size as f64 / 1024.0 / 1024.0,
                util::ms(wrote)
            ),
        ),
    ];
    out.extend(library(&dir, n));
    out.extend(
        heap.iter()
            .filter(|f| f.what.starts_with("insert") || f.what.starts_with("cancel"))
            .map(|f| {
                let mut f = f.clone();
                f.part = "oneshots";
                f.what = format!("dispatcher heap {}", f.what);
                f
            }),
    );
    out
}

/// One round of `n` pipelined submissions on a fresh daemon: time until the
/// n-th `ok`.
fn submit_round(
    dir: &TempDir,
    n: usize,
    line: impl Fn(usize) -> String + Send + 'static,
) -> Duration {
    let mut d = Daemon::spawn(dir);
    d.wait_ready(Duration::from_secs(30));
    let took = pipeline(&dir.state(), n, line);
    d.stop();
    took
}

/// Writes `n` request lines from one thread, reads the answers on this one;
/// the time until the n-th answer (every one must be `ok`).
pub(crate) fn pipeline(
    state: &Path,
    n: usize,
    line: impl Fn(usize) -> String + Send + 'static,
) -> Duration {
    let mut client = Client::connect(state).unwrap_or_else(|e| util::die(format!("connect: {e}")));
    let mut writer = client.try_clone_writer();
    let start = Instant::now();
    let sender = std::thread::spawn(move || {
        let mut buf = Vec::with_capacity(1 << 16);
        for i in 0..n {
            buf.extend_from_slice(line(i).as_bytes());
            buf.push(b'\n');
            if buf.len() >= 1 << 16 || i + 1 == n {
                if writer.write_all(&buf).is_err() {
                    return;
                }
                buf.clear();
            }
        }
    });
    for i in 0..n {
        match client.recv() {
            Some(r) if r["ok"] == true => {}
            other => util::die(format!("submission {i} of {n} not acknowledged: {other:?}")),
        }
    }
    let took = start.elapsed();
    let _ = sender.join();
    took
}

fn submit_line(i: usize) -> String {
    format!(r#"{{"v":1,"op":"submit","name":"s{i}","argv":["true"],"dir":"/","in_ms":3600000}}"#)
}

/// fdatasync calls for `n` submissions, counted by strace around a separate
/// traced round. None without strace.
fn fsyncs(n: usize) -> Option<(u64, Duration)> {
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| Path::new(p).is_file())?;
    let dir = TempDir::new("submit-strace");
    dir.write_jobs(JOBS);
    // Not next to the job file: the daemon watches that directory.
    let elsewhere = TempDir::new("strace-out");
    let counts = elsewhere.path().join("strace.out");
    let log = fs::File::create(dir.path().join("daemon.log")).ok()?;
    let mut child = Command::new(strace)
        // With seccomp-bpf only the traced call stops the daemon, so the
        // round runs at nearly full speed.
        .args([
            "-f",
            "--seccomp-bpf",
            "-qq",
            "-c",
            "-e",
            "trace=fdatasync",
            "-o",
        ])
        .arg(&counts)
        .arg(util::rea_bin())
        .arg("-f")
        .arg(dir.jobs())
        .arg("--state-dir")
        .arg(dir.state())
        .arg("run")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .ok()?;
    let ready = util::wait_until(Duration::from_secs(30), Duration::from_millis(5), || {
        Client::connect(&dir.state())
            .ok()
            .and_then(|mut c| c.call(r#"{"v":1,"op":"ping"}"#))
            .is_some_and(|r| r["ok"] == true)
    });
    let pid = Client::connect(&dir.state())
        .ok()
        .and_then(|mut c| c.call(r#"{"v":1,"op":"ping"}"#))
        .and_then(|r| r["data"]["pid"].as_i64());
    let (true, Some(pid)) = (ready, pid) else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    let before = count_fdatasync(&counts);
    let took = pipeline(&dir.state(), n, submit_line);
    // SAFETY: kill(2) on the traced daemon, a grandchild of ours.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let _ = child.wait();
    let total = count_fdatasync(&counts)?;
    Some((total.saturating_sub(before.unwrap_or(0)), took))
}

fn count_fdatasync(path: &Path) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.trim_end().ends_with("fdatasync"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
}

/// Durable submissions pipelined over one connection.
fn submissions(s: &Settings) -> Vec<Figure> {
    let n = s.oneshots_submits;
    eprintln!("oneshots: {n} pipelined submissions, {} rounds", s.reps);
    let mut took = Vec::new();
    for _ in 0..s.reps {
        let dir = TempDir::new("submit");
        dir.write_jobs(JOBS);
        took.push(submit_round(&dir, n, submit_line));
    }
    let t = util::median(&took);
    let rate = n as f64 / t.as_secs_f64();
    let mut out = vec![Figure::check(
        "oneshots",
        format!(
            "{n} `submit`s pipelined on one connection, until the {n}th durable `ok`; median of {}",
            s.reps
        ),
        format!("{} = {rate:.0} /s", util::ms(t)),
        "≥ 50,000 /s",
        rate >= 50_000.0,
    )];
    match fsyncs(n) {
        Some((syncs, traced)) => out.push(Figure::info(
            "oneshots",
            "  fdatasync calls for them (strace -c, a separate traced round)",
            format!(
                "{syncs} ({:.0} submissions per sync; traced round {:.0} /s)",
                n as f64 / syncs.max(1) as f64,
                n as f64 / traced.as_secs_f64()
            ),
        )),
        None => out.push(Figure::info(
            "oneshots",
            "  fdatasync calls for them",
            "not counted (no strace)",
        )),
    }
    out
}

/// What the history says about one one-shot.
#[derive(Default)]
struct Seen {
    started: usize,
    finals: usize,
    runs: Vec<String>,
    failed: usize,
}

/// `n` one-shots `true` with the same `at`, max_concurrent = 64.
fn same_second(s: &Settings) -> Vec<Figure> {
    let n = s.oneshots_fire;
    let limit = 64;
    eprintln!("oneshots: {n} due in the same second");
    let dir = TempDir::new("fire");
    dir.write_jobs(JOBS);
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    // A whole second far enough ahead for every submission to be in.
    let at_ms = (Utc::now() + chrono::Duration::seconds(4)).timestamp() * 1000 + 1000;
    let at = DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_else(Utc::now);
    let at_text = at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let text = at_text.clone();
    pipeline(&dir.state(), n, move |i| {
        format!(
            r#"{{"v":1,"op":"submit","name":"fire-{i:05}","argv":["true"],"dir":"/","at":"{text}"}}"#
        )
    });
    let submitted_by = Utc::now();
    if submitted_by >= at {
        util::die(format!(
            "the {n} submissions took past their due time {at_text}; nothing measured"
        ));
    }
    let history = dir.state().join("history.jsonl");
    let mut tail = Tail::default();
    let deadline = Instant::now() + Duration::from_secs(600);
    while tail.finals < n {
        if Instant::now() > deadline {
            util::die(format!(
                "only {} of {n} one-shots finished in 600 s",
                tail.finals
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
        tail.poll(&history);
    }
    // Anything extra (a second run) would come right behind; give it time.
    std::thread::sleep(Duration::from_millis(500));
    let mut c = d.client();
    let left = pending_count(&mut c);
    d.stop();

    let text = fs::read_to_string(&history).unwrap_or_default();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut running = 0usize;
    let mut max_running = 0usize;
    let mut first_start: Option<DateTime<Utc>> = None;
    let mut last_end: Option<DateTime<Utc>> = None;
    let mut late = Vec::new();
    for line in text.lines().filter(|l| l.contains("\"event\":\"run\"")) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            util::die("a history line does not parse");
        };
        let (Some(job), Some(status)) = (v["job"].as_str(), v["status"].as_str()) else {
            continue;
        };
        let time = |k: &str| v[k].as_str().and_then(|t| t.parse::<DateTime<Utc>>().ok());
        let e = seen.entry(job.to_string()).or_default();
        if let Some(run) = v["run"].as_str() {
            if !e.runs.iter().any(|r| r == run) {
                e.runs.push(run.to_string());
            }
        }
        // The daemon writes `started` after the spawn and the final line
        // when the run is reaped, on its one thread: counting in file order
        // is the concurrency it had.
        if status == "started" {
            e.started += 1;
            running += 1;
            max_running = max_running.max(running);
            if let Some(t) = time("started") {
                first_start = Some(first_start.map_or(t, |f| f.min(t)));
                late.push((t - at).num_milliseconds() as f64);
            }
        } else {
            e.finals += 1;
            running = running.saturating_sub(1);
            if status != "succeeded" {
                e.failed += 1;
            }
            if let Some(t) = time("ended") {
                last_end = Some(last_end.map_or(t, |l| l.max(t)));
            }
        }
    }
    let lost = (0..n)
        .filter(|i| !seen.contains_key(&format!("fire-{i:05}")))
        .count();
    let twice = seen
        .values()
        .filter(|e| e.started != 1 || e.finals != 1 || e.runs.len() != 1)
        .count();
    let failed: usize = seen.values().map(|e| e.failed).sum();
    if seen.len() != n || lost > 0 || twice > 0 || failed > 0 || max_running > limit {
        util::die(format!(
            "{n} one-shots due together: {} seen, {lost} lost, {twice} not exactly once, \
             {failed} failed, {max_running} at once (limit {limit})",
            seen.len()
        ));
    }
    if left != Some(0) {
        util::die(format!("{left:?} one-shots still pending after all ran"));
    }
    let (Some(first), Some(last)) = (first_start, last_end) else {
        util::die("no start or end times in the history");
    };
    let span = (last - at).to_std().unwrap_or_default();
    vec![
        Figure::info(
            "oneshots",
            format!(
                "{n} one-shots `true` with the same `at`, max_concurrent = {limit}: checked from the history"
            ),
            format!(
                "all {n} ran exactly once (one run id, one final line, all succeeded), at most {max_running} at once"
            ),
        ),
        Figure::info(
            "oneshots",
            "  due → last one finished (throughput)",
            format!(
                "{} ({:.0} runs/s); first started {} after due",
                util::ms(span),
                n as f64 / span.as_secs_f64(),
                util::ms((first - at).to_std().unwrap_or_default())
            ),
        ),
        Figure::info(
            "oneshots",
            "  started − due over the one-shots",
            format!(
                "p50 {:.0} / p99 {:.0} / max {:.0} ms",
                util::percentile(&late, 50.0),
                util::percentile(&late, 99.0),
                late.iter().cloned().fold(f64::NAN, f64::max)
            ),
        ),
    ]
}

pub(crate) fn oneshots(s: &Settings, heap: &[Figure]) -> Vec<Figure> {
    let mut out = pending(s, heap);
    out.extend(submissions(s));
    out.extend(same_second(s));
    out
}
