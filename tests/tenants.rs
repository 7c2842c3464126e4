//! Tenants sharing the daemon: the slots of `max_concurrent` are shared
//! between the system and each user (round robin, `max_concurrent_per_user`,
//! `reserve_system`), a user's waiting manual triggers are capped, and a run
//! that waits for a slot is recorded as waiting, never as "still running".
//! Two unprivileged users; needs root (to switch users), skips loudly
//! without.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{rea_bin, skip_unless_root, throwaway_user, Env};
use crate::users::rea_as;

const ALICE: &str = "rea-alice";
const BOB: &str = "rea-bob";

/// Run lines of the job `name` as its owner writes it: bare, or qualified
/// with its owner (`rea-bob/tick`) once the loader qualifies users' names.
fn lines_of<'h>(history: &'h [Value], name: &str) -> Vec<&'h Value> {
    history
        .iter()
        .filter(|v| {
            v["event"] == "run"
                && v["job"]
                    .as_str()
                    .is_some_and(|j| j == name || j.ends_with(&format!("/{name}")))
        })
        .collect()
}

fn with_status<'h>(lines: &[&'h Value], status: &str) -> Vec<&'h Value> {
    lines
        .iter()
        .copied()
        .filter(|v| v["status"] == status)
        .collect()
}

#[test]
fn a_users_flood_leaves_root_and_another_user_a_run_every_second() {
    if skip_unless_root("a_users_flood_leaves_root_and_another_user_a_run_every_second") {
        return;
    }
    let env = Env::new();
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
    env.jobs(
        "[daemon]\nmax_concurrent = 8\nshutdown_grace = \"1s\"\n\n\
         [jobs.sys-tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    );
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    // alice: 200 per-second jobs that sleep for a minute, and one she
    // triggers by hand; bob: one per-second job.
    let sleeper = |name: &str, schedule: &str| {
        format!(
            "[jobs.{name}]\nschedule = \"{schedule}\"\ncommand = \"sleep 60\"\nkill_grace = \"1s\"\n"
        )
    };
    let mut hers: String = (0..200)
        .map(|i| sleeper(&format!("flood{i}"), "* * * * * *"))
        .collect();
    hers.push_str(&sleeper("burst", "@yearly"));
    let his = "[jobs.bob-tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";
    for (user, body) in [(ALICE, hers.as_str()), (BOB, his)] {
        let f = env.write(&format!("users/{user}.toml"), body);
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let d = env.daemon();

    // 300 forced triggers of her own job through her CLI, one after the
    // other, while the schedule runs.
    let (uid, gid) = throwaway_user(ALICE).expect("user");
    let triggers = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .args(["sh", "-c"])
        .arg(format!(
            "i=0; while [ $i -lt 300 ]; do {} trigger --force burst; i=$((i + 1)); done 2>&1",
            rea_bin()
        ))
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("REA_STATE_DIR", env.state())
        .output()
        .expect("setpriv sh");
    let said = String::from_utf8_lossy(&triggers.stdout).into_owned();
    // Six more seconds of flood after the triggers, whatever they took.
    std::thread::sleep(Duration::from_secs(6));

    drop(d);
    let history = env.history();
    for name in ["sys-tick", "bob-tick"] {
        let lines = lines_of(&history, name);
        let skipped = with_status(&lines, "skipped");
        assert!(skipped.is_empty(), "{name} was skipped: {skipped:?}");
        let ran = with_status(&lines, "succeeded").len();
        assert!(ran >= 3, "{name} ran {ran} times in 6 s or more of flood");
    }
    // Her triggers past max_queued_per_user were refused, saying why.
    let refused = said
        .matches("runs waiting for a free slot (max_queued_per_user = 100)")
        .count();
    assert!(
        refused > 0,
        "her triggers past 100 waiting are refused:\n{said}"
    );
    assert!(
        said.contains("try again when fewer wait"),
        "the refusal says what to do:\n{said}"
    );
    // alice holds her share (4 of 8) and no more.
    let running: usize = (0..200)
        .map(|i| with_status(&lines_of(&history, &format!("flood{i}")), "started").len())
        .sum::<usize>()
        + with_status(&lines_of(&history, "burst"), "started").len();
    assert_eq!(running, 4, "alice's runs started: her share");
    // Her waiting jobs' occurrences are skipped for the true reason, and
    // nothing that never started is said to be running.
    let waiting = with_status(&lines_of(&history, "flood199"), "skipped");
    assert!(!waiting.is_empty());
    for v in &waiting {
        assert_eq!(
            v["reason"],
            "the previous run is still waiting for a free slot: rea-alice's share is full \
             (4 running, max_concurrent_per_user = 4) (overlap = \"skip\")"
        );
    }
    for v in &history {
        let reason = v["reason"].as_str().unwrap_or("");
        if reason.contains("still running") {
            let job = v["job"].as_str().unwrap_or("");
            assert!(
                !with_status(&lines_of(&history, job), "started").is_empty(),
                "{job} never started but was said to run: {v}"
            );
        }
    }
}

/// A run that waited for a slot says what it waited for, in its records
/// and in `rea history`.
#[test]
fn a_run_that_waited_for_a_slot_says_for_what() {
    if skip_unless_root("a_run_that_waited_for_a_slot_says_for_what") {
        return;
    }
    let env = Env::new();
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
    env.jobs("[daemon]\nmax_concurrent = 2\nshutdown_grace = \"1s\"\nmetrics = \"127.0.0.1:0\"\n");
    throwaway_user(ALICE).expect("user");
    let f = env.write(
        "users/rea-alice.toml",
        "[jobs.slow]\nschedule = \"@yearly\"\ncommand = \"sleep 3\"\n\n\
         [jobs.next]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
    let d = env.daemon();
    // max 2, one reserved for the system: alice's share is one slot.
    rea_as(&env, ALICE, &["trigger", "slow"], None).ok();
    rea_as(&env, ALICE, &["trigger", "next"], None)
        .ok()
        .stdout_has("queued");
    // The shares as the metrics show them, while "slow" runs.
    let text = crate::metrics::scrape(&crate::metrics::endpoint(&d));
    let v = |s: &str| crate::metrics::value(&text, s);
    assert_eq!(
        v("rea_tenant_slots{tenant=\"user-rea-alice\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        v("rea_tenant_waiting{tenant=\"user-rea-alice\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        v("rea_tenant_slots{tenant=\"system\"}"),
        Some(0.0),
        "{text}"
    );
    env.wait_until("next ran", || {
        !with_status(&lines_of(&env.history(), "next"), "succeeded").is_empty()
    });
    let history = env.history();
    let done = with_status(&lines_of(&history, "next"), "succeeded")[0].clone();
    assert_eq!(
        done["waited_for"],
        "a free slot: rea-alice's share is full (1 running, max_concurrent_per_user = 1)"
    );
    assert!(
        done["waited_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{done}"
    );
    rea_as(&env, ALICE, &["history", "next"], None)
        .ok()
        .stdout_has("for a free slot: rea-alice's share is full");
}
