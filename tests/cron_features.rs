//! What a crontab user expects beyond the schedule: running as a user,
//! MAILTO, hooks on success and failure, and jobs that run after others.

use std::os::unix::fs::PermissionsExt;

use crate::support::{wait_until, Env};

/// A fake sendmail that records its arguments and the message.
fn fake_sendmail(env: &Env) -> String {
    let log = env.path("mail.log");
    let script = env.write(
        "sendmail",
        &format!(
            "#!/bin/sh\necho \"ARGS: $*\" >> {0}\ncat >> {0}\necho '--end--' >> {0}\n",
            log.display()
        ),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script.display().to_string()
}

#[test]
fn mailto_sends_the_output_of_a_failed_run_through_sendmail() {
    let env = Env::new();
    let sendmail = fake_sendmail(&env);
    env.jobs(&format!(
        "[daemon]\nsendmail = \"{sendmail}\"\n\n[jobs.broken]\nschedule = \"@yearly\"\ncommand = \"echo disk full >&2; exit 4\"\nmailto = \"ops@example.com, dba@example.com\"\n\n[jobs.quiet]\nschedule = \"@yearly\"\ncommand = \"true\"\nmailto = \"ops@example.com\"\n"
    ));
    let _d = env.daemon();
    env.rea(&["trigger", "quiet", "--wait"]).ok();
    env.rea(&["trigger", "broken", "--wait"]).code(4);
    wait_until("the mail", || env.read("mail.log").contains("--end--"));
    let mail = env.read("mail.log");
    assert!(
        mail.starts_with("ARGS: -i -- ops@example.com dba@example.com\n"),
        "{mail}"
    );
    assert!(
        mail.contains("Subject: rea: broken failed (exit 4) on "),
        "{mail}"
    );
    assert!(mail.contains("disk full"), "{mail}");
    assert_eq!(
        mail.matches("--end--").count(),
        1,
        "a success sends no mail by default:\n{mail}"
    );
}

/// What mail systems and their users expect of a machine's mail, as
/// cron's: a date, MIME headers, `Auto-Submitted` (vacation responders
/// stay quiet), a sender; and the job sees its `MAILTO`, as cron exports it.
#[test]
fn mail_has_the_headers_of_a_machines_mail_and_the_job_sees_mailto() {
    let env = Env::new();
    let sendmail = fake_sendmail(&env);
    env.jobs(&format!(
        "[daemon]\nsendmail = \"{sendmail}\"\n\n[jobs.report]\nschedule = \"@yearly\"\ncommand = \"echo MAILTO=$MAILTO\"\nmailto = [\"ops@example.com\", \"dba@example.com\"]\nmail_on = \"always\"\n"
    ));
    let _d = env.daemon();
    env.rea(&["trigger", "report", "--wait"]).ok();
    wait_until("the mail", || env.read("mail.log").contains("--end--"));
    let mail = env.read("mail.log");
    let (headers, body) = mail.split_once("\n\n").expect("headers, then a body");
    for header in [
        "\nFrom: \"rea on ",
        "\nTo: ops@example.com, dba@example.com\n",
        "\nDate: ",
        "\nMIME-Version: 1.0\n",
        "\nContent-Type: text/plain; charset=utf-8\n",
        "\nAuto-Submitted: auto-generated\n",
    ] {
        assert!(headers.contains(header), "no {header:?} in:\n{headers}");
    }
    assert!(
        body.contains("MAILTO=ops@example.com,dba@example.com\n"),
        "{body}"
    );
}

/// A user's job mails as that user, as cron's do: sendmail runs as them
/// (the envelope sender), and the mail is from them, not from root.
#[test]
fn a_users_job_mails_as_that_user() {
    if crate::support::skip_unless_root("a_users_job_mails_as_that_user") {
        return;
    }
    crate::support::throwaway_user("rea-mailer").expect("root creates the user");
    let env = Env::new();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = env.write("mail.log", "");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = env.write(
        "sendmail",
        &format!(
            "#!/bin/sh\necho \"AS: $(id -un)\" >> {0}\ncat >> {0}\necho '--end--' >> {0}\n",
            log.display()
        ),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.jobs(&format!(
        "[daemon]\nsendmail = \"{}\"\n\n[jobs.theirs]\nschedule = \"@yearly\"\ncommand = \"exit 3\"\nuser = \"rea-mailer\"\nmailto = \"ops@example.com\"\n",
        script.display()
    ));
    let _d = env.daemon();
    env.rea(&["trigger", "theirs", "--wait"]).code(3);
    wait_until("the mail", || env.read("mail.log").contains("--end--"));
    let mail = env.read("mail.log");
    assert!(mail.starts_with("AS: rea-mailer\n"), "{mail}");
    assert!(mail.contains("\" <rea-mailer>\n"), "{mail}");
}

#[test]
fn check_warns_when_mailto_has_no_sendmail() {
    let env = Env::new();
    env.jobs("[daemon]\nsendmail = \"/nonexistent/sendmail\"\n\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\nmailto = \"ops@example.com\"\n");
    env.rea(&["check"])
        .ok()
        .stderr_has(":7:1: warning: job \"a\" mails its output, but there is no sendmail (/nonexistent/sendmail)")
        .stderr_has("hint: install a mail transfer agent");
}

#[test]
fn hooks_run_with_the_run_described_and_their_failure_is_only_logged() {
    let env = Env::new();
    let out = env.path("hooks.log");
    env.jobs(&format!(
        r#"[defaults]
on_failure = "echo failure $REA_JOB $REA_STATUS $REA_EXIT_CODE $REA_ATTEMPT $(cat $REA_OUTPUT_FILE) >> {0}; exit 9"
on_retry_exhausted = "echo exhausted $REA_JOB $REA_ATTEMPT >> {0}"
on_success = "echo success $REA_JOB $REA_DURATION_MS >> {0}"

[jobs.flaky]
schedule = "@yearly"
command = "echo oops; exit 3"
retry = {{ attempts = 1, delay = "100ms", jitter = 0.0 }}

[jobs.fine]
schedule = "@yearly"
command = "true"
"#,
        out.display()
    ));
    let d = env.daemon();
    env.rea(&["trigger", "fine", "--wait"]).ok();
    env.rea(&["trigger", "flaky", "--wait"]).code(3);
    wait_until("every hook", || env.read("hooks.log").lines().count() >= 4);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let log = env.read("hooks.log");
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("success fine ")),
        "{log}"
    );
    assert!(lines.contains(&"failure flaky failed 3 1 oops"), "{log}");
    assert!(lines.contains(&"failure flaky failed 3 2 oops"), "{log}");
    assert!(lines.contains(&"exhausted flaky 2"), "{log}");
    assert_eq!(
        lines.len(),
        4,
        "a failing hook never causes another hook or run:\n{log}"
    );
    assert_eq!(env.finals("flaky").len(), 2);
    assert!(d.log_text().contains("hook failed"), "{}", d.log_text());
    assert!(
        !env.state()
            .join("tmp")
            .read_dir()
            .map(|mut d| d.next().is_some())
            .unwrap_or(false),
        "output files are removed"
    );
}

#[test]
fn jobs_run_after_the_jobs_they_depend_on() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.extract]
schedule = "@yearly"
command = "echo extract"

[jobs.other]
schedule = "@yearly"
command = "echo other"

[jobs.transform]
after = ["extract"]
command = "echo transform"

[jobs.load]
after = ["transform", "other"]
command = "echo load"
"#,
    );
    env.rea(&["list"]).ok().stdout_has("after extract");
    let _d = env.daemon();
    env.rea(&["trigger", "extract", "--wait"]).ok();
    wait_until("transform", || {
        !env.runs("transform", "succeeded").is_empty()
    });
    assert_eq!(
        env.runs("transform", "succeeded")[0]["trigger"],
        "dependency"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(env.finals("load").is_empty(), "load also waits for other");
    env.rea(&["trigger", "other", "--wait"]).ok();
    wait_until("load", || !env.runs("load", "succeeded").is_empty());
}

#[test]
fn dependency_cycles_and_unknown_names_are_check_errors() {
    let env = Env::new();
    env.jobs(
        "[jobs.a]\nafter = [\"b\"]\ncommand = \"true\"\n\n[jobs.b]\nafter = [\"a\"]\ncommand = \"true\"\n\n[jobs.c]\nafter = [\"extrct\"]\ncommand = \"true\"\n\n[jobs.extract]\nschedule = \"@daily\"\ncommand = \"true\"\n",
    );
    let f = env.jobs_path().display().to_string();
    env.rea(&["check"])
        .code(2)
        .stderr_has(&format!(
            "{f}:2:1: jobs depend on each other in a cycle: a → b → a"
        ))
        .stderr_has(&format!(
            "{f}:10:1: job \"c\" runs after \"extrct\", which is not a job of this file"
        ))
        .stderr_has("did you mean \"extract\"?");
}

#[test]
fn a_job_runs_as_its_user_with_that_users_environment() {
    if !crate::support::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    env.jobs("[jobs.who]\nschedule = \"@yearly\"\ncommand = \"echo $(id -un) $USER $LOGNAME $HOME\"\nuser = \"nobody\"\ndir = \"/\"\n");
    let _d = env.daemon();
    env.rea(&["trigger", "who", "--wait"]).ok();
    let out = env.rea(&["logs", "who"]);
    let home = crate::support::user_home("nobody").expect("nobody exists");
    out.ok()
        .stdout_is(&format!("nobody nobody nobody {home}\n"));
}

#[test]
fn an_unknown_user_is_a_check_error() {
    let env = Env::new();
    env.jobs(
        "[jobs.who]\nschedule = \"@daily\"\ncommand = \"true\"\nuser = \"no-such-user-xyz\"\n",
    );
    env.rea(&["check"])
        .code(2)
        .stderr_has(":4:1: no user \"no-such-user-xyz\" on this machine");
}

#[test]
fn a_foreign_user_is_refused_when_not_root() {
    if !crate::support::is_root() {
        eprintln!("skipped: needs root to run rea as nobody");
        return;
    }
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    env.jobs("[jobs.who]\nschedule = \"@daily\"\ncommand = \"true\"\nuser = \"root\"\n");
    for p in [env.dir.path().to_path_buf(), env.jobs_path()] {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = std::process::Command::new(crate::support::rea_bin())
        .args(["check", "-f"])
        .arg(env.jobs_path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("only root can switch users"), "{stderr}");
}

#[test]
fn next_on_a_dependent_job_says_when_it_runs() {
    let env = Env::new();
    env.jobs("[jobs.extract]\nschedule = \"@daily\"\ncommand = \"true\"\n\n[jobs.load]\nafter = [\"extract\"]\ncommand = \"true\"\n");
    env.rea(&["next", "load"])
        .ok()
        .stdout_is("")
        .stderr_is("rea: job \"load\" has no schedule of its own: it runs after extract\n");
    let v = env.rea(&["next", "load", "--json"]).json();
    assert_eq!(v["after"][0], "extract");
    assert_eq!(v["fires"].as_array().map(Vec::len), Some(0));
}
