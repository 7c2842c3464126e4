//! `rea status`: the offline view from the job file and the history log.

use crate::support::Env;

const JOBS: &str = "[jobs.ok]\nschedule = \"@reboot\"\ncommand = \"true\"\n\n[jobs.bad]\nschedule = \"@reboot\"\ncommand = \"exit 7\"\n\n[jobs.later]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\n[jobs.off]\nschedule = \"@daily\"\ncommand = \"true\"\nenabled = false\n";

fn after_one_boot(env: &Env) {
    env.jobs(JOBS);
    let d = env.daemon();
    env.wait_until("both runs", || {
        !env.finals("ok").is_empty() && !env.finals("bad").is_empty()
    });
    assert_eq!(d.stop(), 0);
}

#[test]
fn before_any_run() {
    let env = Env::new();
    env.jobs(JOBS);
    let out = env.rea(&["status"]);
    out.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "daemon: not running; offline view from {} and the history in {}",
            env.jobs_path().display(),
            env.state().display()
        )
    );
    assert_eq!(lines[1], "JOB    LAST       WHEN  DURATION  FAILS  NEXT");
    assert_eq!(
        lines[2],
        "ok     never run                  0      at daemon start"
    );
    assert_eq!(
        lines[3],
        "bad    never run                  0      at daemon start"
    );
    assert!(
        lines[4].starts_with("later  never run                  0      in "),
        "{}",
        lines[4]
    );
    assert_eq!(
        lines[5],
        "off    never run                  0      disabled"
    );
    assert_eq!(lines.len(), 6);
}

#[test]
fn after_runs_offline() {
    let env = Env::new();
    after_one_boot(&env);
    let out = env.rea(&["status"]);
    out.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("daemon: not running;"),
        "{}",
        out.stdout
    );
    let cells = |l: &str| -> Vec<String> {
        l.split("  ")
            .filter(|c| !c.is_empty())
            .map(|c| c.trim().to_string())
            .collect()
    };
    let ok = cells(lines[2]);
    assert_eq!(ok[0], "ok");
    assert_eq!(ok[1], "succeeded");
    assert!(ok[2].ends_with(" ago") || ok[2] == "now", "{ok:?}");
    assert_eq!(ok[ok.len() - 2], "0");
    let bad = cells(lines[3]);
    assert_eq!(bad[1], "failed");
    assert_eq!(bad[bad.len() - 2], "1");
    assert_eq!(bad[bad.len() - 1], "at daemon start");
    // One job.
    let out = env.rea(&["status", "bad"]);
    out.ok();
    assert_eq!(out.stdout.lines().count(), 3);
    assert!(out.stdout.lines().nth(2).unwrap().starts_with("bad  "));
}

#[test]
fn json_schema() {
    let env = Env::new();
    after_one_boot(&env);
    let out = env.rea(&["status", "--json"]);
    out.ok();
    let v = out.json();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["daemon", "file", "jobs", "live", "state_dir"]);
    assert_eq!(v["live"], false);
    assert_eq!(
        v["daemon"],
        serde_json::json!({ "running": false, "pid": null })
    );
    assert_eq!(v["file"], env.jobs_path().display().to_string());
    assert_eq!(v["state_dir"], env.state().display().to_string());
    let jobs = v["jobs"].as_array().unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ok", "bad", "later", "off"]);
    for j in jobs {
        let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "consecutive_failures",
                "enabled",
                "last",
                "last_success",
                "name",
                "next_fire"
            ]
        );
    }
    assert_eq!(jobs[0]["consecutive_failures"], 0);
    assert!(jobs[0]["last_success"].is_string());
    assert_eq!(jobs[0]["last"]["status"], "succeeded");
    assert_eq!(jobs[1]["consecutive_failures"], 1);
    assert_eq!(jobs[1]["last"]["status"], "failed");
    assert_eq!(jobs[1]["last_success"], serde_json::Value::Null);
    assert!(jobs[2]["next_fire"]
        .as_str()
        .unwrap()
        .ends_with("-01-01T00:00:00Z"));
    assert_eq!(jobs[2]["last"], serde_json::Value::Null);
    assert_eq!(jobs[3]["enabled"], false);
    assert_eq!(jobs[3]["next_fire"], serde_json::Value::Null);
}

#[test]
fn names_the_running_daemon() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    env.rea(&["status"])
        .ok()
        .stdout_has(&format!("daemon: running (pid {},", d.pid()));
    let v = env.rea(&["status", "--json"]).json();
    assert_eq!(v["daemon"]["running"], true);
    assert_eq!(v["daemon"]["pid"], d.pid());
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_unknown_job_exits_5() {
    let env = Env::new();
    env.jobs(JOBS);
    env.rea(&["status", "badd"])
        .code(5)
        .stdout_is("")
        .stderr_is(&format!(
            "rea: no job named \"badd\" in {} (did you mean \"bad\"?)\n",
            env.jobs_path().display()
        ));
}
