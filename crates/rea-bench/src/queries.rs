//! Query commands on a large history, written directly as JSON lines (and
//! rotated files, as the daemon would leave them), with no daemon running.

use std::fs;
use std::io::{BufWriter, Write};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::record::{Event, Record, RunStatus, Trigger};

use super::report::Figure;
use super::util::{self, TempDir};
use super::Settings;

const JOBS: usize = 100;
/// The job whose failures are rare and old: only in the oldest 1% of runs.
pub(crate) const RARE: &str = "job-042";
/// The writer's default rotation size.
const SEGMENT: u64 = 64 << 20;

fn job_name(i: usize) -> String {
    format!("job-{i:03}")
}

/// Writes `lines` history lines (a started and a final line per run, ~100
/// jobs, ~1% failures, a few timeouts) ending a minute ago, split into the
/// live file and rotated files of the writer's default size.
pub(crate) fn generate(dir: &TempDir, lines: usize) {
    let state = dir.state();
    fs::create_dir_all(&state).unwrap_or_else(|e| util::die(e));
    let _ = fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700));
    let runs = lines / 2;
    let end = Utc::now() - chrono::Duration::minutes(1);
    // One run every ~5 s across the whole history.
    let start = end - chrono::Duration::seconds(5 * runs as i64);
    let mut rng = fastrand::Rng::with_seed(42);
    let mut segments: Vec<std::path::PathBuf> = Vec::new();
    let mut out: Option<(BufWriter<fs::File>, u64)> = None;
    let open_segment = |segments: &mut Vec<std::path::PathBuf>| {
        let p = state.join(format!("segment-{}", segments.len()));
        let f = fs::File::create(&p).unwrap_or_else(|e| util::die(e));
        segments.push(p);
        (BufWriter::with_capacity(1 << 20, f), 0u64)
    };
    let mut line = Vec::with_capacity(1024);
    let mut emit =
        |rec: &Record, out: &mut Option<(BufWriter<fs::File>, u64)>, segments: &mut Vec<_>| {
            line.clear();
            serde_json::to_writer(&mut line, rec).unwrap_or_else(|e| util::die(e));
            line.push(b'\n');
            if out
                .as_ref()
                .is_none_or(|(_, n)| *n + line.len() as u64 > SEGMENT)
            {
                if let Some((mut w, _)) = out.take() {
                    w.flush().unwrap_or_else(|e| util::die(e));
                }
                *out = Some(open_segment(segments));
            }
            if let Some((w, n)) = out.as_mut() {
                w.write_all(&line).unwrap_or_else(|e| util::die(e));
                *n += line.len() as u64;
            }
        };
    let mut rec = Record::new(Event::DaemonStarted, start - chrono::Duration::seconds(1));
    rec.detail =
        Some(serde_json::json!({"pid": 1234, "version": "0.1.0", "file": "/etc/rea/jobs.toml"}));
    emit(&rec, &mut out, &mut segments);
    for k in 0..runs {
        let j = k % JOBS;
        let job = job_name(j);
        let scheduled: DateTime<Utc> = start + chrono::Duration::seconds(5 * k as i64);
        let started = scheduled + chrono::Duration::milliseconds(rng.i64(0..3));
        let duration = rng.u64(5..2_000);
        let ended = started + chrono::Duration::milliseconds(duration as i64);
        let old = k < runs / 100;
        let roll = rng.u32(0..1000);
        let status = if job == RARE {
            if old && roll < 100 {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            }
        } else if roll < 10 {
            RunStatus::Failed
        } else if roll < 12 {
            RunStatus::TimedOut
        } else {
            RunStatus::Succeeded
        };
        let run = format!("{:010X}{:04X}", scheduled.timestamp_millis(), k & 0xFFFF);
        let mut rec = Record::new(Event::Run, started);
        rec.job = Some(job.clone());
        rec.run = Some(run);
        rec.attempt = Some(1);
        rec.trigger = Some(Trigger::Schedule);
        rec.status = Some(RunStatus::Started);
        rec.scheduled = Some(scheduled);
        rec.started = Some(started);
        rec.waited_ms = Some(0);
        rec.pid = Some(10_000 + (k % 50_000) as u32);
        emit(&rec, &mut out, &mut segments);
        rec.ts = ended;
        rec.status = Some(status);
        rec.ended = Some(ended);
        rec.duration_ms = Some(duration);
        let (code, output) = match status {
            RunStatus::Succeeded => (Some(0), format!("synced {} rows\n", rng.u32(0..5000))),
            RunStatus::Failed => (Some(1), "error: connection refused (os error 111)\n".into()),
            _ => (None, "still waiting for lock\n".into()),
        };
        rec.exit_code = code;
        if status == RunStatus::TimedOut {
            rec.signal = Some(15);
            rec.reason = Some("timeout after 10m".into());
        }
        rec.output_bytes = Some(output.len() as u64);
        rec.output = Some(output);
        rec.max_rss_kb = Some(rng.u64(2_000..40_000));
        rec.user_cpu_ms = Some(duration / 3);
        rec.sys_cpu_ms = Some(duration / 10);
        emit(&rec, &mut out, &mut segments);
    }
    if let Some((mut w, _)) = out.take() {
        w.flush().unwrap_or_else(|e| util::die(e));
    }
    // Newest segment is the live file, the one before it .1, and so on.
    for (age, seg) in segments.iter().rev().enumerate() {
        let name = if age == 0 {
            "history.jsonl".to_string()
        } else {
            format!("history.jsonl.{age}")
        };
        fs::rename(seg, state.join(name)).unwrap_or_else(|e| util::die(e));
    }
}

fn jobs_file() -> String {
    let mut s = String::new();
    for j in 0..JOBS {
        s.push_str(&format!(
            "[jobs.{}]\nschedule = \"*/5 * * * *\"\ncommand = \"true\"\n\n",
            job_name(j)
        ));
    }
    s
}

/// (median wall, max peak RSS kB) of a command, after one warm-up run.
fn time_cmd(dir: &TempDir, args: &[&str], reps: usize) -> (Duration, u64) {
    let warm = util::measure(&mut util::rea(dir, args));
    if !warm.status.success() {
        util::die(format!("rea {args:?} failed"));
    }
    let _ = warm.stdout;
    let mut walls = Vec::new();
    for _ in 0..reps {
        walls.push(util::measure(&mut util::rea(dir, args)).wall);
    }
    (util::median(&walls), util::peak_rss_kb(dir, args))
}

pub(crate) fn queries(s: &Settings) -> Vec<Figure> {
    let sizes = [s.history_lines / 10, s.history_lines];
    let commands: [(&str, &[&str]); 3] = [
        ("`rea status` (offline, no daemon)", &["status"]),
        ("`rea history --limit 20`", &["history", "--limit", "20"]),
        (
            "`rea history job-042 --failed` (rare, old failures)",
            &["history", RARE, "--failed"],
        ),
    ];
    let mut results = Vec::new();
    for &lines in &sizes {
        eprintln!("queries: generating {lines} history lines");
        let dir = TempDir::new("queries");
        dir.write_jobs(&jobs_file());
        generate(&dir, lines);
        let files = fs::read_dir(dir.state()).map_or(0, |d| d.count());
        eprintln!(
            "queries: {files} history file(s); timing, {} runs each",
            s.reps
        );
        let mut per: Vec<(Duration, u64)> = commands
            .iter()
            .map(|(_, args)| time_cmd(&dir, args, s.reps))
            .collect();
        // What the daemon writes when it rotates a file: its index. The
        // files above were generated, not rotated, so they have none yet.
        let t = std::time::Instant::now();
        let mut indexed = 0u64;
        for n in 1..=99 {
            let path = dir.state().join(format!("history.jsonl.{n}"));
            if path.exists() {
                rea_store::history::index_file(&dir.state(), &path)
                    .unwrap_or_else(|e| util::die(e));
                indexed += 1;
            }
        }
        let index_time = t.elapsed();
        per.push(time_cmd(&dir, commands[2].1, s.reps));
        per.push((index_time, indexed));
        results.push((lines, files, per));
    }
    let mut out = Vec::new();
    let (small, big) = (&results[0], &results[1]);
    let (indexed, n_indexed) = big.2[4];
    let (indexed_small, _) = small.2[4];
    out.push(Figure::check(
        "queries",
        format!(
            "`rea history {RARE} --failed` with the rotated files indexed (as rotation leaves them), {} lines, median of {}",
            big.0, s.reps
        ),
        format!(
            "{} ({} at {} lines)",
            util::ms(big.2[3].0),
            util::ms(small.2[3].0),
            small.0
        ),
        "≤ 100 ms",
        big.2[3].0 <= Duration::from_millis(100),
    ));
    out.push(Figure::info(
        "queries",
        format!(
            "  indexing the {n_indexed} rotated file(s) (once each, at rotation, off the loop)"
        ),
        format!(
            "{} ({} at {} lines)",
            util::ms(indexed),
            util::ms(indexed_small),
            small.0
        ),
    ));
    for (i, (label, _)) in commands.iter().enumerate() {
        let (wall, rss_big) = big.2[i];
        let (wall_small, rss_small) = small.2[i];
        out.push(Figure::check(
            "queries",
            format!(
                "{label}, {} lines in {} files, warm cache, median of {}",
                big.0, big.1, s.reps
            ),
            format!(
                "{} ({} at {} lines)",
                util::ms(wall),
                util::ms(wall_small),
                small.0
            ),
            "≤ 100 ms",
            wall <= Duration::from_millis(100),
        ));
        out.push(Figure::check(
            "queries",
            format!("  peak RSS of the same, {} vs {} lines", big.0, small.0),
            format!("{} vs {}", util::mb(rss_big), util::mb(rss_small)),
            "independent of history size",
            rss_big <= rss_small + rss_small / 5 + 1024,
        ));
    }
    out
}
