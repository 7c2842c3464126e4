//! Live operation through the control socket: trigger, pause/resume,
//! reload, live status, history, logs, catch-up after downtime.

use std::time::Duration;

use crate::support::{wait_until, Env};

const SLOW_AND_FAIL: &str = r#"
[jobs.slow]
schedule = "@yearly"
command = "sleep 0.3; echo slow done"
tags = ["batch"]

[jobs.fail]
schedule = "@yearly"
command = "echo about to fail >&2; exit 7"
tags = ["batch"]

[jobs.tick]
schedule = "* * * * * *"
command = "echo tick"
"#;

#[test]
fn trigger_wait_passes_the_exit_code_through() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let _d = env.daemon();
    env.rea(&["trigger", "slow", "--wait"])
        .ok()
        .stdout_has("slow run ")
        .stdout_has("succeeded")
        .stderr_has("waiting for it to end");
    env.rea(&["trigger", "fail", "--wait"])
        .code(7)
        .stdout_has("failed")
        .stdout_has("(exit 7)");
    let runs = env.runs("fail", "failed");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["trigger"], "manual");
}

#[test]
fn trigger_without_wait_returns_at_once_and_the_run_is_recorded() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let _d = env.daemon();
    let out = env.rea(&["trigger", "slow", "--json"]);
    out.ok();
    let v = out.json();
    assert_eq!(v["state"], "started");
    let run = v["run"].as_str().unwrap().to_string();
    env.wait_until("the triggered run to finish", || {
        env.finals("slow").iter().any(|r| r["run"] == run.as_str())
    });
    // A second trigger while the first runs is refused by overlap = skip…
    env.rea(&["trigger", "slow"]).ok();
    env.rea(&["trigger", "slow"])
        .code(1)
        .stderr_has("overlap policy is \"skip\"");
    // …unless forced.
    env.rea(&["trigger", "slow", "--force"]).ok();
}

#[test]
fn trigger_unknown_job_suggests_names() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let _d = env.daemon();
    env.rea(&["trigger", "slwo"])
        .code(5)
        .stderr_has("no job named \"slwo\"")
        .stderr_has("did you mean \"slow\"?");
}

#[test]
fn client_commands_without_a_daemon_say_so() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    for args in [
        &["trigger", "slow"][..],
        &["pause", "--all"],
        &["resume", "slow"],
        &["reload"],
    ] {
        env.rea(args)
            .code(3)
            .stderr_has("no rea daemon is running for state directory")
            .stderr_has("rea run");
    }
}

#[test]
fn pause_and_resume_by_name_tag_and_all_survive_a_restart() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let d = env.daemon();
    env.rea(&["pause", "tick"]).ok().stdout_has("paused: tick");
    env.rea(&["pause", "--tag", "batch"])
        .ok()
        .stdout_has("paused: slow, fail");
    env.rea(&["pause", "nope"]).code(5);
    env.wait_until("a skipped run of the paused job", || {
        env.runs("tick", "skipped")
            .iter()
            .any(|r| r["reason"].as_str().unwrap_or("").contains("paused"))
    });
    let status = env.rea(&["status", "--json"]);
    let v = status.json();
    assert_eq!(v["live"], true);
    assert!(v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["paused"] == true));
    assert_eq!(d.stop(), 0);

    let d = env.daemon();
    let v = env.rea(&["status", "--json"]).json();
    assert!(
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["paused"] == true),
        "paused set lost: {v}"
    );
    let before = env.runs("tick", "succeeded").len();
    env.rea(&["resume", "--all"]).ok().stdout_has("resumed: ");
    env.wait_until("the resumed job to run", || {
        env.runs("tick", "succeeded").len() > before
    });
    drop(d);
}

#[test]
fn status_is_live_with_a_daemon_and_labelled_offline_without() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let offline = env.rea(&["status"]);
    offline.ok().stdout_has("daemon: not running; offline view");
    let v = env.rea(&["status", "--json"]).json();
    assert_eq!(v["live"], false);
    let _d = env.daemon();
    env.rea(&["trigger", "fail", "--wait"]).code(7);
    let out = env.rea(&["status"]);
    out.ok()
        .stdout_has("daemon: running (pid")
        .stdout_has("fail");
    let v = env.rea(&["status", "fail", "--json"]).json();
    assert_eq!(v["live"], true);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["name"], "fail");
    assert_eq!(jobs[0]["last"]["status"], "failed");
    assert_eq!(jobs[0]["consecutive_failures"], 1);
    for key in [
        "pid",
        "uptime_s",
        "file",
        "max_concurrent",
        "running_runs",
        "running_hooks",
        "history",
        "last_reload",
    ] {
        assert!(!v["daemon"][key].is_null(), "daemon.{key} missing: {v}");
    }
    env.rea(&["status", "nope"]).code(5);
}

#[test]
fn an_invalid_reload_keeps_the_old_jobs_and_shows_a_banner_until_fixed() {
    let env = Env::new();
    env.jobs("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo tick\"\n");
    let d = env.daemon();
    env.wait_until("a first run", || !env.runs("tick", "succeeded").is_empty());
    env.jobs("[jobs.tick]\nschedule = \"* * * * * *\"\ncomand = \"echo tick\"\n");
    env.rea(&["reload"])
        .code(2)
        .stderr_has("unknown field \"comand\"")
        .stderr_has("last good configuration");
    // The watcher may have rejected the same edit first.
    assert!(!env.events("config_rejected").is_empty());
    let before = env.runs("tick", "succeeded").len();
    env.wait_until("the old job to keep firing", || {
        env.runs("tick", "succeeded").len() > before + 1
    });
    env.rea(&["status"])
        .ok()
        .stdout_has("!! the job file is invalid")
        .stdout_has(":3:1: unknown field \"comand\"");
    // SIGHUP with a fixed file clears the banner.
    env.jobs("[jobs.tock]\nschedule = \"* * * * * *\"\ncommand = \"echo tock\"\n");
    d.signal(libc::SIGHUP);
    env.wait_until("the new job to run", || {
        !env.runs("tock", "succeeded").is_empty()
    });
    let status = env.rea(&["status"]);
    assert!(
        !status.stdout.contains("!!"),
        "banner still shown:\n{}",
        status.stdout
    );
    // The watcher or SIGHUP (whichever came first) applied the difference.
    let loaded = env.events("config_loaded");
    assert!(
        loaded
            .iter()
            .any(|l| l["detail"]["added"] == 1 && l["detail"]["removed"] == 1),
        "{loaded:?}"
    );
}

#[test]
fn history_lists_runs_newest_first_with_filters_and_json() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let _d = env.daemon();
    env.rea(&["trigger", "fail", "--wait"]).code(7);
    env.rea(&["trigger", "slow", "--wait"]).ok();
    let out = env.rea(&["history", "--limit", "50"]);
    out.ok().stdout_has("TIME").stdout_has("STATUS");
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains(" slow ") || l.contains(" fail "))
        .collect();
    assert!(lines[0].contains(" slow "), "newest first:\n{}", out.stdout);
    let failed = env.rea(&["history", "--failed", "--json"]);
    failed.ok();
    let recs: Vec<serde_json::Value> = failed
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert!(!recs.is_empty());
    assert!(recs
        .iter()
        .all(|r| r["job"] == "fail" && r["status"] == "failed"));
    let one = env.rea(&["history", "slow", "--json", "-n", "1"]);
    assert_eq!(one.stdout.lines().count(), 1);
    env.rea(&["history", "--since", "1h"])
        .ok()
        .stdout_has(" fail ");
    env.rea(&["history", "--since", "later"])
        .code(2)
        .stderr_has("--since \"later\": write a duration back from now");
}

#[test]
fn logs_show_the_captured_output() {
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let _d = env.daemon();
    env.rea(&["trigger", "fail", "--wait"]).code(7);
    env.rea(&["logs", "fail"])
        .ok()
        .stdout_is("about to fail\n")
        .stderr_has("(failed, started");
    let run = env.finals("fail")[0]["run"].as_str().unwrap().to_string();
    env.rea(&["logs", "fail", "--run", &run])
        .ok()
        .stdout_is("about to fail\n");
    let v = env.rea(&["logs", "fail", "--json"]).json();
    assert_eq!(v["run"], run.as_str());
    env.rea(&["logs", "slow"])
        .code(5)
        .stderr_has("no finished run of \"slow\"");
    env.rea(&["logs", "slow", "--run", &run])
        .code(5)
        .stderr_has("belongs to job \"fail\"");
}

fn catch_up_env(policy: &str) -> Env {
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.c]\nschedule = \"* * * * * *\"\ncommand = \"echo $REA_TRIGGER $REA_SCHEDULED_AT\"\ncatch_up = \"{policy}\"\ncatch_up_limit = 2\n"
    ));
    let d = env.daemon();
    env.wait_until("a scheduled run", || !env.runs("c", "succeeded").is_empty());
    assert_eq!(d.stop(), 0);
    // Let at least three occurrences pass while no daemon runs.
    std::thread::sleep(Duration::from_millis(3500));
    env
}

#[test]
fn catch_up_none_records_the_missed_occurrences() {
    let env = catch_up_env("none");
    let _d = env.daemon();
    wait_until("a missed record", || !env.events("missed").is_empty());
    let m = &env.events("missed")[0];
    assert!(m["count"].as_u64().unwrap() >= 3, "{m}");
    assert!(env.history().iter().all(|r| r["trigger"] != "catch_up"));
    env.rea(&["history", "--status", "missed"])
        .ok()
        .stdout_has("missed ×");
}

#[test]
fn catch_up_once_runs_one_catch_up_run_at_start() {
    let env = catch_up_env("once");
    let _d = env.daemon();
    wait_until("a catch-up run", || {
        env.finals("c").iter().any(|r| r["trigger"] == "catch_up")
    });
    std::thread::sleep(Duration::from_millis(300));
    let catch_ups: Vec<_> = env
        .finals("c")
        .into_iter()
        .filter(|r| r["trigger"] == "catch_up")
        .collect();
    assert_eq!(catch_ups.len(), 1);
    assert!(catch_ups[0]["output"]
        .as_str()
        .unwrap()
        .starts_with("catch_up "));
}

#[test]
fn catch_up_all_runs_each_missed_occurrence_up_to_the_limit() {
    let env = catch_up_env("all");
    let _d = env.daemon();
    wait_until("two catch-up runs", || {
        env.finals("c")
            .iter()
            .filter(|r| r["trigger"] == "catch_up")
            .count()
            >= 2
    });
    let catch_ups: Vec<_> = env
        .finals("c")
        .into_iter()
        .filter(|r| r["trigger"] == "catch_up")
        .collect();
    assert_eq!(catch_ups.len(), 2, "catch_up_limit = 2");
    assert!(
        catch_ups[0]["scheduled"].as_str() < catch_ups[1]["scheduled"].as_str(),
        "oldest first"
    );
    let missed = env.events("missed");
    assert!(
        missed.iter().any(|m| m["count"].as_u64().unwrap() >= 1),
        "the rest are recorded missed"
    );
}

#[test]
fn the_socket_refuses_other_users() {
    if !rustix_is_root() {
        eprintln!("skipped: needs root to run a client as nobody");
        return;
    }
    let env = Env::new();
    env.jobs(SLOW_AND_FAIL);
    let _d = env.daemon();
    let sock = env.state().join("rea.sock");
    let meta = std::fs::metadata(&sock).expect("socket exists");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir_mode = std::fs::metadata(env.state()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    use std::os::unix::process::CommandExt;
    let as_nobody = || {
        let out = std::process::Command::new(crate::support::rea_bin())
            .args(["trigger", "slow"])
            .env("REA_STATE_DIR", env.state())
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run as nobody");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The file modes stop another user first…
    let (code, stderr) = as_nobody();
    assert_ne!(code, Some(0));
    assert!(stderr.contains("permission denied"), "{stderr}");
    // …and with the modes opened up, the daemon's SO_PEERCRED check still does.
    let open = |p: &std::path::Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(env.dir.path(), 0o755);
    open(&env.state(), 0o755);
    open(&sock, 0o666);
    let (code, stderr) = as_nobody();
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("only the daemon's user and root"),
        "{stderr}"
    );
    assert!(env.finals("slow").is_empty(), "nobody must not start a run");
}

fn rustix_is_root() -> bool {
    crate::support::is_root()
}

#[test]
fn the_small_answers_of_the_client_commands() {
    let env = Env::new();
    env.jobs(
        "[jobs.tick]\nschedule = \"@yearly\"\ncommand = \"true\"\ntags = [\"a\"]\n\n[jobs.flaky]\nschedule = \"@yearly\"\ncommand = \"exit 2\"\nretry = { attempts = 1, delay = \"1h\", max_delay = \"2h\" }\n\n[jobs.long]\nschedule = \"@yearly\"\ncommand = \"sleep 30\"\n",
    );
    env.rea(&["history"])
        .ok()
        .stdout_is("")
        .stderr_has("no matching runs in ");
    let _d = env.daemon();
    env.rea(&["pause", "tick"])
        .ok()
        .stdout_is("paused: tick\npaused now: tick\n");
    env.rea(&["pause", "tick"])
        .ok()
        .stdout_is("nothing to do: already paused\npaused now: tick\n");
    env.rea(&["pause", "--tag", "nosuch"])
        .code(5)
        .stderr_has("no job has the tag \"nosuch\"");
    env.rea(&["trigger", "flaky", "--wait"])
        .code(2)
        .stdout_has("retry scheduled at ");
    env.rea(&["logs", "flaky", "--run", "no-such-run"])
        .code(5)
        .stderr_has("no run \"no-such-run\" in the history");
    let run = env.rea(&["trigger", "long", "--json"]).json()["run"]
        .as_str()
        .unwrap()
        .to_string();
    env.wait_until("the long run to start", || {
        !env.runs("long", "started").is_empty()
    });
    env.rea(&["logs", "long", "--run", &run])
        .ok()
        .stdout_is("")
        .stderr_has("is still running; its output is recorded when it ends");
}

/// A daemon stopped (SIGSTOP) past several occurrences of a job with
/// `catch_up = "all"` runs the occurrence it wakes for first and the missed
/// ones after it: none is recorded as skipped for a "previous run" that is
/// only the catch-up waiting behind it.
#[test]
fn after_a_stall_catch_up_all_never_skips_for_a_run_that_is_only_waiting() {
    let env = Env::new();
    env.jobs(
        "[jobs.s]\nschedule = \"* * * * * *\"\ncommand = \"true\"\ncatch_up = \"all\"\ncatch_up_limit = 3\n",
    );
    let d = env.daemon();
    wait_until("a first run", || !env.finals("s").is_empty());
    d.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(3_500));
    d.signal(libc::SIGCONT);
    wait_until("catch-up runs after the stall", || {
        env.finals("s").iter().any(|r| r["trigger"] == "catch_up")
    });
    std::thread::sleep(Duration::from_millis(1_500));
    let skipped: Vec<_> = env
        .finals("s")
        .into_iter()
        .filter(|r| r["status"] == "skipped")
        .collect();
    assert!(skipped.is_empty(), "nothing was running: {skipped:?}");
}

/// A random start delay as long as the period passes over the occurrences
/// due meanwhile: recorded as passed over by the delay, never as missed
/// "while the daemon was not running".
#[test]
fn occurrences_passed_over_by_a_start_delay_are_not_blamed_on_downtime() {
    let env = Env::new();
    env.jobs("[jobs.j]\nschedule = \"* * * * * *\"\ncommand = \"true\"\njitter = \"3s\"\n");
    let _d = env.daemon();
    wait_until("an occurrence passed over by the delay", || {
        env.events("missed").iter().any(|m| {
            m["reason"]
                .as_str()
                .is_some_and(|r| r.contains("start delay"))
        })
    });
    let blamed: Vec<_> = env
        .events("missed")
        .into_iter()
        .filter(|m| {
            m["reason"]
                .as_str()
                .is_some_and(|r| r.contains("not running"))
        })
        .collect();
    assert!(blamed.is_empty(), "{blamed:?}");
}
