//! `rea run`: runs start, are recorded, obey the limits and policies, and
//! cannot hurt the daemon. Real processes, real signals; every wait polls
//! with a generous deadline and every assertion is about what happened
//! (records, counts, timestamps), never about how fast.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::support::{alive, instant as t, read_pid, wait_until, Env};

fn ms(d: chrono::Duration) -> i64 {
    d.num_milliseconds()
}

/// `started - scheduled` of every scheduled run, in ms, printed so the
/// figures show up with `--nocapture`.
fn report_lateness(env: &Env, job: &str) {
    let late: Vec<i64> = env
        .finals(job)
        .iter()
        .filter(|r| r["trigger"] == "schedule" && r["started"].is_string())
        .map(|r| ms(t(r, "started") - t(r, "scheduled")))
        .collect();
    eprintln!("lateness of {job} (ms): {late:?}");
}

#[test]
fn runs_are_recorded_with_their_fields() {
    let env = Env::new();
    env.jobs(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = '''printf '%s|%s|%s|%s|%s' \"$REA_JOB\" \"$REA_RUN_ID\" \"$REA_SCHEDULED_AT\" \"$REA_ATTEMPT\" \"$REA_TRIGGER\"; echo oops >&2'''\n",
    );
    let d = env.daemon();
    env.wait_until("two runs", || env.runs("tick", "succeeded").len() >= 2);
    assert_eq!(d.stop(), 0);
    report_lateness(&env, "tick");
    for run in env.runs("tick", "succeeded") {
        assert_eq!(run["v"], 1);
        assert_eq!(run["exit_code"], 0);
        assert_eq!(run["trigger"], "schedule");
        assert_eq!(run["attempt"], 1);
        let id = run["run"].as_str().unwrap();
        let output = run["output"].as_str().unwrap();
        let env_vars: Vec<&str> = output.trim_end_matches("oops\n").split('|').collect();
        assert_eq!(env_vars[0], "tick");
        assert_eq!(env_vars[1], id);
        let scheduled_env = DateTime::parse_from_rfc3339(env_vars[2]).unwrap();
        assert_eq!(scheduled_env, t(&run, "scheduled"));
        assert_eq!(env_vars[3], "1");
        assert_eq!(env_vars[4], "schedule");
        assert!(output.ends_with("oops\n"), "stderr is captured: {output:?}");
        assert_eq!(run["output_bytes"], output.len() as u64);
        // Instants in order; the scheduled instant is a whole second.
        let (sch, st, en) = (t(&run, "scheduled"), t(&run, "started"), t(&run, "ended"));
        assert_eq!(sch.timestamp_subsec_millis(), 0);
        assert!(st >= sch && en >= st, "{run}");
        let dur = run["duration_ms"].as_i64().unwrap();
        assert!((dur - ms(en - st)).abs() <= 1, "{run}");
        for field in [
            "ts",
            "pid",
            "max_rss_kb",
            "user_cpu_ms",
            "sys_cpu_ms",
            "waited_ms",
        ] {
            assert!(
                run[field].is_number() || run[field].is_string(),
                "{field} missing in {run}"
            );
        }
        // Its `started` line says the same.
        let started: Vec<Value> = env
            .runs("tick", "started")
            .into_iter()
            .filter(|r| r["run"] == id)
            .collect();
        assert_eq!(started.len(), 1);
        assert_eq!(started[0]["pid"], run["pid"]);
        assert_eq!(started[0]["scheduled"], run["scheduled"]);
        assert_eq!(started[0]["started"], run["started"]);
    }
    assert_eq!(env.events("daemon_started").len(), 1);
    assert_eq!(env.events("config_loaded").len(), 1);
    assert_eq!(env.events("daemon_stopped").len(), 1);
}

/// Each job appends `start NANOS` / `end NANOS` to `stamps`.
fn stamped(name: &str, schedule: &str, sleep: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{schedule}\"\ncommand = \"echo start $(date +%s%N) >> stamps; sleep {sleep}; echo end $(date +%s%N) >> stamps\"\ndir = \"@ROOT@\"\n{extra}\n"
    )
}

/// The most runs in progress at once, from the stamps file.
fn max_overlap(text: &str) -> usize {
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .filter_map(|l| {
            let (kind, n) = l.split_once(' ')?;
            let n: u128 = n.trim().parse().ok()?;
            Some((n, if kind == "start" { 1 } else { -1 }))
        })
        .collect();
    // At equal stamps, ends first: that is not an overlap.
    events.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    max as usize
}

#[test]
fn the_concurrency_limit_is_never_exceeded() {
    let env = Env::new();
    let mut toml = "[daemon]\nmax_concurrent = 2\n".to_string();
    for i in 0..5 {
        toml.push_str(&stamped(&format!("j{i}"), "* * * * * *", "0.3", ""));
    }
    env.jobs(&toml);
    let d = env.daemon();
    env.wait_until("ten finished runs", || {
        env.read("stamps").matches("end ").count() >= 10
    });
    assert_eq!(d.stop(), 0);
    let stamps = env.read("stamps");
    assert_eq!(max_overlap(&stamps), 2, "{stamps}");
    // Someone waited for a slot, and the wait was recorded.
    let waited: u64 = env
        .history()
        .iter()
        .filter(|r| r["event"] == "run" && r["status"] == "succeeded")
        .map(|r| r["waited_ms"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(waited > 0);
}

/// Running jobs are killed 100 ms after SIGTERM, so stopping a daemon
/// whose jobs sleep does not wait for them.
const QUICK_STOP: &str = "[daemon]\nshutdown_grace = \"100ms\"\n\n";

fn non_overlapping(runs: &[Value]) -> bool {
    let mut spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = runs
        .iter()
        .map(|r| (t(r, "started"), t(r, "ended")))
        .collect();
    spans.sort();
    spans.windows(2).all(|w| w[1].0 >= w[0].1)
}

#[test]
fn overlap_skip_records_skipped_runs() {
    let env = Env::new();
    env.jobs(&format!(
        "{QUICK_STOP}[jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 1.2\"\n"
    ));
    let d = env.daemon();
    env.wait_until("a skipped run and two finished", || {
        !env.runs("slow", "skipped").is_empty() && env.runs("slow", "succeeded").len() >= 2
    });
    assert_eq!(d.stop(), 0);
    let skipped = &env.runs("slow", "skipped")[0];
    assert_eq!(
        skipped["reason"],
        "the previous run is still running (overlap = \"skip\")"
    );
    assert!(skipped["scheduled"].is_string() && skipped["run"].is_string());
    assert!(non_overlapping(&env.runs("slow", "succeeded")));
}

#[test]
fn overlap_queue_runs_one_after_the_other() {
    let env = Env::new();
    env.jobs(&format!(
        "{QUICK_STOP}[jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 1.2\"\noverlap = \"queue\"\n"
    ));
    let d = env.daemon();
    env.wait_until("two finished runs", || {
        env.runs("slow", "succeeded").len() >= 2
    });
    assert_eq!(d.stop(), 0);
    let runs = env.runs("slow", "succeeded");
    assert!(non_overlapping(&runs));
    // A queued occurrence started only when its predecessor ended, so well
    // after its own instant.
    assert!(
        runs.iter()
            .any(|r| ms(t(r, "started") - t(r, "scheduled")) >= 150),
        "{runs:?}"
    );
    let skipped = env.runs("slow", "skipped");
    assert!(skipped.iter().all(|r| {
        r["reason"]
        == "the previous run is still running and one run is already queued (overlap = \"queue\")"
    }));
}

#[test]
fn overlap_allow_runs_side_by_side() {
    let env = Env::new();
    env.jobs(&format!(
        "{QUICK_STOP}[jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 1.2\"\noverlap = \"allow\"\n"
    ));
    let d = env.daemon();
    env.wait_until("two finished runs", || {
        env.runs("slow", "succeeded").len() >= 2
    });
    assert_eq!(d.stop(), 0);
    assert!(!non_overlapping(&env.runs("slow", "succeeded")));
    assert!(env.runs("slow", "skipped").is_empty());
}

#[test]
fn overlap_replace_kills_the_old_run_then_starts_the_new() {
    let env = Env::new();
    env.jobs(&format!(
        "{QUICK_STOP}[jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 30\"\noverlap = \"replace\"\nkill_grace = \"1s\"\n"
    ));
    let d = env.daemon();
    env.wait_until("a killed run and its successor", || {
        let killed = env.runs("slow", "killed");
        killed.first().is_some_and(|k| {
            env.runs("slow", "started")
                .iter()
                .any(|s| s["run"] != k["run"] && t(s, "scheduled") > t(k, "scheduled"))
        })
    });
    let killed = env.runs("slow", "killed")[0].clone();
    assert_eq!(d.stop(), 0);
    assert_eq!(
        killed["reason"],
        "replaced by a newer run (overlap = \"replace\")"
    );
    assert_eq!(killed["signal"], libc::SIGTERM);
    let next = env
        .runs("slow", "started")
        .into_iter()
        .filter(|s| t(s, "scheduled") > t(&killed, "scheduled"))
        .min_by_key(|s| t(s, "scheduled"))
        .unwrap();
    assert!(
        t(&next, "started") >= t(&killed, "ended"),
        "{killed}\n{next}"
    );
}

#[test]
fn retries_are_numbered_spread_and_announced() {
    let env = Env::new();
    let mut toml = String::new();
    for i in 0..4 {
        toml.push_str(&format!(
            "[jobs.f{i}]\nschedule = \"@reboot\"\ncommand = \"exit 3\"\nretry = {{ attempts = 2, delay = \"300ms\", jitter = 0.5 }}\n\n"
        ));
    }
    env.jobs(&toml);
    let d = env.daemon();
    env.wait_until("every retry to end", || {
        (0..4).all(|i| env.runs(&format!("f{i}"), "failed").len() >= 3)
    });
    assert_eq!(d.stop(), 0);
    let mut retry_starts = Vec::new();
    for i in 0..4 {
        let runs = env.runs(&format!("f{i}"), "failed");
        assert_eq!(runs.len(), 3);
        let attempts: Vec<u64> = runs
            .iter()
            .map(|r| r["attempt"].as_u64().unwrap())
            .collect();
        assert_eq!(attempts, [1, 2, 3]);
        assert_eq!(runs[0]["trigger"], "reboot");
        assert_eq!(runs[1]["trigger"], "retry");
        assert_eq!(runs[2]["trigger"], "retry");
        assert_eq!(runs[2]["exit_code"], 3);
        // A retry serves the original occurrence.
        assert_eq!(runs[1]["scheduled"], runs[0]["scheduled"]);
        for k in 0..2 {
            let retry_at = DateTime::parse_from_rfc3339(
                runs[k]["detail"]["retry_at"].as_str().expect("retry_at"),
            )
            .unwrap();
            // Within the jitter band around the delay, counted from the end.
            let after_end = ms(retry_at.with_timezone(&Utc) - t(&runs[k], "ts"));
            let base = 300 * 2i64.pow(k as u32);
            assert!(
                after_end >= base / 2 - 1 && after_end <= base * 3 / 2 + 1,
                "{after_end}"
            );
            assert!(t(&runs[k + 1], "started") >= retry_at.with_timezone(&Utc));
            retry_starts.push(retry_at);
        }
        assert_eq!(runs[2]["detail"]["retries_exhausted"], true);
    }
    retry_starts.sort();
    retry_starts.dedup();
    assert!(retry_starts.len() > 1, "jitter spreads the retries");
}

#[test]
fn a_timeout_kills_the_whole_group() {
    let env = Env::new();
    env.jobs(
        "[jobs.hang]\nschedule = \"@reboot\"\ncommand = \"sleep 1000 & echo $! > grandchild; wait\"\ndir = \"@ROOT@\"\ntimeout = \"1s\"\nkill_grace = \"200ms\"\n",
    );
    let d = env.daemon();
    env.wait_until("the timeout", || !env.runs("hang", "timed_out").is_empty());
    let run = &env.runs("hang", "timed_out")[0];
    assert_eq!(run["reason"], "timed out after 1s");
    assert!(run["duration_ms"].as_u64().unwrap() >= 1000);
    let pid = read_pid(&env.path("grandchild")).expect("the grandchild's pid");
    wait_until("the grandchild to be gone", || !alive(pid));
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_output_flood_is_bounded() {
    let env = Env::new();
    env.jobs(
        "[jobs.flood]\nschedule = \"@reboot\"\ncommand = \"head -c 50000000 /dev/zero | tr '\\\\0' x\"\noutput_limit = 1000\n",
    );
    let d = env.daemon();
    env.wait_until("the flood to end", || !env.finals("flood").is_empty());
    assert_eq!(d.stop(), 0);
    let run = &env.finals("flood")[0];
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output_bytes"], 50_000_000);
    let output = run["output"].as_str().unwrap();
    let marker = "\n… 49999000 bytes omitted …\n";
    assert_eq!(
        output,
        format!("{}{marker}{}", "x".repeat(500), "x".repeat(500))
    );
}

#[test]
fn sigterm_waits_for_running_jobs() {
    let env = Env::new();
    env.jobs("[jobs.work]\nschedule = \"@reboot\"\ncommand = \"sleep 1; echo finished\"\n");
    let d = env.daemon();
    env.wait_until("the run to start", || {
        !env.runs("work", "started").is_empty()
    });
    assert_eq!(d.stop(), 0);
    let run = &env.finals("work")[0];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["output"], "finished\n");
    let stopped = &env.events("daemon_stopped")[0];
    assert!(t(stopped, "ts") >= t(run, "ended"));
}

#[test]
fn sigterm_kills_what_outlives_the_shutdown_grace() {
    let env = Env::new();
    env.jobs(
        "[daemon]\nshutdown_grace = \"300ms\"\n\n[jobs.work]\nschedule = \"@reboot\"\ncommand = \"sleep 30\"\n",
    );
    let d = env.daemon();
    env.wait_until("the run to start", || {
        !env.runs("work", "started").is_empty()
    });
    assert_eq!(d.stop(), 0);
    let run = &env.finals("work")[0];
    assert_eq!(run["status"], "killed");
    assert_eq!(run["reason"], "daemon shutdown");
    assert!(!alive(run["pid"].as_i64().unwrap() as i32));
}

#[test]
fn a_second_sigterm_skips_the_wait() {
    let env = Env::new();
    env.jobs(
        "[daemon]\nshutdown_grace = \"1h\"\n\n[jobs.work]\nschedule = \"@reboot\"\ncommand = \"sleep 3600\"\n",
    );
    let mut d = env.daemon();
    env.wait_until("the run to start", || {
        !env.runs("work", "started").is_empty()
    });
    d.signal(libc::SIGTERM);
    wait_until("the first signal to be handled", || {
        d.log_text().contains("stopping")
    });
    d.signal(libc::SIGTERM);
    // Within PATIENCE, far less than the 1h grace.
    assert_eq!(d.wait(), 0);
    let run = &env.finals("work")[0];
    assert_eq!(run["status"], "killed");
    assert_eq!(run["reason"], "daemon shutdown");
}

#[test]
fn a_run_in_progress_when_the_daemon_dies_is_recorded_interrupted() {
    let env = Env::new();
    env.jobs("[jobs.long]\nschedule = \"* * * * * *\"\ncommand = \"sleep 30\"\n");
    let d = env.daemon();
    env.wait_until("the run to start", || {
        !env.runs("long", "started").is_empty()
    });
    let started = env.runs("long", "started")[0].clone();
    d.kill9();
    // The orphaned job is not the next daemon's business; clean it up.
    let pid = started["pid"].as_i64().unwrap() as i32;
    // SAFETY: kill(2) takes plain integers.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    let d = env.daemon();
    env.wait_until("the interrupted record", || {
        !env.runs("long", "interrupted").is_empty()
    });
    let rec = &env.runs("long", "interrupted")[0];
    assert_eq!(rec["run"], started["run"]);
    assert_eq!(rec["started"], started["started"]);
    assert_eq!(
        rec["reason"],
        "the daemon stopped while this run was in progress (crash, kill -9 or power loss)"
    );
    assert_eq!(d.stop(), 0);
    // Recorded once, not again by a third daemon.
    let d = env.daemon();
    assert_eq!(d.stop(), 0);
    assert_eq!(env.runs("long", "interrupted").len(), 1);
}

#[test]
fn a_second_daemon_on_the_same_state_dir_is_refused() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let out = env.rea(&["run"]);
    out.code(4);
    out.stderr_has(&format!(
        "another rea daemon (pid {}) is already running",
        d.pid()
    ));
    assert_eq!(d.stop(), 0);
}

fn unwritable_history_keeps_scheduling(break_it: impl Fn(&std::path::Path)) {
    let env = Env::new();
    env.jobs(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo x >> ticks\"\ndir = \"@ROOT@\"\n",
    );
    let mut d = env.daemon();
    let log = env.state().join("history.jsonl");
    break_it(&log);
    let before = env.read("ticks").lines().count();
    env.wait_until("two more runs", || {
        env.read("ticks").lines().count() >= before + 2
    });
    // Still alive, and still running jobs.
    assert!(alive(d.pid()));
    // Repaired: the backlog is written.
    if log.is_dir() {
        std::fs::remove_dir(&log).unwrap();
    } else {
        std::fs::remove_file(&log).unwrap();
    }
    env.wait_until("the backlog to be written", || {
        env.runs("tick", "succeeded").len() >= 2
    });
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait(), 0);
    assert!(d.log_text().contains("cannot write the history log"));
}

#[test]
fn a_history_replaced_by_a_directory_does_not_stop_the_daemon() {
    unwritable_history_keeps_scheduling(|log| {
        std::fs::remove_file(log).unwrap();
        std::fs::create_dir(log).unwrap();
    });
}

#[test]
fn a_history_on_a_full_disk_does_not_stop_the_daemon() {
    unwritable_history_keeps_scheduling(|log| {
        std::fs::remove_file(log).unwrap();
        std::os::unix::fs::symlink("/dev/full", log).unwrap();
    });
}

#[test]
fn reboot_runs_once_at_start() {
    let env = Env::new();
    env.jobs(
        "[jobs.boot]\nschedule = \"@reboot\"\ncommand = \"echo boot >> boots\"\ndir = \"@ROOT@\"\n\n[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    );
    let d = env.daemon();
    env.wait_until("the boot run and two ticks", || {
        !env.finals("boot").is_empty() && env.runs("tick", "succeeded").len() >= 2
    });
    assert_eq!(env.read("boots"), "boot\n");
    assert_eq!(env.finals("boot")[0]["trigger"], "reboot");
    assert_eq!(d.stop(), 0);
    let d = env.daemon();
    env.wait_until("the second boot run", || env.finals("boot").len() >= 2);
    assert_eq!(d.stop(), 0);
    assert_eq!(env.read("boots"), "boot\nboot\n");
}

#[test]
fn a_missing_working_directory_fails_the_run_with_a_reason() {
    let env = Env::new();
    env.jobs(
        "[jobs.nowhere]\nschedule = \"@reboot\"\ncommand = \"true\"\ndir = \"/nonexistent/rea-test\"\n",
    );
    let d = env.daemon();
    env.wait_until("the failed run", || !env.finals("nowhere").is_empty());
    assert_eq!(d.stop(), 0);
    let run = &env.finals("nowhere")[0];
    assert_eq!(run["status"], "failed");
    assert_eq!(
        run["reason"],
        "working directory /nonexistent/rea-test does not exist"
    );
}

#[test]
fn an_invalid_job_file_stops_the_start() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncomand = \"true\"\n");
    let out = env.rea(&["run", "-f", "jobs.toml"]);
    out.code(2);
    assert_eq!(
        out.stderr,
        "jobs.toml:1:1: job \"a\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
         jobs.toml:3:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\n\
         rea: not starting: the job file has 2 error(s)\n"
    );
    assert!(env.events("daemon_started").is_empty());
}

#[test]
fn catch_up_after_downtime() {
    let env = Env::new();
    let mut toml = String::new();
    for policy in ["none", "once", "all"] {
        toml.push_str(&format!(
            "[jobs.{policy}]\nschedule = \"* * * * * *\"\ncommand = \"true\"\ncatch_up = \"{policy}\"\ncatch_up_limit = 2\n\n"
        ));
    }
    env.jobs(&toml);
    let d = env.daemon();
    env.wait_until("a run of each", || {
        ["none", "once", "all"]
            .iter()
            .all(|j| !env.runs(j, "succeeded").is_empty())
    });
    assert_eq!(d.stop(), 0);
    let stopped = t(&env.events("daemon_stopped")[0], "ts");
    // At least three whole-second occurrences pass while no daemon runs.
    wait_until("three seconds of downtime", || {
        Utc::now() - stopped > chrono::Duration::milliseconds(3200)
    });
    let d = env.daemon();
    let restarted = t(&env.events("daemon_started")[1], "ts");
    env.wait_until("the catch-up", || {
        !env.events("missed").is_empty() && env.runs("all", "succeeded").len() >= 3
    });
    assert_eq!(d.stop(), 0);
    let catch_up = |job: &str| -> Vec<Value> {
        env.finals(job)
            .into_iter()
            .filter(|r| r["trigger"] == "catch_up")
            .collect()
    };
    let missed = |job: &str| -> Vec<Value> {
        env.events("missed")
            .into_iter()
            .filter(|r| r["job"] == job)
            .collect()
    };
    // Every occurrence after the last one served before the stop, up to the
    // restart, is either run or counted missed.
    let last_before = |job: &str| {
        env.history()
            .iter()
            .filter(|r| r["event"] == "run" && r["job"] == job && t(r, "ts") <= stopped)
            .map(|r| t(r, "scheduled"))
            .max()
            .unwrap()
    };
    let passed = |job: &str| {
        let from = last_before(job).timestamp();
        (from + 1..=restarted.timestamp()).count() as u64
    };
    // none: nothing runs for the gap, all of it is missed.
    assert!(catch_up("none").is_empty());
    let m = missed("none");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["count"], passed("none"));
    assert!(passed("none") >= 3);
    // once: one run for the newest missed occurrence, the rest missed.
    let c = catch_up("once");
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["status"], "succeeded");
    assert_eq!(t(&c[0], "scheduled").timestamp(), restarted.timestamp());
    assert_eq!(missed("once")[0]["count"], passed("once") - 1);
    // all: the newest catch_up_limit run, in order; older ones missed.
    let c = catch_up("all");
    assert_eq!(c.len(), 2);
    assert!(t(&c[0], "scheduled") < t(&c[1], "scheduled"));
    assert_eq!(missed("all")[0]["count"], passed("all") - 2);
}
