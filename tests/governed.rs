//! Governed runs through the real daemon: each run in a cgroup v2 leaf of
//! its own (escapees die with it at a timeout, a cancel and a daemon
//! stop), restart recovery that never signals a stranger at a reused pid,
//! CPU accounting of a whole run, limits set in the child (rlimits, nice)
//! and cgroup limits that say so when the host cannot enforce them.
//!
//! The cgroup parts need a writable cgroup v2 (root, here): elsewhere they
//! are skipped, saying so on stderr.

use std::fs;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use serde_json::Value;

use crate::support::{alive, is_root, wait_until, Env};

/// The daemon's containment line (`rea status --json`).
fn containment(env: &Env) -> String {
    let status = env.rea(&["status", "--json"]).json();
    status["daemon"]["containment"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Whether runs get cgroups here; says why not otherwise.
fn contained(env: &Env) -> bool {
    let mode = containment(env);
    if mode.starts_with("cgroup: contained") {
        true
    } else {
        eprintln!("SKIPPED: runs are not in cgroups here: {mode}");
        false
    }
}

/// Escape cases: a script that records the pids of processes that leave
/// its process group (or session), one per line in the file `$1`, then
/// waits. `late.sh` is a helper of the third.
const ESCAPES: [(&str, &str); 4] = [
    (
        "doublefork",
        "(setsid sh -c 'echo $$ >> \"$1\"; exec sleep 300' _ \"$1\" &)\nsleep 300\n",
    ),
    (
        "setpgid",
        "perl -e 'setpgrp(0,0); open(F, \">>\", $ARGV[0]); print F \"$$\\n\"; close F; sleep 300' \"$1\" &\nsleep 300\n",
    ),
    ("latesetsid", "sh \"$(dirname \"$0\")/late.sh\" \"$1\" &\nsleep 300\n"),
    (
        "children",
        "i=0\nwhile [ $i -lt 1000 ]; do sleep 300 & echo $! >> \"$1\"; i=$((i+1)); done\nsleep 300\n",
    ),
];

const LATE: &str = "sleep 0.3\nexec setsid sh -c 'echo $$ >> \"$1\"; exec sleep 300' _ \"$1\"\n";

/// Writes the escape scripts; returns the command of each case.
fn escape_scripts(env: &Env) -> Vec<(&'static str, String)> {
    env.write("late.sh", LATE);
    ESCAPES
        .iter()
        .map(|(case, script)| {
            let path = env.write(&format!("{case}.sh"), script);
            let pids = env.path(&format!("pids-{case}"));
            (*case, format!("sh {} {}", path.display(), pids.display()))
        })
        .collect()
}

fn pids_of(env: &Env, case: &str) -> Vec<i32> {
    env.read(&format!("pids-{case}"))
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn expected_escapees(case: &str) -> usize {
    if case == "children" {
        1000
    } else {
        1
    }
}

/// Every escapee of `case` is gone (or a zombie nobody reaps), checked as
/// soon as the run's end is recorded; the survivors are killed so a failing
/// test leaves nothing behind.
fn assert_all_gone(env: &Env, case: &str, how: &str) {
    let pids = pids_of(env, case);
    assert!(!pids.is_empty(), "{case}: no escapee was recorded");
    let survivors: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    for p in &survivors {
        // SAFETY: kill(2) takes plain integers.
        unsafe {
            libc::kill(*p, libc::SIGKILL);
        }
    }
    assert!(
        survivors.is_empty(),
        "{case}: {} of {} escapees outlived the run's {how}: {survivors:?}",
        survivors.len(),
        pids.len()
    );
}

/// Waits until each case has recorded all its escapees.
fn wait_for_escapees(env: &Env, cases: &[(&'static str, String)]) {
    for (case, _) in cases {
        wait_until(&format!("{case}'s escapees"), || {
            pids_of(env, case).len() >= expected_escapees(case)
        });
    }
}

#[test]
fn escapees_die_with_the_run_at_its_timeout() {
    let env = Env::new();
    let cases = escape_scripts(&env);
    let mut toml = String::new();
    for (case, command) in &cases {
        // Long enough for a thousand forks on a loaded machine.
        let timeout = if *case == "children" { "15s" } else { "3s" };
        toml.push_str(&format!(
            "[jobs.{case}]\nschedule = \"@reboot\"\ncommand = \"{command}\"\ntimeout = \"{timeout}\"\nkill_grace = \"1s\"\n"
        ));
    }
    env.jobs(&toml);
    let d = env.daemon();
    if !contained(&env) {
        return;
    }
    for (case, _) in &cases {
        wait_until(&format!("{case} to end"), || !env.finals(case).is_empty());
        let rec = &env.finals(case)[0];
        assert_eq!(rec["status"], "timed_out", "{case}: {rec}");
        assert_all_gone(&env, case, "timeout");
    }
    assert_eq!(d.stop(), 0);
}

#[test]
fn escapees_die_with_the_run_when_it_is_cancelled() {
    let env = Env::new();
    env.jobs("[daemon]\nmax_concurrent = 8\n");
    let cases = escape_scripts(&env);
    let d = env.daemon();
    if !contained(&env) {
        return;
    }
    for (case, command) in &cases {
        let argv: Vec<&str> = command.split(' ').collect();
        let mut args = vec!["submit", "--in", "0s", "--name", case, "--"];
        args.extend(argv);
        env.rea(&args).ok();
    }
    wait_for_escapees(&env, &cases);
    for (case, _) in &cases {
        env.rea(&["cancel", case, "--kill"]).ok();
    }
    for (case, _) in &cases {
        wait_until(&format!("{case} to end"), || !env.finals(case).is_empty());
        assert_eq!(env.finals(case)[0]["status"], "killed", "{case}");
        assert_all_gone(&env, case, "cancel");
    }
    assert_eq!(d.stop(), 0);
}

#[test]
fn escapees_die_with_the_run_when_the_daemon_stops() {
    let env = Env::new();
    let cases = escape_scripts(&env);
    let mut toml = String::from("[daemon]\nshutdown_grace = \"1s\"\n");
    for (case, command) in &cases {
        toml.push_str(&format!(
            "[jobs.{case}]\nschedule = \"@reboot\"\ncommand = \"{command}\"\nkill_grace = \"1s\"\n"
        ));
    }
    env.jobs(&toml);
    let mut d = env.daemon();
    if !contained(&env) {
        return;
    }
    wait_for_escapees(&env, &cases);
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait(), 0);
    for (case, _) in &cases {
        assert_eq!(env.finals(case)[0]["status"], "killed", "{case}");
        assert_all_gone(&env, case, "daemon stop");
    }
}

#[test]
fn the_cpu_of_a_runs_children_agrees_with_proc() {
    let env = Env::new();
    // Two children burn a fixed amount of CPU each (about half a second
    // here, however loaded the machine); the shell waits for them, so
    // its own /proc figures (its time and its waited children's) are the
    // whole run's. Printed last, for comparison with the record.
    env.write(
        "burn.sh",
        "for i in 1 2; do sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done' & done\nwait\ncat /proc/$$/stat\ngetconf CLK_TCK\n",
    );
    env.jobs(&format!(
        "[jobs.burn]\nschedule = \"@reboot\"\ncommand = \"sh {}\"\n",
        env.path("burn.sh").display()
    ));
    let d = env.daemon();
    if !contained(&env) {
        return;
    }
    wait_until("the run to end", || !env.finals("burn").is_empty());
    let rec = env.finals("burn").remove(0);
    assert_eq!(rec["cpu_from_cgroup"], true, "{rec}");
    let output = rec["output"].as_str().unwrap_or_default();
    let mut lines = output.lines();
    let stat = lines.next().expect("stat line");
    let tck: f64 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("CLK_TCK");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    // utime stime cutime cstime, after the state.
    let ticks: f64 = (11..=14)
        .map(|i| fields[i].parse::<f64>().expect("ticks"))
        .sum();
    let proc_ms = ticks * 1000.0 / tck;
    let cgroup_ms =
        (rec["user_cpu_ms"].as_u64().unwrap_or(0) + rec["sys_cpu_ms"].as_u64().unwrap_or(0)) as f64;
    eprintln!("CPU of the run: cgroup {cgroup_ms} ms, /proc {proc_ms} ms");
    assert!(
        proc_ms > 500.0,
        "the children burnt too little to compare: {rec}"
    );
    let gap = (cgroup_ms - proc_ms).abs() / proc_ms;
    assert!(
        gap <= 0.05,
        "cgroup {cgroup_ms} ms vs /proc {proc_ms} ms: {:.1}% apart",
        gap * 100.0
    );
    // The human view and the JSON both carry it.
    env.rea(&["history", "burn"]).ok();
    assert_eq!(d.stop(), 0);
}

/// `rea status` shows what a running run has used so far, from its cgroup:
/// a run that has burnt CPU in a child says so while it still runs.
#[test]
fn status_shows_the_cpu_a_running_run_has_used_so_far() {
    let env = Env::new();
    // A child burns a fixed amount of CPU, then the run waits (for the
    // test to look) until a file appears.
    let go = env.path("go");
    env.write(
        "burn.sh",
        &format!(
            "sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done'\nwhile [ ! -e {} ]; do sleep 0.05; done\n",
            go.display()
        ),
    );
    env.jobs(&format!(
        "[jobs.burn]\nschedule = \"@yearly\"\ncommand = \"sh {}\"\n",
        env.path("burn.sh").display()
    ));
    let d = env.daemon();
    if !contained(&env) {
        return;
    }
    env.rea(&["trigger", "burn"]).ok();
    let cpu = || {
        env.rea(&["status", "--json"]).json()["jobs"][0]["running"][0]["cpu_ms"]
            .as_u64()
            .unwrap_or(0)
    };
    // The burning child is done once the run has used this much.
    wait_until("the run's CPU so far to show", || cpu() >= 200);
    let text = env.rea(&["status"]).ok().stdout.clone();
    let line = text
        .lines()
        .find(|l| l.starts_with("burn"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains("running") && line.contains(", cpu "),
        "{text}"
    );
    std::fs::write(&go, "").expect("go");
    wait_until("the run to end", || !env.finals("burn").is_empty());
    let rec = env.finals("burn").remove(0);
    let total = rec["user_cpu_ms"].as_u64().unwrap_or(0) + rec["sys_cpu_ms"].as_u64().unwrap_or(0);
    assert!(total >= 200, "{rec}");
    assert_eq!(d.stop(), 0);
}

/// Plants a process of our own at `pid` (its own group leader, as the
/// adversary's was) through ns_last_pid; None if other processes took the
/// number first every time (or ns_last_pid is not writable).
fn plant_at(pid: i32) -> Option<std::process::Child> {
    for _ in 0..50 {
        if fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).is_err() {
            return None;
        }
        let child = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .ok()?;
        if child.id() as i32 == pid {
            return Some(child);
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

/// A run the previous daemon left unfinished whose pid now belongs to an
/// unrelated process: that process is never signalled.
fn a_reused_pid_is_never_signalled(daemon_section: &str) {
    if !is_root() {
        eprintln!("SKIPPED: planting a pid with ns_last_pid needs root");
        return;
    }
    let env = Env::new();
    env.jobs(&format!(
        "{daemon_section}[jobs.once]\nschedule = \"@reboot\"\ncommand = \"true\"\n"
    ));
    let d = env.daemon();
    wait_until("the run to end", || !env.finals("once").is_empty());
    assert_eq!(d.stop(), 0);
    // As after a kill -9: the run's start is in the history, its end not.
    let history = env.state().join("history.jsonl");
    let kept: Vec<String> = fs::read_to_string(&history)
        .expect("history")
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            !(v["event"] == "run" && v["job"] == "once" && v["status"] != "started")
                && v["event"] != "daemon_stopped"
        })
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(&history, kept.concat()).expect("rewrite history");
    let started = env.runs("once", "started").remove(0);
    let pid = started["pid"].as_i64().expect("pid") as i32;
    // Well after the run's start, as a reboot or a pid wrap would be.
    std::thread::sleep(Duration::from_secs(3));
    let Some(mut stranger) = plant_at(pid) else {
        eprintln!("SKIPPED: could not plant a process at pid {pid}");
        return;
    };
    let d = env.daemon();
    wait_until("the interrupted record", || {
        !env.runs("once", "interrupted").is_empty()
    });
    let rec = &env.runs("once", "interrupted")[0];
    assert!(
        !rec["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("terminated"),
        "{rec}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        stranger.try_wait().expect("try_wait").is_none(),
        "the unrelated process at the run's old pid was signalled"
    );
    assert!(d.log_text().contains("left alone"), "{}", d.log_text());
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_reused_pid_is_never_signalled_with_cgroups() {
    a_reused_pid_is_never_signalled("");
}

#[test]
fn a_reused_pid_is_never_signalled_with_process_groups() {
    a_reused_pid_is_never_signalled("[daemon]\ncgroups = \"off\"\n");
}

#[test]
fn rlimits_nice_and_ionice_are_in_effect_in_the_job() {
    let env = Env::new();
    env.jobs(
        r#"[defaults]
nice = 7
[jobs.limited]
schedule = "@reboot"
command = "ulimit -n; ulimit -c; ulimit -s; cut -d' ' -f19 /proc/$$/stat; ionice -p $$ 2>/dev/null || echo no-ionice"
nofile = 321
core = 0
stack = "4MiB"
ionice = "idle"
"#,
    );
    let d = env.daemon();
    wait_until("the run to end", || !env.finals("limited").is_empty());
    let rec = env.finals("limited").remove(0);
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let out: Vec<&str> = rec["output"].as_str().unwrap_or_default().lines().collect();
    assert_eq!(out[0], "321", "nofile: {rec}");
    assert_eq!(out[1], "0", "core: {rec}");
    assert_eq!(out[2], "4096", "stack in KiB: {rec}");
    assert_eq!(out[3], "7", "nice from [defaults]: {rec}");
    if out[4] != "no-ionice" {
        assert_eq!(out[4], "idle", "{rec}");
    }
    assert_eq!(d.stop(), 0);
}

#[test]
fn cgroup_limits_this_host_cannot_enforce_are_said_everywhere() {
    let env = Env::new();
    env.jobs(
        "[jobs.capped]\nschedule = \"@reboot\"\ncommand = \"cat /proc/self/cgroup\"\nmemory_max = \"64MiB\"\ntasks_max = 64\ncpu_max = \"50%\"\n",
    );
    let d = env.daemon();
    let mode = containment(&env);
    wait_until("the run to end", || !env.finals("capped").is_empty());
    let enabled: Vec<&str> = mode
        .split_once("; controllers: ")
        .map(|(_, rest)| rest.split(';').next().unwrap_or("").split(", ").collect())
        .unwrap_or_default();
    let log = d.log_text();
    let check = env.rea(&["check", "-f", "jobs.toml"]);
    for (controller, field) in [
        ("memory", "memory_max"),
        ("pids", "tasks_max"),
        ("cpu", "cpu_max"),
    ] {
        if enabled.contains(&controller) {
            eprintln!("NOTE: the {controller} controller is enabled here: {field} is enforced");
            continue;
        }
        eprintln!(
            "SKIPPED: {field} is not enforceable here (the {controller} controller is not enabled); checking that this is said"
        );
        assert!(log.contains(field), "the daemon's log names {field}: {log}");
        assert!(
            mode.contains(controller),
            "status names {controller}: {mode}"
        );
        assert!(
            check.stderr.contains(field),
            "rea check warns about {field}: {}",
            check.stderr
        );
    }
    env.rea(&["status"]).ok().stdout_has("runs: ");
    assert_eq!(d.stop(), 0);
}

#[test]
fn without_cgroups_the_mode_says_process_groups() {
    let env = Env::new();
    env.jobs("[daemon]\ncgroups = \"off\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let mode = containment(&env);
    assert!(mode.starts_with("process groups"), "{mode}");
    env.rea(&["status"]).ok().stdout_has("runs: process groups");
    assert_eq!(d.stop(), 0);
}

#[test]
fn hooks_run_in_a_cgroup_of_their_own() {
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.f]\nschedule = \"@reboot\"\ncommand = \"exit 1\"\non_failure = \"cat /proc/self/cgroup > {}\"\n",
        env.path("hook-cgroup").display()
    ));
    let d = env.daemon();
    if !contained(&env) {
        return;
    }
    wait_until("the hook to run", || env.read("hook-cgroup").contains("::"));
    let run = env.finals("f")[0]["run"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let line = env.read("hook-cgroup");
    assert!(
        line.contains(&format!("/rea/system/{run}.on_failure")),
        "{line}"
    );
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_killed_daemons_leftover_run_is_ended_by_its_cgroup() {
    let env = Env::new();
    let cases = escape_scripts(&env);
    let (case, command) = &cases[0];
    // Started by hand, once: the next daemon must not start it again.
    env.jobs(&format!(
        "[jobs.{case}]\nschedule = \"0 0 1 1 *\"\ncommand = \"{command}\"\n"
    ));
    let d = env.daemon();
    if !contained(&env) {
        return;
    }
    env.rea(&["trigger", case]).ok();
    wait_for_escapees(&env, &cases[..1]);
    let escaped = pids_of(&env, case);
    let killed = d.pid();
    // The shell dies with the daemon (its parent-death signal); what it
    // started in a session of its own does not, but is still in the cgroup.
    d.kill9();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        escaped.iter().all(|p| alive(*p)),
        "the escapee should outlive a kill -9"
    );
    let d = env.daemon();
    wait_until("the interrupted record", || {
        !env.runs(case, "interrupted").is_empty()
    });
    let rec = &env.runs(case, "interrupted")[0];
    assert!(
        rec["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("were terminated"),
        "{rec}"
    );
    assert_all_gone(&env, case, "recovery by the next daemon");
    assert!(d.log_text().contains("cgroup.kill"), "{}", d.log_text());
    // No leaf of the killed daemon is left: the run's was ended and
    // removed, its empty ones swept at the start.
    if let Some(tenant) = subtree(&env).map(|s| s.join("system")) {
        let left = pooled_leaves_of(&tenant, killed);
        assert!(left.is_empty(), "the killed daemon's leaves left: {left:?}");
    }
    assert_eq!(d.stop(), 0);
}

/// Whether the run cgroups here have `controller` (the daemon's
/// containment line lists them). Where they do not, says so loudly,
/// naming it (a failure under `REA_REQUIRE_CGROUP_CONTROLLERS=1`, for a
/// CI host that delegates them).
fn controller_enabled(env: &Env, controller: &str, test: &str) -> bool {
    let mode = containment(env);
    let enabled = mode.split_once("; controllers: ").is_some_and(|(_, rest)| {
        rest.split(';')
            .next()
            .unwrap_or("")
            .split(", ")
            .any(|c| c == controller)
    });
    if !enabled {
        let msg = format!(
            "SKIPPED {test}: the cgroup v2 {controller} controller is not enabled for rea's runs here ({mode})"
        );
        if std::env::var("REA_REQUIRE_CGROUP_CONTROLLERS").is_ok_and(|v| v == "1") {
            panic!("{msg}, and REA_REQUIRE_CGROUP_CONTROLLERS=1 demands it");
        }
        eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
    }
    enabled
}

#[test]
fn a_run_the_oom_killer_ends_is_oom_killed() {
    let env = Env::new();
    // 64 MB in one string, under a 16 MiB cap: the kernel kills perl.
    env.jobs(
        "[jobs.hog]\nschedule = \"0 0 1 1 *\"\ncommand = \"perl -e '$x = \\\"a\\\" x (64 << 20); sleep 1'\"\nmemory_max = \"16MiB\"\n",
    );
    let d = env.daemon();
    if !controller_enabled(&env, "memory", "a_run_the_oom_killer_ends_is_oom_killed") {
        assert_eq!(d.stop(), 0);
        return;
    }
    env.rea(&["trigger", "hog"]).ok();
    wait_until("the run to end", || !env.finals("hog").is_empty());
    let rec = env.finals("hog").remove(0);
    assert_eq!(rec["status"], "oom_killed", "{rec}");
    assert_eq!(rec["oom_killed"], true, "{rec}");
    env.rea(&["history", "hog", "--status", "oom_killed"])
        .ok()
        .stdout_has("oom_killed");
    env.rea(&["history", "--failed"])
        .ok()
        .stdout_has("oom_killed");
    env.rea(&["status", "hog"]).ok().stdout_has("oom_killed");
    let metrics = env.rea(&["status", "--json"]).json();
    assert_eq!(metrics["jobs"][0]["consecutive_failures"], 1, "{metrics}");
    assert_eq!(d.stop(), 0);
}

#[test]
fn out_of_memory_records_old_and_new_read_back() {
    let env = Env::new();
    env.jobs("[jobs.hog]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    fs::create_dir_all(env.state()).expect("state dir");
    // The first as rea wrote it before `oom_killed` was a status, the
    // second as it writes it now.
    let line = |run: &str, at: &str, status: &str| {
        format!(
            "{{\"v\":1,\"ts\":\"{at}\",\"event\":\"run\",\"job\":\"hog\",\"run\":\"{run}\",\"attempt\":1,\"trigger\":\"schedule\",\"status\":\"{status}\",\"started\":\"{at}\",\"ended\":\"{at}\",\"duration_ms\":0,\"pid\":42,\"signal\":9,\"oom_killed\":true}}\n"
        )
    };
    env.write(
        "state/history.jsonl",
        &(line("r1", "2026-12-01T00:00:00.000Z", "failed")
            + &line("r2", "2026-12-02T00:00:00.000Z", "oom_killed")),
    );
    let all = env.rea(&["history", "hog"]).ok().stdout.clone();
    let old = all.lines().find(|l| l.contains("r1")).unwrap_or_default();
    assert!(
        old.contains("failed") && old.contains("out of memory (OOM killer)"),
        "{all}"
    );
    let new = all.lines().find(|l| l.contains("r2")).unwrap_or_default();
    assert!(new.contains("oom_killed"), "{all}");
    assert!(
        !new.contains("out of memory (OOM killer)"),
        "said once: {all}"
    );
    let only = env.rea(&["history", "hog", "--status", "oom-killed", "--json"]);
    let runs: Vec<Value> = only
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(runs.len(), 1, "{}", only.stdout);
    assert_eq!(runs[0]["run"], "r2");
    let failed = env.rea(&["history", "hog", "--failed"]).ok().stdout.clone();
    assert!(failed.contains("r1") && failed.contains("r2"), "{failed}");
}

/// The daemon's subtree (`rea status`'s `cgroup: contained (PATH)…`).
fn subtree(env: &Env) -> Option<std::path::PathBuf> {
    let mode = containment(env);
    let rest = mode.strip_prefix("cgroup: contained (")?;
    Some(rest.split_once(')')?.0.into())
}

#[test]
fn tenant_limits_reach_the_tenants_cgroup_or_are_said_where_they_cannot_be() {
    let test = "tenant_limits_reach_the_tenants_cgroup_or_are_said_where_they_cannot_be";
    if crate::support::skip_unless_root(test) {
        return;
    }
    let alice = "rea-alice";
    let main = format!(
        "[tenants.\"*\"]\nmin_nice = 7\n[tenants.{alice}]\nmemory_max = \"256MiB\"\ntasks_max = 64\ncpu_weight = 50\n[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n"
    );
    let env = crate::users::shared_env(&main);
    crate::support::throwaway_user(alice).expect("user");
    // Her job asks for nice 2: the floor of every user's runs is 7.
    let f = env.write(
        &format!("users/{alice}.toml"),
        "[jobs.mine]\nschedule = \"@reboot\"\ncommand = \"cut -d' ' -f19 /proc/$$/stat; cat /proc/self/cgroup\"\nnice = 2\n",
    );
    fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let check = env.rea(&["check", "-f", "jobs.toml"]);
    let d = env.daemon();
    wait_until("her run to end", || {
        !env.finals(&format!("{alice}/mine")).is_empty()
    });
    let rec = env.finals(&format!("{alice}/mine")).remove(0);
    let out: Vec<&str> = rec["output"].as_str().unwrap_or_default().lines().collect();
    assert_eq!(out.first().copied(), Some("7"), "the tenant's floor: {rec}");
    if !contained(&env) {
        assert_eq!(d.stop(), 0);
        return;
    }
    assert!(
        out.iter()
            .any(|l| l.starts_with("0::") && l.contains(&format!("/rea/user-{alice}/"))),
        "{rec}"
    );
    let dir = subtree(&env)
        .expect("the subtree")
        .join(format!("user-{alice}"));
    let status = env.rea(&["status"]).ok().stdout.clone();
    let log = d.log_text();
    let read = |f: &str| {
        fs::read_to_string(dir.join(f))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let files = [
        ("memory", "memory_max", "memory.max", "268435456"),
        ("pids", "tasks_max", "pids.max", "64"),
        ("cpu", "cpu_weight", "cpu.weight", "50"),
    ];
    for (controller, field, file, want) in files {
        if controller_enabled(&env, controller, test) {
            assert_eq!(read(file), want, "{file}");
            continue;
        }
        // Not enforceable here: said by rea check, the log and rea status,
        // in the words used for a job's limits.
        let said = format!("{field} ({controller} controller: controller not enabled");
        assert!(
            status.contains(&format!(
                "limits: tenant {alice}: limits this host cannot enforce, not applied: "
            )) && status.contains(&said),
            "status says {said}: {status}"
        );
        assert!(log.contains(&said), "the log says {said}: {log}");
        assert!(
            check.stderr.contains(&format!("tenant {alice}: ")) && check.stderr.contains(field),
            "rea check warns about {field}: {}",
            check.stderr
        );
    }
    // Taken out of the file: the limits are lifted at the reload.
    env.jobs("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    env.rea(&["reload"]).ok();
    for (controller, _, file, _) in files {
        if controller_enabled(&env, controller, test) {
            assert_eq!(
                read(file),
                if file == "cpu.weight" { "100" } else { "max" },
                "{file}"
            );
        }
    }
    assert!(
        !env.rea(&["status"]).ok().stdout.contains("limits: tenant"),
        "nothing left to say"
    );
    assert_eq!(d.stop(), 0);
}

/// A user's own file sets her rlimits as her: the kernel holds her to the
/// hard limits the daemon passes on (here 4096 open files), while root's
/// file may raise one for a job it runs as her. Set as root, her file
/// could have raised any hard limit.
#[test]
fn a_users_file_cannot_raise_a_hard_limit_above_the_daemons() {
    let test = "a_users_file_cannot_raise_a_hard_limit_above_the_daemons";
    if crate::support::skip_unless_root(test) {
        return;
    }
    let alice = "rea-alice";
    crate::support::throwaway_user(alice).expect("user");
    let env = crate::users::shared_env(&format!(
        "[jobs.roots]\nschedule = \"@reboot\"\ncommand = \"ulimit -Hn\"\nuser = \"{alice}\"\nnofile = 8192\n"
    ));
    crate::users::user_file(
        &env,
        alice,
        "[jobs.lower]\nschedule = \"@reboot\"\ncommand = \"ulimit -Hn\"\nnofile = 1024\n\
         [jobs.higher]\nschedule = \"@reboot\"\ncommand = \"ulimit -Hn\"\nnofile = 8192\n",
    );
    let d = env.daemon_configured(&[], |cmd| {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs here.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 4096,
                    rlim_max: 4096,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let lower = format!("{alice}/lower");
    let higher = format!("{alice}/higher");
    wait_until("the three runs to end", || {
        [lower.as_str(), higher.as_str(), "roots"]
            .iter()
            .all(|j| !env.finals(j).is_empty())
    });
    let roots = env.finals("roots").remove(0);
    if has_sys_resource() {
        assert_eq!(roots["status"], "succeeded", "{roots}");
        assert_eq!(
            roots["output"].as_str().map(str::trim),
            Some("8192"),
            "{roots}"
        );
    } else {
        eprintln!(
            "NOTE {test}: the daemon has no CAP_SYS_RESOURCE here (a container), so root's \
             file cannot raise a hard limit either; only her side is shown"
        );
        assert_eq!(roots["status"], "failed", "{roots}");
    }
    let low = env.finals(&lower).remove(0);
    assert_eq!(low["status"], "succeeded", "{low}");
    assert_eq!(low["output"].as_str().map(str::trim), Some("1024"), "{low}");
    let high = env.finals(&higher).remove(0);
    assert_eq!(high["status"], "failed", "{high}");
    let reason = high["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("cannot set the job's resource limits")
            && reason.contains("only a job of root's file may raise"),
        "{high}"
    );
    assert_eq!(d.stop(), 0);
}

/// Whether this process may raise a hard resource limit (CAP_SYS_RESOURCE,
/// capability 24, in its effective set); containers often drop it.
fn has_sys_resource() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

/// A field of `/proc/PID/status`.
fn status_field(pid: i32, field: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// The pooled leaves of daemon `owner` under the tenant directory `tenant`.
fn pooled_leaves_of(tenant: &std::path::Path, owner: i32) -> Vec<String> {
    fs::read_dir(tenant)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| crate::support::pool_owner(n) == Some(owner))
        .collect()
}

/// The keepers in the pooled leaves of daemon `owner` under the tenant
/// directory `tenant`: `(leaf, pid)`.
fn keepers(tenant: &std::path::Path, owner: i32) -> Vec<(String, i32)> {
    let mut found = Vec::new();
    for name in pooled_leaves_of(tenant, owner) {
        let procs = fs::read_to_string(tenant.join(&name).join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if status_field(pid, "Name") == "rea-keeper" {
                found.push((name.clone(), pid));
            }
        }
    }
    found
}

#[test]
fn a_waiting_run_cgroup_is_kept_by_a_keeper_that_runs_and_users_cannot_touch() {
    let env = Env::new();
    env.jobs(
        "[jobs.quick]\nschedule = \"0 0 1 1 *\"\ncommand = \"cat /proc/self/cgroup\"\n[jobs.straggler]\nschedule = \"0 0 1 1 *\"\ncommand = \"sleep 300 & echo $!\"\n",
    );
    let d = env.daemon();
    if !contained(&env) {
        assert_eq!(d.stop(), 0);
        return;
    }
    let Some(tenant) = subtree(&env).map(|s| s.join("system")) else {
        panic!("no subtree in {}", containment(&env));
    };
    env.rea(&["trigger", "quick"]).ok();
    wait_until("the run to end", || env.finals("quick").len() == 1);
    // Where the kernel cannot make one (not x86_64, no clone3), a leaf
    // waits empty, as before.
    if !cfg!(target_arch = "x86_64") {
        eprintln!("SKIPPED: keepers are made on x86_64 only");
        assert_eq!(d.stop(), 0);
        return;
    }
    wait_until("a keeper in the waiting leaf", || {
        keepers(&tenant, d.pid()).len() == 1
    });
    let (leaf, keeper) = keepers(&tenant, d.pid())[0].clone();
    // The daemon's own child, as root, holding no descriptor of the
    // daemon's, with every signal but SIGKILL blocked.
    assert_eq!(status_field(keeper, "PPid"), d.pid().to_string());
    assert_eq!(
        status_field(keeper, "Uid").split_whitespace().next(),
        Some("0")
    );
    let fds = fs::read_dir(format!("/proc/{keeper}/fd"))
        .map(|d| d.count())
        .unwrap_or(usize::MAX);
    assert_eq!(fds, 0, "the keeper holds none of the daemon's descriptors");
    let blocked = u64::from_str_radix(&status_field(keeper, "SigBlk"), 16).unwrap_or(0);
    assert_eq!(blocked | (1 << 8) | (1 << 18), u64::MAX, "{blocked:x}");

    // The next run takes the same leaf, is counted and ends as any other;
    // a run's straggler still dies with the run.
    env.rea(&["trigger", "quick"]).ok();
    wait_until("the second run to end", || env.finals("quick").len() == 2);
    let second = env.finals("quick").remove(1);
    assert_eq!(second["status"], "succeeded", "{second}");
    assert!(
        second["output"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("/system/{leaf}")),
        "{second}"
    );
    env.rea(&["trigger", "straggler"]).ok();
    wait_until("the straggler's run to end", || {
        env.finals("straggler").len() == 1
    });
    let rec = env.finals("straggler").remove(0);
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let straggler: i32 = rec["output"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .parse()
        .expect("the straggler's pid");
    wait_until("the straggler to be stopped", || !alive(straggler));

    // Nobody else is let near it: another user can neither signal nor
    // trace it.
    if is_root() {
        let nobody = std::process::Command::new("kill")
            .args(["-9", &keeper.to_string()])
            .uid(65534)
            .gid(65534)
            .output()
            .expect("kill as nobody");
        assert!(!nobody.status.success(), "nobody killed the keeper");
    }
    // A keeper dies with its daemon, even a killed one (its parent-death
    // signal), so the next start sweeps the waiting leaves.
    let all = keepers(&tenant, d.pid());
    assert!(!all.is_empty());
    let killed = d.pid();
    d.kill9();
    for (_, pid) in &all {
        wait_until("the keeper to die with its daemon", || !alive(*pid));
    }
    let d = env.daemon();
    let left = pooled_leaves_of(&tenant, killed);
    assert!(left.is_empty(), "the killed daemon's leaves left: {left:?}");
    env.rea(&["trigger", "quick"]).ok();
    wait_until("a run of the new daemon", || env.finals("quick").len() == 3);
    let pid = d.pid();
    wait_until("the new daemon's keeper", || {
        !keepers(&tenant, pid).is_empty()
    });
    let kept = keepers(&tenant, pid);
    assert_eq!(d.stop(), 0);
    for (_, keeper) in kept {
        assert!(!alive(keeper), "a stopped daemon left its keeper {keeper}");
    }
}

#[test]
fn a_run_after_one_its_tenant_needed_sigkill_for_starts_as_any_other() {
    // Linux 6.18 kills every process created (by clone3 into it) in a
    // cgroup once `cgroup.kill`ed: a reused leaf would have failed every
    // later run of the tenant with "sig 9".
    let env = Env::new();
    env.jobs(
        "[jobs.stubborn]\nschedule = \"0 0 1 1 *\"\ncommand = \"trap '' TERM; sleep 60\"\ntimeout = \"1s\"\nkill_grace = \"200ms\"\n[jobs.ok]\nschedule = \"0 0 1 1 *\"\ncommand = \"echo ok\"\n",
    );
    let d = env.daemon();
    env.rea(&["trigger", "stubborn"]).ok();
    wait_until("the stubborn run to be killed", || {
        env.finals("stubborn").len() == 1
    });
    let rec = env.finals("stubborn").remove(0);
    assert_eq!(rec["status"], "timed_out", "{rec}");
    for n in 1..=3 {
        env.rea(&["trigger", "ok"]).ok();
        wait_until("the run to end", || env.finals("ok").len() == n);
        let rec = env.finals("ok").remove(n - 1);
        assert_eq!(rec["status"], "succeeded", "run {n}: {rec}");
        assert_eq!(rec["output"], "ok\n", "run {n}: {rec}");
    }
    // An operator kills this daemon's waiting cgroups (not the tenant's
    // directory: other tests' daemons share it): the next runs are still
    // well.
    if let Some(tenant) = subtree(&env).map(|s| s.join("system")) {
        let pid = d.pid();
        for leaf in pooled_leaves_of(&tenant, pid) {
            fs::write(tenant.join(leaf).join("cgroup.kill"), "1").expect("cgroup.kill");
        }
        for n in 4..=5 {
            env.rea(&["trigger", "ok"]).ok();
            wait_until("the run to end", || env.finals("ok").len() == n);
            let rec = env.finals("ok").remove(n - 1);
            assert_eq!(rec["status"], "succeeded", "run {n}: {rec}");
        }
    }
    assert_eq!(d.stop(), 0);
}
