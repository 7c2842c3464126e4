//! What alerts cost the daemon: 10,000 jobs that each run once a minute
//! (at second `i % 60`, so about 167 runs a second), once with every alert
//! armed (`late`, `running_over`, `no_success_within`, `failures`: four
//! deadlines per job in the heap, one more per occurrence and per run) and
//! once without, alternating in the same run so both see the same machine.
//! The figure is the daemon's CPU (utime + stime, all its threads; its
//! runs are other processes) per scheduled run over a measured window.

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
    vec![
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
