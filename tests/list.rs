//! `rea list`: the jobs of the file with their next fire, for people and
//! for scripts.

use crate::support::Env;

const JOBS: &str = r#"
[jobs.backup]
schedule = "0 3 * * *"
command = "backup"
timezone = "Europe/Berlin"
tags = ["db", "nightly"]
description = "the nightly dump"

[jobs.at-boot]
schedule = "@reboot"
command = "x"

[jobs.very-long-job-name]
schedule = "*/15 * * * *"
command = "x"
enabled = false

[jobs.never]
schedule = "0 0 30 2 *"
command = "x"
"#;

#[test]
fn columns_are_aligned_and_flags_shown() {
    let env = Env::new();
    env.jobs(JOBS);
    let out = env.rea(&["list"]);
    out.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", out.stdout);
    // The NEXT column's width depends on the clock ("in 9h5m" vs "in
    // 17h48m"), so only the columns before it are compared to the letter.
    assert!(
        lines[0].starts_with("NAME                SCHEDULE      ZONE           NEXT  "),
        "{}",
        lines[0]
    );
    assert!(lines[0].ends_with("  FLAGS"), "{}", lines[0]);
    // Every column starts where its header starts.
    let col = |h: &str| lines[0].find(h).unwrap();
    for line in &lines[1..] {
        assert!(!line.ends_with(' '), "trailing space in {line:?}");
        for h in ["SCHEDULE", "ZONE", "NEXT"] {
            let c = col(h);
            assert_eq!(&line[c - 2..c], "  ", "{h} misaligned in {line:?}");
            assert_ne!(&line[c..c + 1], " ", "{h} misaligned in {line:?}");
        }
    }
    assert!(lines[1].starts_with("backup              0 3 * * *     Europe/Berlin  20"));
    assert!(
        lines[1].contains(" CET  in ") || lines[1].contains(" CEST  in "),
        "{}",
        lines[1]
    );
    assert!(lines[1].ends_with("  #db #nightly"), "{}", lines[1]);
    assert_eq!(
        lines[2],
        "at-boot             @reboot       UTC            at daemon start"
    );
    assert_eq!(
        lines[3],
        format!(
            "very-long-job-name  */15 * * * *  UTC            -{}disabled",
            " ".repeat(col("FLAGS") - col("NEXT") - 1)
        )
    );
    assert_eq!(
        lines[4],
        "never               0 0 30 2 *    UTC            never"
    );
}

#[test]
fn json_schema_is_stable() {
    let env = Env::new();
    env.jobs(JOBS);
    let out = env.rea(&["list", "--json"]);
    out.ok();
    let v = out.json();
    let jobs = v.as_array().expect("an array");
    assert_eq!(jobs.len(), 4);
    let keys = [
        "after",
        "command",
        // `after` with each entry's condition (#23): added beside it.
        "dependencies",
        "description",
        "enabled",
        "name",
        "next",
        // The job's declared parameters (#23).
        "params",
        "schedule",
        "tags",
        "timezone",
    ];
    for j in jobs {
        let mut got: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
        got.sort();
        assert_eq!(got, keys, "{j}");
    }
    let b = &jobs[0];
    assert_eq!(b["name"], "backup");
    assert_eq!(b["schedule"], "0 3 * * *");
    assert_eq!(b["timezone"], "Europe/Berlin");
    assert_eq!(b["command"], "backup");
    assert_eq!(b["enabled"], true);
    assert_eq!(b["tags"], serde_json::json!(["db", "nightly"]));
    assert_eq!(b["description"], "the nightly dump");
    let next = b["next"].as_str().expect("next is a string");
    let t = chrono::DateTime::parse_from_rfc3339(next).expect("RFC 3339");
    assert!(t > chrono::Utc::now());
    assert!(
        next.ends_with("T03:00:00+01:00") || next.ends_with("T03:00:00+02:00"),
        "{next}"
    );
    assert_eq!(jobs[1]["next"], serde_json::Value::Null, "@reboot");
    assert_eq!(jobs[2]["enabled"], false);
    assert_eq!(jobs[2]["next"], serde_json::Value::Null, "disabled");
    assert_eq!(jobs[2]["description"], serde_json::Value::Null);
    assert_eq!(jobs[3]["next"], serde_json::Value::Null, "never fires");
}

#[test]
fn an_empty_file_lists_the_header_only() {
    let env = Env::new();
    env.jobs("");
    env.rea(&["list"])
        .ok()
        .stdout_is("NAME  SCHEDULE  ZONE  NEXT    FLAGS\n");
    env.rea(&["list", "--json"]).ok().stdout_is("[]\n");
}

#[test]
fn an_invalid_file_is_reported_like_check() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncomand = \"x\"\n");
    let out = env.rea(&["list"]);
    out.code(2).stdout_is("");
    let f = env.jobs_path().display().to_string();
    out.stderr_has(&format!("{f}:1:1: job \"a\" has no \"command\""))
        .stderr_has(&format!("{f}:3:1: unknown field \"comand\""));
}

/// A daemon started with a relative `-f` (as the README's set-up command
/// does) keeps its file's absolute path: a command run in another directory
/// asks it which file it reads and lists that one, not its own directory's.
#[test]
fn a_daemon_started_with_a_relative_file_is_found_from_another_directory() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon_configured(&["-f", "jobs.toml"], |c| {
        c.env_remove("REA_FILE");
    });
    let elsewhere = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        elsewhere.path().join("jobs.toml"),
        "[jobs.decoy]\nschedule = \"@daily\"\ncommand = \"x\"\n",
    )
    .expect("decoy");
    let out = std::process::Command::new(crate::support::rea_bin())
        .arg("list")
        .current_dir(elsewhere.path())
        .env_remove("REA_FILE")
        .env("REA_STATE_DIR", env.state())
        .env("NO_COLOR", "1")
        .output()
        .expect("rea list");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("backup"), "{stdout}");
    assert!(!stdout.contains("decoy"), "{stdout}");
    let status = env.rea_env(&["status", "--json"], &[]).json();
    let file = status["daemon"]["file"].as_str().expect("file");
    assert_eq!(std::path::Path::new(file), env.jobs_path(), "{status}");
}
