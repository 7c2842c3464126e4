//! What alerts cost the daemon: 10,000 jobs that each run once a minute
//! (at second `i % 60`, so about 167 runs a second), once with every alert
//! armed (`late`, `running_over`, `no_success_within`, `failures`: four
//! deadlines per job in the heap, one more per occurrence and per run) and
//! once without, alternating in the same run so both see the same machine.
//! The figure is the daemon's CPU (utime + stime, all its threads; its
//! runs are other processes) per scheduled run over a measured window.
//! Beside it, the engine alone in-process on the same files (its thread's
//! CPU time per run over simulated hours: no processes, no noise from
//! them), which is where the alerts' work is.

use std::time::{Duration, Instant};

use super::report::Figure;
use super::util::{self, Daemon, TempDir};
use super::Settings;

const JOBS: usize = 10_000;

fn file(armed: bool) -> String {
    let mut s = String::with_capacity(JOBS * 120);
    s.push_str("[daemon]\nmax_concurrent = 64\n\n");
    if armed {
        s.push_str(
            "[defaults]\nalert = { late = \"5m\", running_over = \"30m\", no_success_within = \"26h\", failures = 3 }\n\n",
        );
    }
    for i in 0..JOBS {
        s.push_str(&format!(
            "[jobs.job-{i:05}]\nschedule = \"{} * * * * *\"\ncommand = \"true\"\n\n",
            i % 60
        ));
    }
    s
}

/// One window: (daemon CPU seconds, runs ended in it).
fn window(armed: bool, secs: u64) -> (f64, usize) {
    let dir = TempDir::new(if armed { "alerts-armed" } else { "alerts-none" });
    dir.write_jobs(&file(armed));
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(60));
    // Past start-up and the first second's burst.
    std::thread::sleep(Duration::from_secs(3));
    let runs = || util::count_history_lines(&dir.state(), &["\"status\":\"succeeded\""]);
    let (cpu0, runs0) = (util::cpu_ticks(d.pid()), runs());
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let (cpu1, runs1) = (util::cpu_ticks(d.pid()), runs());
    let took = t.elapsed();
    d.stop();
    let cpu = (cpu1 - cpu0) as f64 / util::clock_ticks_per_sec() as f64;
    eprintln!(
        "alerts: {} armed: {:.2} s CPU for {} runs in {:.1} s",
        if armed { "all" } else { "none" },
        cpu,
        runs1 - runs0,
        took.as_secs_f64()
    );
    (cpu, runs1.saturating_sub(runs0))
}

/// Thread CPU time, in ns.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The engine alone: `hours` simulated hours of the file, each run ending
/// 100 ms after it starts. Returns (thread CPU ns per run, runs).
fn engine_only(armed: bool, hours: i64) -> (f64, u64) {
    use chrono::TimeZone;
    use rea_core::engine::{Action, Engine};
    use rea_core::run::{Outcome, Output, Started, Termination, Usage};
    use std::collections::{BTreeMap, VecDeque};
    let dir = TempDir::new("alerts-engine");
    dir.write_jobs(&file(armed));
    let cfg = rea_config::load_with(
        &dir.jobs(),
        rea_config::LoadOptions {
            allow_insecure_permissions: false,
        },
    )
    .unwrap_or_else(|_| util::die("the generated alerts file does not load"));
    let mut engine = Engine::new(&cfg.plan(), 1);
    let t0 = chrono::Utc
        .timestamp_opt(1_800_000_000, 0)
        .single()
        .unwrap_or_else(chrono::Utc::now);
    let end = t0 + chrono::Duration::hours(hours);
    let mut runs = 0u64;
    // Runs in progress by their end.
    let mut ending: BTreeMap<(chrono::DateTime<chrono::Utc>, u64), String> = BTreeMap::new();
    let mut seq = 0u64;
    let mut queue: VecDeque<Action> = engine.start(t0, Default::default()).into();
    let took = thread_cpu_ns();
    let mut now = t0;
    loop {
        while let Some(a) = queue.pop_front() {
            if let Action::Start(s) = a {
                runs += 1;
                queue.extend(engine.spawned(&s.run, Ok(Started { pid: 1, at: now }), now));
                seq += 1;
                ending.insert((now + chrono::Duration::milliseconds(100), seq), s.run);
            }
        }
        let next_end = ending.keys().next().map(|k| k.0);
        let next = [engine.next_wake(), next_end].into_iter().flatten().min();
        let Some(next) = next.filter(|n| *n <= end) else {
            break;
        };
        now = next;
        if next_end == Some(next) {
            if let Some((_, run)) = ending.pop_first() {
                let o = Outcome {
                    started: Started {
                        pid: 1,
                        at: now - chrono::Duration::milliseconds(100),
                    },
                    ended: now,
                    termination: Termination::Exited(0),
                    timed_out: false,
                    terminated: false,
                    output: Output::default(),
                    usage: Usage::default(),
                };
                queue.extend(engine.finished(&run, &o, now));
            }
        } else {
            queue.extend(engine.wake(now, false));
        }
    }
    let took = thread_cpu_ns() - took;
    (took as f64 / runs.max(1) as f64, runs)
}

pub(crate) fn alerts(s: &Settings) -> Vec<Figure> {
    let secs = if s.quick { 10 } else { 20 };
    eprintln!("alerts: {JOBS} jobs, {secs} s windows, {} rounds", s.reps);
    let (mut none, mut armed) = (Vec::new(), Vec::new());
    for _ in 0..s.reps {
        let (c, n) = window(false, secs);
        none.push(c * 1e6 / n.max(1) as f64);
        let (c, n) = window(true, secs);
        armed.push(c * 1e6 / n.max(1) as f64);
    }
    let (none, armed) = (util::median_f(&none), util::median_f(&armed));
    let extra = (armed / none - 1.0) * 100.0;
    let (mut e_none, mut e_armed, mut e_runs) = (Vec::new(), Vec::new(), 0);
    for _ in 0..s.reps {
        let (ns, n) = engine_only(false, 1);
        e_none.push(ns);
        let (ns, _) = engine_only(true, 1);
        e_armed.push(ns);
        e_runs = n;
    }
    let (e_none, e_armed) = (util::median_f(&e_none), util::median_f(&e_armed));
    eprintln!("alerts: engine alone, {e_runs} runs: {e_none:.0} ns vs {e_armed:.0} ns per run");
    vec![
        Figure::info(
            "alerts",
            format!(
                "engine alone (in-process, thread CPU), per run, {JOBS} jobs without alerts, one simulated hour ({e_runs} runs), median of {}",
                s.reps
            ),
            format!("{:.2} µs", e_none / 1000.0),
        ),
        Figure::info(
            "alerts",
            "engine alone, per run, the same jobs with all four alerts armed (what alerts add, in µs per run)",
            format!(
                "{:.2} µs ({:+.2} µs: {:+.2}% of the daemon's CPU per run)",
                e_armed / 1000.0,
                (e_armed - e_none) / 1000.0,
                (e_armed - e_none) / 10.0 / none
            ),
        ),
        Figure::info(
            "alerts",
            format!(
                "daemon CPU per scheduled run, {JOBS} jobs without alerts (≈167 runs/s), median of {}",
                s.reps
            ),
            format!("{none:.0} µs"),
        ),
        Figure::check(
            "alerts",
            format!(
                "daemon CPU per scheduled run, the same {JOBS} jobs with all four alerts armed, median of {}",
                s.reps
            ),
            format!("{armed:.0} µs ({extra:+.1}%)"),
            "≤ +5%",
            extra <= 5.0,
        ),
    ]
}
