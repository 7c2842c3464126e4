//! Benchmarks of a running daemon: fire precision, idle cost, footprint.

use std::fs;
use std::os::unix::process::CommandExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

use super::report::Figure;
use super::util::{self, Daemon, TempDir};
use super::Settings;

/// The probe: rea-bench doubles as the jobs' "shell" (`rea-bench -c probe`),
/// so the first instruction of the job is reading the clock, with no shell
/// start-up or `date` fork in between. It appends
/// `<REA_SCHEDULED_AT> <unix ns>` to `$REA_BENCH_PROBE/<job>`.
pub(crate) fn probe(now: SystemTime) -> ! {
    use std::io::Write;
    let ns = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::var("REA_BENCH_PROBE").unwrap_or_default();
    let job = std::env::var("REA_JOB").unwrap_or_default();
    let sched = std::env::var("REA_SCHEDULED_AT").unwrap_or_default();
    if !dir.is_empty() && !job.is_empty() {
        if let Ok(mut f) = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(format!("{dir}/{job}"))
        {
            let _ = f.write_all(format!("{sched} {ns}\n").as_bytes());
        }
    }
    std::process::exit(0)
}

fn jobs_file(n: usize, schedule: &str, max_concurrent: usize, probe_dir: Option<&str>) -> String {
    let mut s = format!("[daemon]\nmax_concurrent = {max_concurrent}\n\n");
    if let Some(dir) = probe_dir {
        let exe = std::env::current_exe().unwrap_or_else(|e| util::die(e));
        s.push_str(&format!(
            "[defaults]\nshell = {:?}\nenv = {{ REA_BENCH_PROBE = {dir:?} }}\n\n",
            exe.display().to_string()
        ));
    }
    for i in 0..n {
        s.push_str(&format!(
            "[jobs.j{i:04}]\nschedule = \"{schedule}\"\ncommand = \"probe\"\n\n"
        ));
    }
    s
}

/// Lateness samples in ms: (job's first clock reading − scheduled instant,
/// daemon's recorded start − scheduled instant).
fn precision_phase(jobs: usize, secs: u64) -> (Vec<f64>, Vec<f64>) {
    precision_phase_with(jobs, secs, "")
}

/// [`precision_phase`] with `daemon` added to the `[daemon]` table.
pub(crate) fn precision_phase_with(jobs: usize, secs: u64, daemon: &str) -> (Vec<f64>, Vec<f64>) {
    precision_phase_edit(jobs, secs, daemon, "", &mut || {})
}

/// [`precision_phase_with`], with `defaults` added to the `[defaults]`
/// table too, and `before_stop` called while the daemon still runs.
pub(crate) fn precision_phase_edit(
    jobs: usize,
    secs: u64,
    daemon: &str,
    defaults: &str,
    before_stop: &mut dyn FnMut(),
) -> (Vec<f64>, Vec<f64>) {
    let dir = TempDir::new("precision");
    let probe_dir = dir.path().join("probe");
    fs::create_dir_all(&probe_dir).unwrap_or_else(|e| util::die(e));
    let file = jobs_file(
        jobs,
        "* * * * * *",
        jobs.max(8) * 2,
        Some(&probe_dir.display().to_string()),
    )
    .replacen("[daemon]\n", &format!("[daemon]\n{daemon}"), 1)
    .replacen("[defaults]\n", &format!("[defaults]\n{defaults}"), 1);
    dir.write_jobs(&file);
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(secs));
    before_stop();
    d.stop();
    let mut job_late = Vec::new();
    for entry in fs::read_dir(&probe_dir).into_iter().flatten().flatten() {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Some((sched, ns)) = line.split_once(' ') else {
                continue;
            };
            let (Ok(sched), Ok(ns)) = (DateTime::parse_from_rfc3339(sched), ns.parse::<i128>())
            else {
                continue;
            };
            let sched_ns = sched.timestamp_nanos_opt().unwrap_or(0) as i128;
            job_late.push((ns - sched_ns) as f64 / 1e6);
        }
    }
    let mut daemon_late = Vec::new();
    let history = fs::read_to_string(dir.state().join("history.jsonl")).unwrap_or_default();
    for line in history
        .lines()
        .filter(|l| l.contains("\"status\":\"started\""))
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let t = |k: &str| v[k].as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok());
        if let (Some(s), Some(st)) = (t("scheduled"), t("started")) {
            daemon_late.push((st - s).num_microseconds().unwrap_or(0) as f64 / 1e3);
        }
    }
    (job_late, daemon_late)
}

/// The same probe spawned directly by rea-bench, `jobs` at a time, `rounds`
/// times: what fork+exec of the probe costs on this machine without rea, so
/// the daemon's share of the lateness can be told apart.
pub(crate) fn exec_baseline(jobs: usize, rounds: usize) -> Vec<f64> {
    spawn_baseline(jobs, rounds, false)
}

/// [`exec_baseline`], each round at a whole second that the loop sleeps until
/// (`clock_nanosleep`, absolute, on the realtime clock): the smallest cron
/// there is, so that waking up at the instant, which any scheduler pays and
/// `exec_baseline` does not, is in the baseline too.
fn timed_baseline(jobs: usize, rounds: usize) -> Vec<f64> {
    spawn_baseline(jobs, rounds, true)
}

/// Sleeps until the next whole second of the realtime clock; returns it.
fn sleep_to_next_second() -> DateTime<Utc> {
    let now = Utc::now().timestamp();
    let target = libc::timespec {
        tv_sec: (now + 1) as libc::time_t,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_REALTIME,
            libc::TIMER_ABSTIME,
            &target,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
    DateTime::from_timestamp(now + 1, 0).unwrap_or_else(Utc::now)
}

fn spawn_baseline(jobs: usize, rounds: usize, at_second: bool) -> Vec<f64> {
    let dir = TempDir::new("baseline");
    let exe = std::env::current_exe().unwrap_or_else(|e| util::die(e));
    let mut late = Vec::new();
    for r in 0..rounds {
        let t0 = if at_second {
            sleep_to_next_second()
        } else {
            Utc::now()
        };
        let stamp = t0.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let children: Vec<_> = (0..jobs)
            .map(|j| {
                std::process::Command::new(&exe)
                    .args(["-c", "probe"])
                    .env("REA_BENCH_PROBE", dir.path())
                    .env("REA_JOB", format!("b{r}-{j}"))
                    .env("REA_SCHEDULED_AT", &stamp)
                    .process_group(0)
                    .spawn()
                    .unwrap_or_else(|e| util::die(e))
            })
            .collect();
        for mut c in children {
            let _ = c.wait();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for entry in fs::read_dir(dir.path()).into_iter().flatten().flatten() {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        if let Some((sched, ns)) = text.trim().split_once(' ') {
            if let (Ok(sched), Ok(ns)) = (DateTime::parse_from_rfc3339(sched), ns.parse::<i128>()) {
                let sched_ns = sched.timestamp_nanos_opt().unwrap_or(0) as i128;
                late.push((ns - sched_ns) as f64 / 1e6);
            }
        }
    }
    late
}

fn describe(xs: &[f64]) -> String {
    format!(
        "p50 {:.2} / p99 {:.2} / max {:.2} ms (n = {})",
        util::percentile(xs, 50.0),
        util::percentile(xs, 99.0),
        xs.iter().cloned().fold(f64::NAN, f64::max),
        xs.len()
    )
}

pub(crate) fn precision(s: &Settings) -> Vec<Figure> {
    let mut out = Vec::new();
    for (jobs, label) in [(1, "1 job"), (8, "8 jobs due in the same second")] {
        eprintln!("precision: {label}, {} s", s.precision_secs);
        let (job_late, daemon_late) = precision_phase(jobs, s.precision_secs);
        let p99 = util::percentile(&job_late, 99.0);
        out.push(Figure::check(
            "precision",
            format!("lateness, {label}, `* * * * * *`, job's first clock read − scheduled"),
            describe(&job_late),
            "p99 ≤ 5 ms",
            p99 <= 5.0 && !job_late.is_empty(),
        ));
        out.push(Figure::info(
            "precision",
            format!(
                "  of which the daemon: recorded `started` − `scheduled` (ms resolution), {label}"
            ),
            describe(&daemon_late),
        ));
        let rounds = job_late.len().div_ceil(jobs).max(10);
        let base = exec_baseline(jobs, rounds);
        out.push(Figure::info(
            "precision",
            format!("  baseline: the same probe spawned directly, {jobs} at a time, no rea"),
            describe(&base),
        ));
        let timed = timed_baseline(jobs, rounds);
        out.push(Figure::info(
            "precision",
            format!("  baseline: the same, each round at a whole second a loop sleeps until (clock_nanosleep): the smallest cron, {jobs} at a time"),
            describe(&timed),
        ));
    }
    out
}

fn idle_file(n: usize) -> String {
    let mut s = String::from("[daemon]\nmax_concurrent = 8\n\n");
    for i in 0..n {
        // 1 January, 00:00: never due during a benchmark (unless run then).
        s.push_str(&format!(
            "[jobs.idle-{i:04}]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\n"
        ));
    }
    s
}

pub(crate) fn idle(s: &Settings) -> Vec<Figure> {
    eprintln!("idle: 1000 jobs, {} s", s.idle_secs);
    let dir = TempDir::new("idle");
    dir.write_jobs(&idle_file(1000));
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    // Let start-up work (and the ping's connection task) settle.
    std::thread::sleep(Duration::from_secs(1));
    let pid = d.pid();
    let (v0, i0, threads) = util::ctxt_switches(pid);
    let c0 = util::cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(s.idle_secs));
    let (v1, i1, _) = util::ctxt_switches(pid);
    let c1 = util::cpu_ticks(pid);
    d.stop();
    let cpu_ms = (c1 - c0) * 1000 / util::clock_ticks_per_sec();
    vec![
        Figure::check(
            "idle",
            format!(
                "voluntary context switches over {} s, 1,000 jobs none due, all {threads} threads",
                s.idle_secs
            ),
            format!("{} (+{} involuntary)", v1 - v0, i1 - i0),
            "0 wakeups",
            v1 == v0,
        ),
        Figure::check(
            "idle",
            format!("CPU time (utime+stime) over {} s", s.idle_secs),
            format!("{cpu_ms} ms"),
            "0",
            cpu_ms == 0,
        ),
    ]
}

pub(crate) fn footprint(s: &Settings) -> Vec<Figure> {
    eprintln!("footprint: 10 jobs, {} runs", s.reps);
    let mut rss = Vec::new();
    let mut hwm = Vec::new();
    for _ in 0..s.reps {
        let dir = TempDir::new("footprint");
        dir.write_jobs(&idle_file(10));
        let mut d = Daemon::spawn(&dir);
        d.wait_ready(Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(500));
        rss.push(util::proc_status_kb(d.pid(), "VmRSS").unwrap_or(0) as f64);
        hwm.push(util::proc_status_kb(d.pid(), "VmHWM").unwrap_or(0) as f64);
        d.stop();
    }
    let rss = util::median_f(&rss) as u64;
    let hwm = util::median_f(&hwm) as u64;
    vec![Figure::check(
        "footprint",
        format!(
            "idle RSS of `rea run`, 10 jobs (VmRSS; VmHWM {}), median of {}",
            util::mb(hwm),
            s.reps
        ),
        util::mb(rss),
        "≤ 8 MB (Debian cron: 2.6 MB, not measured here)",
        rss <= 8 * 1024,
    )]
}
