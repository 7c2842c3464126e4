//! `rea kill JOB|RUN`: a hung scheduled run is stopped through the daemon
//! (TERM, the job's grace, KILL, to the whole process group) and recorded
//! as `killed`, with no retry and no `on_failure`. Users' rights are in
//! `users.rs`.

use crate::support::{alive, read_pid, Env};

/// The run id in `started run ID of JOB`.
fn run_id(trigger_stdout: &str) -> String {
    trigger_stdout
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("no run id in {trigger_stdout:?}"))
        .to_string()
}

#[test]
fn kill_stops_a_hung_run_which_is_recorded_killed_and_not_retried() {
    let env = Env::new();
    // It ignores SIGTERM and leaves a child behind: the grace runs out and
    // the whole group gets SIGKILL.
    env.jobs(
        "[jobs.hung]\nschedule = \"@yearly\"\ncommand = \"trap '' TERM; sleep 300 & echo $! > @ROOT@/child.pid; wait\"\nkill_grace = \"1s\"\nretry = { attempts = 3, delay = \"1s\" }\non_failure = \"touch @ROOT@/on_failure\"\n\n[jobs.idle]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    let _d = env.daemon();
    let run = run_id(&env.rea(&["trigger", "hung"]).ok().stdout);
    env.wait_until("the child's pid", || {
        read_pid(&env.path("child.pid")).is_some()
    });
    let child = read_pid(&env.path("child.pid")).expect("pid");

    env.rea(&["kill", "hung"])
        .ok()
        .stdout_is(&format!("killing run {run} of hung\n"));
    env.wait_until("the killed record", || !env.finals("hung").is_empty());
    let finals = env.finals("hung");
    assert_eq!(finals[0]["status"], "killed", "{finals:?}");
    assert_eq!(finals[0]["reason"], "killed by operator", "{finals:?}");
    assert_eq!(finals[0]["run"], run.as_str());
    assert!(
        finals[0]["detail"]["retry_at"].is_null(),
        "no retry: {finals:?}"
    );
    assert!(!alive(child), "the child went with the group");
    env.rea(&["history", "hung"]).ok().stdout_has("killed");

    // Nothing in progress any more; names that are neither a job nor a
    // run in progress.
    env.rea(&["kill", "hung"])
        .code(1)
        .stderr_has("job \"hung\" has no run in progress; nothing was killed");
    env.rea(&["kill", "idel"])
        .code(5)
        .stderr_has("no job and no run in progress named \"idel\" (did you mean \"idle\"?)");
    env.rea(&["kill", &run]).code(5);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(env.finals("hung").len(), 1, "no retry ran");
    assert!(!env.path("on_failure").exists(), "no on_failure hook");
}

/// A run is named by its id, and only that run stops (overlap = "allow":
/// two at once).
#[test]
fn kill_by_run_id_stops_that_run_only() {
    let env = Env::new();
    env.jobs(
        "[jobs.twice]\nschedule = \"@yearly\"\ncommand = \"sleep 300\"\noverlap = \"allow\"\nkill_grace = \"1s\"\n",
    );
    let _d = env.daemon();
    let first = run_id(&env.rea(&["trigger", "twice"]).ok().stdout);
    let second = run_id(&env.rea(&["trigger", "twice"]).ok().stdout);
    env.wait_until("both runs to start", || {
        env.runs("twice", "started").len() == 2
    });
    let out = env.rea(&["kill", &first, "--json"]).ok().json();
    assert_eq!(out["killed"][0]["run"], first.as_str());
    assert_eq!(out["killed"][0]["job"], "twice");
    env.wait_until("the first run's end", || !env.finals("twice").is_empty());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let finals = env.finals("twice");
    assert_eq!(finals.len(), 1, "{finals:?}");
    assert_eq!(finals[0]["run"], first.as_str());
    let status = env.rea(&["status", "twice", "--json"]).ok().json();
    assert!(status.to_string().contains(&second), "{status}");
    env.rea(&["kill", "twice"])
        .ok()
        .stdout_is(&format!("killing run {second} of twice\n"));
}
