//! Issue #23's conditional dependencies (`after = [{ job, on }]`) and
//! parametrised triggers (`params`, `rea trigger --param`), through the
//! real binary: who runs after a failure or a success, what a run's
//! environment and history hold, and what the daemon refuses.

use std::time::Duration;

use crate::support::{wait_until, Conn, Env};

/// `extract` exits with its CODE parameter; three jobs run after it.
const PIPELINE: &str = r#"
[jobs.extract]
schedule = "@yearly"
command = "exit $CODE"
params = { CODE = { default = "0", pattern = "[0-9]+" } }

[jobs.report]
after = ["extract"]
command = "echo report"

[jobs.cleanup]
after = [{ job = "extract", on = "failure" }]
command = "echo cleanup"

[jobs.audit]
after = [{ job = "extract", on = "always" }]
command = "echo audit"
"#;

#[test]
fn on_failure_dependents_run_after_a_failure_and_not_after_a_success() {
    let env = Env::new();
    env.jobs(PIPELINE);
    env.rea(&["list"])
        .ok()
        .stdout_has("after extract (on failure)")
        .stdout_has("after extract (always)");
    let listed = env.rea(&["list", "--json"]).ok().json();
    let cleanup = &listed.as_array().unwrap()[2];
    assert_eq!(cleanup["after"], serde_json::json!(["extract"]));
    assert_eq!(
        cleanup["dependencies"],
        serde_json::json!([{ "job": "extract", "on": "failure" }])
    );
    let _d = env.daemon();

    // A success: report and audit run, cleanup does not.
    env.rea(&["trigger", "extract", "--wait"]).ok();
    wait_until("report and audit after a success", || {
        env.runs("report", "succeeded").len() == 1 && env.runs("audit", "succeeded").len() == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(env.finals("cleanup").is_empty(), "no failure yet");

    // A failure: cleanup and audit run, report does not.
    env.rea(&["trigger", "extract", "--param", "CODE=3", "--wait"])
        .code(3);
    wait_until("cleanup and audit after a failure", || {
        env.runs("cleanup", "succeeded").len() == 1 && env.runs("audit", "succeeded").len() == 2
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        env.finals("report").len(),
        1,
        "report ran for the success only"
    );
    let cleanup = &env.runs("cleanup", "succeeded")[0];
    assert_eq!(cleanup["trigger"], "dependency");

    let status = env.rea(&["status", "--json"]).ok().json();
    let jobs = status["jobs"].as_array().expect("jobs");
    let audit = jobs.iter().find(|j| j["name"] == "audit").expect("audit");
    assert_eq!(
        audit["dependencies"],
        serde_json::json!([{ "job": "extract", "on": "always" }])
    );
    env.rea(&["status"])
        .ok()
        .stdout_has("after extract (always)");
}

#[test]
fn a_job_with_retries_runs_its_failure_dependents_once_after_the_last_attempt() {
    let env = Env::new();
    env.jobs(
        r#"
[jobs.flaky]
schedule = "@yearly"
command = "exit 1"
retry = { attempts = 2, delay = "1s", max_delay = "1s" }

[jobs.page]
after = [{ job = "flaky", on = "failure" }]
command = "echo page"
"#,
    );
    let _d = env.daemon();
    env.rea(&["trigger", "flaky"]).ok();
    wait_until("three attempts", || env.runs("flaky", "failed").len() == 3);
    wait_until("page", || env.runs("page", "succeeded").len() == 1);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.finals("page").len(), 1, "once, not per attempt");
    let last = env.runs("flaky", "failed")[2]["ts"]
        .as_str()
        .unwrap()
        .to_string();
    let page = env.runs("page", "succeeded")[0]["started"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        page >= last,
        "page started {page}, before the last attempt ended {last}"
    );
}

/// `report` takes a DATE (a pattern, no default) and a REGION (a default).
const REPORT: &str = r#"
[jobs.report]
schedule = "@yearly"
command = "echo date=$DATE region=$REGION"
params = { DATE = { pattern = "[0-9]{4}-[0-9]{2}-[0-9]{2}" }, REGION = { default = "eu" } }
on_success = "echo hook date=$DATE >> hook.txt"
dir = "@ROOT@"
"#;

#[test]
fn parameters_reach_the_run_and_are_recorded_in_history_and_audit() {
    let env = Env::new();
    env.jobs(REPORT);
    let listed = env.rea(&["list", "--json"]).ok().json();
    assert_eq!(
        listed[0]["params"],
        serde_json::json!([
            { "name": "DATE", "default": null, "pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}" },
            { "name": "REGION", "default": "eu", "pattern": null },
        ])
    );
    // Scheduled runs get the defaults; DATE has none.
    env.rea(&["check"])
        .ok()
        .stderr_has("parameter \"DATE\" is unset");
    let _d = env.daemon();
    env.rea(&["trigger", "report", "--param", "DATE=2026-11-30", "--wait"])
        .ok();
    let out = env.rea(&["logs", "report"]);
    out.ok()
        .stdout_is("date=2026-11-30 region=eu\n")
        .stderr_has("params DATE=2026-11-30 REGION=eu");
    // Its hooks see them too.
    wait_until("the on_success hook", || {
        std::fs::read_to_string(env.path("hook.txt")).is_ok_and(|t| t == "hook date=2026-11-30\n")
    });

    env.rea(&[
        "trigger",
        "report",
        "--param",
        "DATE=2026-12-01",
        "--param",
        "REGION=us east",
        "--follow",
    ])
    .ok()
    .stdout_has("date=2026-12-01 region=us east");

    let history = env.rea(&["history", "report", "--json"]);
    history.ok();
    let records: Vec<serde_json::Value> = history
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let params: Vec<_> = records.iter().map(|r| r["params"].clone()).collect();
    assert!(
        params.contains(&serde_json::json!({ "DATE": "2026-11-30", "REGION": "eu" })),
        "{params:?}"
    );
    assert!(
        params.contains(&serde_json::json!({ "DATE": "2026-12-01", "REGION": "us east" })),
        "{params:?}"
    );
    env.rea(&["history", "report"])
        .ok()
        .stdout_has("DATE=2026-12-01 REGION=\"us east\"");

    let audit = env.rea(&["audit", "--json"]);
    audit.ok();
    assert!(
        audit.stdout.contains(r#""params":{"DATE":"2026-11-30"}"#),
        "{}",
        audit.stdout
    );
}

#[test]
fn parameters_that_are_undeclared_missing_malformed_or_not_matching_are_refused() {
    let env = Env::new();
    env.jobs(&format!(
        "{REPORT}\n[jobs.plain]\nschedule = \"@yearly\"\ncommand = \"true\"\n"
    ));
    let _d = env.daemon();
    env.rea(&["trigger", "report", "--param", "DATE=30/11/2026"])
        .code(2)
        .stderr_has(
            "not started: DATE=\"30/11/2026\" does not match its pattern \"[0-9]{4}-[0-9]{2}-[0-9]{2}\"",
        );
    env.rea(&["trigger", "report"])
        .code(2)
        .stderr_has("parameter \"DATE\" is required (it has no default): pass --param DATE=VALUE");
    env.rea(&["trigger", "report", "--param", "DATE=2026-11-30", "--param", "REGOIN=us"])
        .code(2)
        .stderr_has("job \"report\" has no parameter \"REGOIN\" (it declares DATE, REGION); did you mean \"REGION\"?");
    env.rea(&["trigger", "plain", "--param", "X=1"])
        .code(2)
        .stderr_has("job \"plain\" declares no parameters, so \"X\" cannot be passed");
    env.rea(&["trigger", "report", "--param", "DATE"])
        .code(2)
        .stderr_has("expected NAME=VALUE");
    env.rea(&[
        "trigger",
        "report",
        "--param",
        "DATE=2026-11-30",
        "--param",
        "DATE=2026-12-01",
    ])
    .code(2)
    .stderr_has("--param DATE is given twice");

    // The daemon checks, whoever asks: a raw request is refused alike.
    let mut conn = Conn::open(&env.socket());
    let answer = conn
        .ask(
            r#"{"v":1,"op":"trigger","job":"report","params":{"DATE":"2026-11-30","PATH":"/tmp"}}"#,
        )
        .expect("an answer");
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["code"], "bad_params", "{answer}");
    let answer = conn
        .ask(&format!(
            r#"{{"v":1,"op":"trigger","job":"report","params":{{"DATE":"{}"}}}}"#,
            "9".repeat(5000)
        ))
        .expect("an answer");
    assert_eq!(answer["code"], "bad_params", "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("more than 4096"),
        "{answer}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(env.finals("report").is_empty(), "nothing ran");
    assert!(env.finals("plain").is_empty(), "nothing ran");
    let refused = env.rea(&["audit", "--refused", "--json"]);
    refused.ok();
    assert!(refused.stdout.contains("bad_params"), "{}", refused.stdout);
}

#[test]
fn a_users_trigger_passes_params_to_her_job_and_her_after_names_only_her_own_jobs() {
    use std::os::unix::fs::PermissionsExt;

    use crate::support::{skip_unless_root, throwaway_user};
    use crate::users::{rea_as, shared_env};
    const ALICE: &str = "rea-params-alice";
    if skip_unless_root("a_users_trigger_passes_params_to_her_job") {
        return;
    }
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    throwaway_user(ALICE).expect("user");
    let write_hers = |toml: &str| {
        let f = env.write(&format!("users/{ALICE}.toml"), toml);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    // Her `after` names her own jobs: the system's `sys` is not one.
    write_hers("[jobs.mine]\nafter = [{ job = \"sys\", on = \"failure\" }]\ncommand = \"true\"\n");
    env.rea(&["check"])
        .code(2)
        .stderr_has("job \"mine\" runs after \"sys\", which is not a job of this file");
    write_hers(
        "[jobs.ext]\nschedule = \"@yearly\"\ncommand = \"echo ext=$DATE; exit 1\"\n\
         params = { DATE = { default = \"2026-01-01\", pattern = \"[0-9-]+\" } }\n\n\
         [jobs.page]\nafter = [{ job = \"ext\", on = \"failure\" }]\ncommand = \"echo page\"\n",
    );
    let _d = env.daemon();
    rea_as(
        &env,
        ALICE,
        &["trigger", "ext", "--param", "DATE=2026-11-30", "--wait"],
        None,
    )
    .code(1);
    rea_as(&env, ALICE, &["logs", "ext"], None)
        .ok()
        .stdout_is("ext=2026-11-30\n")
        .stderr_has("params DATE=2026-11-30");
    let page = format!("{ALICE}/page");
    wait_until("her on-failure job", || {
        env.runs(&page, "succeeded").len() == 1
    });
    // Refused in her words: her job's name as she writes it.
    rea_as(
        &env,
        ALICE,
        &["trigger", "ext", "--param", "DATE=30.11."],
        None,
    )
    .code(2)
    .stderr_has("DATE=\"30.11.\" does not match its pattern \"[0-9-]+\"");
    rea_as(
        &env,
        ALICE,
        &["trigger", "ext", "--param", "HOME=/root"],
        None,
    )
    .code(2)
    .stderr_has("job \"ext\" has no parameter \"HOME\"");
    let status = rea_as(&env, ALICE, &["status", "--json"], None);
    let status = status.ok().json();
    let jobs = status["jobs"].as_array().expect("jobs");
    let page = jobs.iter().find(|j| j["name"] == "page").expect("her page");
    assert_eq!(
        page["dependencies"],
        serde_json::json!([{ "job": "ext", "on": "failure" }])
    );
}
