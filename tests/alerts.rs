//! Alerts for what did not happen (`alert.*`), through the real daemon:
//! each kind raised once and resolved once, recorded in the history
//! (`event: alert`), shown by `rea history`, handed to `on_alert` with its
//! `REA_ALERT_*` variables, and `late` reported at start for a due instant
//! the daemon was down across (its clock moved on with
//! `REA_TEST_CLOCK_SKEW_MS`). Durations are short (`late = "2s"`); nothing
//! waits longer than a deadline.

use serde_json::Value;

use crate::support::{wait_until, Env};

/// The alert lines of `job`, as (kind, state).
fn alerts(env: &Env, job: &str) -> Vec<(String, String)> {
    env.events("alert")
        .into_iter()
        .filter(|v| v["job"] == job)
        .map(|v| {
            (
                v["alert"]["kind"].as_str().unwrap_or("").to_string(),
                v["alert"]["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn pair(kind: &str, state: &str) -> (String, String) {
    (kind.to_string(), state.to_string())
}

fn alert_lines(env: &Env, job: &str) -> Vec<Value> {
    env.events("alert")
        .into_iter()
        .filter(|v| v["job"] == job)
        .collect()
}

#[test]
fn late_is_raised_while_paused_and_resolved_when_a_run_starts() {
    let env = Env::new();
    env.jobs("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\nalert.late = \"2s\"\n");
    let d = env.daemon();
    env.rea(&["pause", "tick"]).ok();
    wait_until("late raised", || !alerts(&env, "tick").is_empty());
    let line = &alert_lines(&env, "tick")[0];
    assert_eq!(line["alert"]["state"], "raised");
    let reason = line["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("not started within 2s of its due instant")
            && reason.ends_with("the job is paused"),
        "{reason}"
    );
    assert!(line["scheduled"].is_string(), "the due instant: {line}");
    // Raised once however many occurrences pass paused.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(alerts(&env, "tick"), [pair("late", "raised")]);
    env.rea(&["resume", "tick"]).ok();
    wait_until("late resolved", || alerts(&env, "tick").len() >= 2);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(
        alerts(&env, "tick"),
        [pair("late", "raised"), pair("late", "resolved")],
        "on time from then on"
    );
    d.stop();
    // Both in `rea history`, human and JSON.
    env.rea(&["history", "tick"])
        .ok()
        .stdout_has("alert late raised")
        .stdout_has("alert late resolved");
    let out = env.rea(&["history", "tick", "--json", "--status", "alert"]);
    out.ok();
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines.iter().all(|l| l["event"] == "alert"));
    assert_eq!(lines[0]["alert"]["state"], "resolved", "newest first");
}

#[test]
fn running_over_is_raised_while_the_run_runs_and_resolved_when_it_ends() {
    let env = Env::new();
    env.jobs(
        "[jobs.slow]\nschedule = \"@yearly\"\ncommand = \"sleep 2\"\nalert.running_over = \"1s\"\n",
    );
    let d = env.daemon();
    env.rea(&["trigger", "slow"]).ok();
    wait_until("running_over raised", || !alerts(&env, "slow").is_empty());
    assert!(
        env.finals("slow").is_empty(),
        "raised while the run still runs"
    );
    wait_until("the run's end", || !env.finals("slow").is_empty());
    wait_until("running_over resolved", || alerts(&env, "slow").len() >= 2);
    assert_eq!(
        alerts(&env, "slow"),
        [
            pair("running_over", "raised"),
            pair("running_over", "resolved")
        ]
    );
    let lines = alert_lines(&env, "slow");
    let run = env.finals("slow")[0]["run"].clone();
    assert_eq!(lines[0]["run"], run);
    assert!(
        lines[0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("still running after"),
        "{}",
        lines[0]
    );
    d.stop();
}

#[test]
fn failures_are_raised_at_the_second_in_a_row_and_resolved_by_a_success_with_on_alert_told() {
    let env = Env::new();
    let log = env.path("alerts.log");
    env.jobs(&format!(
        r#"[jobs.f]
schedule = "@yearly"
command = "test -e @ROOT@/ok"
alert.failures = 2
on_alert = "echo $REA_ALERT_KIND $REA_ALERT_STATE $REA_JOB $REA_TENANT $REA_HOOK \"$REA_ALERT_REASON\" >> {}"
"#,
        log.display()
    ));
    let d = env.daemon();
    env.rea(&["trigger", "f", "--wait"]).code(1);
    assert!(alerts(&env, "f").is_empty(), "one failure is not two");
    env.rea(&["trigger", "f", "--wait"]).code(1);
    wait_until("failures raised", || alerts(&env, "f").len() == 1);
    wait_until("on_alert ran", || {
        env.read("alerts.log").lines().count() == 1
    });
    env.rea(&["trigger", "f", "--wait"]).code(1);
    env.write("ok", "");
    env.rea(&["trigger", "f", "--wait"]).ok();
    wait_until("failures resolved", || alerts(&env, "f").len() == 2);
    wait_until("on_alert ran again", || {
        env.read("alerts.log").lines().count() == 2
    });
    assert_eq!(
        alerts(&env, "f"),
        [pair("failures", "raised"), pair("failures", "resolved")],
        "a third failure raises nothing more"
    );
    let text = env.read("alerts.log");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(
            "failures raised f system on_alert 2 consecutive failures (alert.failures = 2)"
        ),
        "{text}"
    );
    assert!(lines[0].contains("exit code 1"), "{text}");
    assert!(
        lines[1].starts_with("failures resolved f system on_alert run "),
        "{text}"
    );
    d.stop();
}

#[test]
fn no_success_within_is_raised_when_the_limit_passes_and_resolved_by_a_success() {
    let env = Env::new();
    env.jobs(
        "[jobs.n]\nschedule = \"@yearly\"\ncommand = \"true\"\nalert.no_success_within = \"3s\"\n",
    );
    let d = env.daemon();
    let started = std::time::Instant::now();
    wait_until("no_success_within raised", || !alerts(&env, "n").is_empty());
    assert!(started.elapsed() >= std::time::Duration::from_millis(2500));
    let line = &alert_lines(&env, "n")[0];
    assert!(
        line["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("no successful run within 3s"),
        "{line}"
    );
    env.rea(&["trigger", "n", "--wait"]).ok();
    wait_until("resolved", || alerts(&env, "n").len() == 2);
    assert_eq!(
        alerts(&env, "n"),
        [
            pair("no_success_within", "raised"),
            pair("no_success_within", "resolved")
        ]
    );
    d.stop();
}

#[test]
fn a_due_instant_the_daemon_was_down_across_is_reported_late_at_start() {
    let env = Env::new();
    env.jobs("[jobs.m]\nschedule = \"* * * * *\"\ncommand = \"true\"\ncatch_up = \"once\"\nalert.late = \"5s\"\n");
    let d = env.daemon();
    d.stop();
    assert!(alerts(&env, "m").is_empty());
    // Back "three minutes later": at least two due instants passed.
    let d = env.daemon_with_env(&[], &[("REA_TEST_CLOCK_SKEW_MS", "180000")]);
    wait_until("late at start", || alerts(&env, "m").len() >= 2);
    assert_eq!(
        alerts(&env, "m"),
        [pair("late", "raised"), pair("late", "resolved")],
        "raised at start, resolved by the catch-up run"
    );
    let lines = alert_lines(&env, "m");
    let reason = lines[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("the daemon was not running it then"),
        "{reason}"
    );
    let catch_up = env.runs("m", "started");
    assert_eq!(catch_up[0]["trigger"], "catch_up");
    d.stop();
}

#[test]
fn a_reload_keeps_a_raised_alert() {
    let env = Env::new();
    env.jobs("[jobs.f]\nschedule = \"@yearly\"\ncommand = \"false\"\nalert.failures = 1\n");
    let d = env.daemon();
    env.rea(&["trigger", "f", "--wait"]).code(1);
    wait_until("raised", || alerts(&env, "f").len() == 1);
    env.jobs("[jobs.f]\nschedule = \"@yearly\"\ncommand = \"false\"\nalert.failures = 1\n[jobs.g]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    env.rea(&["reload"]).ok();
    env.rea(&["trigger", "f", "--wait"]).code(1);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(alerts(&env, "f"), [pair("failures", "raised")]);
    // Unarmed by a reload: resolved, once.
    env.jobs("[jobs.f]\nschedule = \"@yearly\"\ncommand = \"false\"\n");
    env.rea(&["reload"]).ok();
    wait_until("resolved", || alerts(&env, "f").len() == 2);
    let lines = alert_lines(&env, "f");
    assert_eq!(
        lines[1]["reason"],
        "alert.failures is no longer set for the job"
    );
    d.stop();
}

#[test]
fn the_alert_gauges_follow_the_alerts() {
    let env = Env::new();
    env.jobs("[daemon]\nmetrics = \"127.0.0.1:0\"\n[jobs.f]\nschedule = \"@yearly\"\ncommand = \"test -e @ROOT@/ok\"\nalert = { failures = 1, late = \"1h\" }\n");
    let d = env.daemon();
    let addr = crate::metrics::endpoint(&d);
    let text = crate::metrics::scrape(&addr);
    assert_eq!(
        crate::metrics::value(&text, "rea_job_alert{job=\"f\",kind=\"failures\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        crate::metrics::value(&text, "rea_job_overdue_seconds{job=\"f\"}"),
        Some(0.0),
        "{text}"
    );
    env.rea(&["trigger", "f", "--wait"]).code(1);
    wait_until("raised", || alerts(&env, "f").len() == 1);
    let text = crate::metrics::scrape(&addr);
    assert_eq!(
        crate::metrics::value(&text, "rea_job_alert{job=\"f\",kind=\"failures\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        crate::metrics::value(&text, "rea_job_alert{job=\"f\",kind=\"late\"}"),
        Some(0.0),
        "{text}"
    );
    env.write("ok", "");
    env.rea(&["trigger", "f", "--wait"]).ok();
    wait_until("resolved", || alerts(&env, "f").len() == 2);
    let text = crate::metrics::scrape(&addr);
    assert_eq!(
        crate::metrics::value(&text, "rea_job_alert{job=\"f\",kind=\"failures\"}"),
        Some(0.0),
        "{text}"
    );
    d.stop();
}

#[test]
fn rea_check_rejects_bad_alert_fields_where_they_are() {
    let env = Env::new();
    let err =
        env.check_fails("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.lat = \"5m\"\n");
    assert!(
        err.contains("jobs.toml:4:7: unknown field \"lat\""),
        "{err}"
    );
    assert!(err.contains("did you mean \"late\"?"), "{err}");
    let err = env.check_fails("[defaults]\nalert = { running_over = \"3x p99\" }\n[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\n");
    assert!(
        err.contains(
            "jobs.toml:2:26: invalid running_over \"3x p99\": only the job's p95 duration is kept"
        ),
        "{err}"
    );
    assert!(err.contains("\"3x p95\""), "{err}");
    let err =
        env.check_fails("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.failures = -1\n");
    assert!(
        err.contains("jobs.toml:4:18: \"alert.failures\" must be between 0 and 1000000"),
        "{err}"
    );
}

/// A user's job: her `on_alert` runs as her, sees her job's name as her
/// file writes it, and her alert lines are hers to read, not another
/// user's.
#[test]
fn a_users_on_alert_runs_as_her_and_her_alerts_are_hers() {
    use std::os::unix::fs::PermissionsExt;
    if crate::support::skip_unless_root("a_users_on_alert_runs_as_her_and_her_alerts_are_hers") {
        return;
    }
    const ALICE: &str = "rea-alice";
    const BOB: &str = "rea-bob";
    let env = crate::users::shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    crate::support::throwaway_user(ALICE).expect("user");
    crate::support::throwaway_user(BOB).expect("user");
    let out = env.path("out");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let f = env.write(
        &format!("users/{ALICE}.toml"),
        &format!(
            "[jobs.f]\nschedule = \"@yearly\"\ncommand = \"false\"\nalert.failures = 1\non_alert = \"echo $(id -un) $REA_JOB $REA_TENANT $REA_ALERT_KIND $REA_ALERT_STATE >> {}/alert\"\n",
            out.display()
        ),
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let d = env.daemon();
    crate::users::rea_as(&env, ALICE, &["trigger", "f", "--wait"], None).code(1);
    wait_until("her on_alert", || {
        std::fs::read_to_string(out.join("alert")).is_ok_and(|t| t.lines().count() == 1)
    });
    let told = std::fs::read_to_string(out.join("alert")).unwrap_or_default();
    assert_eq!(told, format!("{ALICE} f {ALICE} failures raised\n"));
    let lines = alert_lines(&env, &format!("{ALICE}/f"));
    assert_eq!(lines.len(), 1, "recorded under her qualified name");
    crate::users::rea_as(&env, ALICE, &["history", "f"], None)
        .ok()
        .stdout_has("alert failures raised");
    let his = crate::users::rea_as(&env, BOB, &["history", "--json"], None);
    assert!(!his.stdout.contains("\"alert\""), "{}", his.stdout);
    d.stop();
}
