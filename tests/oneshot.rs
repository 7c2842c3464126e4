//! One-shot jobs: submit, at, cancel, pending; durable across kill -9.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::support::{wait_until, Env};

const JOBS: &str = "[jobs.nightly]\nschedule = \"@daily\"\ncommand = \"true\"\n";

fn oneshot_runs(env: &Env, id: &str) -> Vec<serde_json::Value> {
    env.finals(id)
}

#[test]
fn a_submitted_command_runs_once_as_argv_with_only_the_given_env() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    std::env::set_var("REA_TEST_SECRET", "leak");
    let out = env.rea(&[
        "submit",
        "--in",
        "200ms",
        "--name",
        "close-order-1001",
        "--env",
        "ORDER=1001",
        "--",
        "sh",
        "-c",
        "echo order=$ORDER secret=${REA_TEST_SECRET:-none} arg=$0 pwd=$(pwd)",
        "$HOME",
    ]);
    out.ok().stdout_is("close-order-1001\n");
    wait_until("the one-shot to run", || {
        !oneshot_runs(&env, "close-order-1001").is_empty()
    });
    let run = &oneshot_runs(&env, "close-order-1001")[0];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["trigger"], "oneshot");
    let output = run["output"].as_str().unwrap();
    assert!(
        output.starts_with("order=1001 secret=none arg=$HOME pwd="),
        "argv without a shell: {output}"
    );
    assert!(
        output.contains(env.dir.path().to_str().unwrap()),
        "submitter's cwd: {output}"
    );
    env.rea(&["logs", "close-order-1001"])
        .ok()
        .stdout_has("order=1001");
    env.rea(&["history", "close-order-1001"])
        .ok()
        .stdout_has("oneshot");
    env.rea(&["pending", "--json"]).ok();
    assert_eq!(env.rea(&["pending", "--json"]).json()["pending"], 0);
}

#[test]
fn duplicate_names_are_refused_so_retried_submissions_are_safe() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&["submit", "--in", "1h", "--name", "x1", "--", "true"])
        .ok();
    env.rea(&["submit", "--in", "1h", "--name", "x1", "--", "true"])
        .code(6)
        .stderr_has("already pending");
    env.rea(&["submit", "--in", "1h", "--name", "nightly", "--", "true"])
        .code(1)
        .stderr_has("name of a job");
    env.rea(&["submit", "--in", "1h", "--name", "bad name", "--", "true"])
        .code(1)
        .stderr_has("invalid name");
}

#[test]
fn pending_lists_and_cancel_removes() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&[
        "submit", "--in", "2h", "--name", "b", "--tag", "orders", "--", "echo", "b",
    ])
    .ok();
    env.rea(&["at", "now + 1h", "--name", "a", "--", "echo", "a"])
        .ok();
    let out = env.rea(&["pending"]);
    out.ok();
    let a = out.stdout.find("\na ").expect("a listed");
    let b = out.stdout.find("\nb ").expect("b listed");
    assert!(a < b, "by due time:\n{}", out.stdout);
    let v = env.rea(&["pending", "--tag", "orders", "--json"]).json();
    assert_eq!(v["oneshots"].as_array().unwrap().len(), 1);
    env.rea(&["cancel", "a"]).ok().stdout_is("cancelled a\n");
    env.rea(&["cancel", "a"])
        .code(5)
        .stderr_has("no pending one-shot \"a\"");
    let cancelled = env
        .history()
        .into_iter()
        .filter(|r| r["status"] == "cancelled")
        .count();
    assert_eq!(cancelled, 1);
    assert_eq!(env.rea(&["pending", "--json"]).json()["pending"], 1);
}

#[test]
fn a_running_one_shot_is_cancelled_only_with_kill() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&[
        "submit", "--in", "0s", "--name", "long", "--", "sleep", "1000",
    ])
    .ok();
    wait_until("it to start", || !env.runs("long", "started").is_empty());
    env.rea(&["cancel", "long"]).code(1).stderr_has("--kill");
    env.rea(&["cancel", "long", "--kill"])
        .ok()
        .stdout_is("killing long\n");
    wait_until("it to end", || !env.finals("long").is_empty());
    assert_eq!(env.finals("long")[0]["status"], "killed");
}

#[test]
fn failures_retry_and_timeouts_apply() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&[
        "submit",
        "--in",
        "0s",
        "--name",
        "f",
        "--retry",
        "2",
        "--retry-delay",
        "100ms",
        "--",
        "false",
    ])
    .ok();
    env.rea(&[
        "submit",
        "--in",
        "0s",
        "--name",
        "t",
        "--timeout",
        "300ms",
        "--",
        "sleep",
        "100",
    ])
    .ok();
    wait_until("three attempts", || env.finals("f").len() >= 3);
    wait_until("the timeout", || !env.finals("t").is_empty());
    let attempts: Vec<u64> = env
        .finals("f")
        .iter()
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert_eq!(env.finals("t")[0]["status"], "timed_out");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(env.finals("f").len(), 3, "no more than attempts + 1 runs");
}

#[test]
fn pending_one_shots_survive_kill_9_and_late_ones_run_at_start_unless_expired() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    env.rea(&[
        "submit", "--in", "1s", "--name", "late", "--", "echo", "late",
    ])
    .ok();
    env.rea(&[
        "submit", "--in", "1s", "--name", "stale", "--expire", "100ms", "--", "echo", "stale",
    ])
    .ok();
    env.rea(&[
        "submit", "--in", "1h", "--name", "future", "--", "echo", "future",
    ])
    .ok();
    d.kill9();
    std::thread::sleep(Duration::from_millis(1500));
    let _d = env.daemon();
    wait_until("the late one to run", || !env.finals("late").is_empty());
    assert_eq!(env.finals("late")[0]["trigger"], "catch_up");
    wait_until("the stale one to be dropped", || {
        !env.finals("stale").is_empty()
    });
    let stale = &env.finals("stale")[0];
    assert_eq!(stale["status"], "skipped");
    assert!(stale["reason"].as_str().unwrap().contains("expired"));
    let v = env.rea(&["pending", "--json"]).json();
    let ids: Vec<&str> = v["oneshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["future"]);
}

/// Pipelined submissions over one connection; the daemon is killed in the
/// middle of the burst. Every submission it acknowledged must come back.
#[test]
fn kill_9_during_a_burst_loses_no_acknowledged_submission() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    let sock = UnixStream::connect(env.state().join("rea.sock")).unwrap();
    let mut writer = sock.try_clone().unwrap();
    let dir = env.dir.path().to_str().unwrap().to_string();
    let sender = std::thread::spawn(move || {
        for i in 0..5000 {
            let line = format!(
                "{{\"v\":1,\"op\":\"submit\",\"name\":\"burst-{i}\",\"argv\":[\"true\"],\"dir\":\"{dir}\",\"in_ms\":3600000}}\n"
            );
            if writer.write_all(line.as_bytes()).is_err() {
                break;
            }
        }
    });
    let mut reader = BufReader::new(sock);
    let mut acked = Vec::new();
    let mut line = String::new();
    while acked.len() < 1500 {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ok"], true, "{v}");
        acked.push(v["data"]["id"].as_str().unwrap().to_string());
    }
    d.kill9();
    // Whatever else arrived before the kill was acknowledged too.
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 => {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if v["ok"] == true {
                        acked.push(v["data"]["id"].as_str().unwrap().to_string());
                    }
                }
            }
            _ => break,
        }
    }
    let _ = sender.join();
    assert!(acked.len() >= 1500);
    let _d = env.daemon();
    let v = env.rea(&["pending", "--json"]).json();
    let pending: std::collections::HashSet<String> = v["oneshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    let lost: Vec<&String> = acked.iter().filter(|id| !pending.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged one-shots lost, e.g. {:?}",
        lost.len(),
        lost.first()
    );
}

#[test]
fn a_typo_among_several_ids_cancels_nothing() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&["submit", "--in", "1h", "--name", "keep", "--", "true"])
        .ok();
    env.rea(&["cancel", "keep", "kepp-typo"])
        .code(5)
        .stderr_has("no pending one-shot \"kepp-typo\"");
    let v = env.rea(&["pending", "--json"]).json();
    assert_eq!(v["pending"], 1, "nothing was cancelled: {v}");
    env.rea(&["cancel", "keep"])
        .ok()
        .stdout_is("cancelled keep\n");
}

#[test]
fn submission_mistakes_are_explained_before_anything_is_sent() {
    let env = Env::new();
    env.jobs(JOBS);
    // No daemon runs: each of these must fail on its own words first.
    env.rea(&["submit", "--in", "30", "--", "true"])
        .code(2)
        .stderr_has("--in: invalid duration \"30\"");
    env.rea(&["submit", "--in", "1m", "--env", "NOVALUE", "--", "true"])
        .code(2)
        .stderr_has("--env \"NOVALUE\": write KEY=VALUE");
    env.rea(&["submit", "--in", "1m", "--timeout", "soon", "--", "true"])
        .code(2)
        .stderr_has("--timeout: invalid duration \"soon\"");
    env.rea(&["at", "teatime", "--", "true"])
        .code(2)
        .stderr_has("cannot read the time \"teatime\"");
    env.rea(&["at", "14:30", "--tz", "Europe/Berln", "--", "true"])
        .code(2)
        .stderr_has("--tz: unknown timezone \"Europe/Berln\"")
        .stderr_has("hint: did you mean one of \"Europe/Berlin\"");
    env.rea(&["pending"]).code(3);
}

#[test]
fn an_empty_pending_list_says_so() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&["pending"])
        .ok()
        .stdout_is("no pending one-shots\n");
}
