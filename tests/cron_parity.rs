//! Where rea meets cron's habits and the tools around it: steps larger
//! than their field (cron accepts them), commands that read the schedule
//! on a machine without a job's user, `rea check --no-host-checks` for CI,
//! and `rea status --check` as a Nagios-style probe.

use crate::support::Env;

/// A user no machine has.
const NOBODY_HERE: &str = "no-such-user-rea-test";

#[test]
fn a_step_larger_than_its_field_is_a_warning_as_cron_accepts_it() {
    let env = Env::new();
    env.jobs(
        "[jobs.odd]\nschedule = \"*/61 * * * *\"\ncommand = \"true\"\n\
         [jobs.weekly]\nschedule = \"0 3 * * 1-7/9\"\ncommand = \"true\"\n",
    );
    let out = env.rea(&["check", "-f", "jobs.toml"]);
    out.ok().stdout_is("jobs.toml: 2 jobs OK\n");
    out.stderr_has(
        "jobs.toml:2:15: warning: step 61 in \"*/61\" is larger than the minute field (0-59): only minute 0 matches, as in cron\n  hint: write 0 if that is what you mean\n",
    );
    out.stderr_has(
        "jobs.toml:5:25: warning: step 9 in \"1-7/9\" is larger than the day-of-week field (0-7): only day-of-week 1 matches, as in cron",
    );
    let json = env.rea(&["check", "--json"]).json();
    assert_eq!(json["ok"], true);
    assert_eq!(json["warnings"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["warnings"][0]["line"], 2);

    // Only the first value matches, as cron has it: minute 0 of every hour,
    // and Mondays only.
    env.rea(&["next", "odd", "--after", "2026-03-02T10:30:00Z", "-n", "2"])
        .ok()
        .stdout_is("2026-03-02T11:00:00+00:00\n2026-03-02T12:00:00+00:00\n");
    env.rea(&[
        "next",
        "weekly",
        "--after",
        "2026-03-02T10:30:00Z",
        "-n",
        "2",
    ])
    .ok()
    .stdout_is("2026-03-09T03:00:00+00:00\n2026-03-16T03:00:00+00:00\n");
    // A zero step is still refused: cron refuses it too.
    env.rea(&["next", "*/0 * * * *"])
        .code(2)
        .stderr_has("invalid step \"0\" in the minute field");
}

#[test]
fn import_converts_a_step_larger_than_its_field_with_a_warning() {
    let env = Env::new();
    let tab = env.write(
        "tab",
        "*/61 * * * * /usr/local/bin/hourly\n0 */25 * * 1-7/9 /usr/local/bin/monday\n",
    );
    let out = env.rea(&["import", "--user", tab.to_str().unwrap()]);
    out.ok();
    out.stdout_has("schedule = \"*/61 * * * *\"")
        .stdout_has("schedule = \"0 */25 * * 1-7/9\"");
    out.stderr_has("tab:1: warning: schedule \"*/61 * * * *\": step 61 in \"*/61\" is larger than the minute field (0-59): only minute 0 matches, as in cron");
    out.stderr_has("tab:2: warning: schedule \"0 */25 * * 1-7/9\": step 25 in \"*/25\" is larger than the hour field (0-23)");
    out.stderr_has("0 lines not converted, 3 warnings");
    // And the result is a job file rea accepts.
    env.write("jobs.toml", &out.stdout);
    std::fs::set_permissions(
        env.jobs_path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    env.rea(&["check"]).ok();
}

const MISSING_USER: &str = r#"
[jobs.theirs]
schedule = "@daily"
command = "true"
user = "no-such-user-rea-test"

[jobs.mine]
schedule = "30 2 * * *"
command = "true"
"#;

#[test]
fn reading_commands_work_without_another_jobs_user() {
    let env = Env::new();
    env.jobs(MISSING_USER);
    // rea check still says the file cannot run here...
    env.rea(&["check", "-f", "jobs.toml"])
        .code(2)
        .stderr_has(&format!(
            "jobs.toml:5:1: no user \"{NOBODY_HERE}\" on this machine"
        ));
    // ... but the commands that only read the schedule do not fail on it.
    env.rea(&["next", "mine", "--after", "2026-03-02T00:00:00Z", "-n", "1"])
        .ok()
        .stdout_is("2026-03-02T02:30:00+00:00\n");
    env.rea(&[
        "next",
        "theirs",
        "--after",
        "2026-03-02T00:00:00Z",
        "-n",
        "1",
    ])
    .ok()
    .stdout_is("2026-03-03T00:00:00+00:00\n");
    let list = env.rea(&["list"]);
    list.ok().stdout_has("mine").stdout_has("theirs");
    // Offline status reads the file the same way.
    env.rea(&["status"]).ok().stdout_has("mine");
}

#[test]
fn check_without_host_checks_is_for_machines_that_lack_the_users() {
    let env = Env::new();
    env.jobs(MISSING_USER);
    env.rea(&["check", "-f", "jobs.toml", "--no-host-checks"])
        .ok()
        .stdout_is("jobs.toml: 2 jobs OK (users and sendmail not checked: --no-host-checks)\n")
        .stderr_is("");
    let json = env.rea(&["check", "--no-host-checks", "--json"]).json();
    assert_eq!(json["ok"], true, "{json}");
    // The file's own errors still fail it.
    env.jobs(&format!(
        "{MISSING_USER}\n[jobs.bad]\nschedule = \"61 * * * *\"\ncommand = \"x\"\n"
    ));
    env.rea(&["check", "-f", "jobs.toml", "--no-host-checks"])
        .code(2)
        .stderr_has("minute value 61 is out of range");
}

#[test]
fn status_check_is_a_nagios_probe() {
    let env = Env::new();
    let good = "[jobs.good]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    let bad = "[jobs.bad]\nschedule = \"@yearly\"\ncommand = \"exit 3\"\n";
    let off = "[jobs.off]\nschedule = \"@yearly\"\ncommand = \"false\"\nenabled = false\n";
    env.jobs(&format!("{good}{bad}{off}"));

    // No daemon: CRITICAL, whatever the history says.
    env.rea(&["status", "--check"]).code(2).stdout_is(&format!(
        "rea CRITICAL: no daemon runs for {}\n",
        env.state().display()
    ));

    let d = env.daemon();
    env.rea(&["status", "--check"])
        .ok()
        .stdout_is("rea OK: 2 jobs, none failing\n");
    env.rea(&["trigger", "good", "--wait"]).ok();
    env.rea(&["trigger", "bad", "--wait"]).code(3);
    env.rea(&["trigger", "bad", "--wait"]).code(3);
    env.rea(&["status", "--check"])
        .code(2)
        .stdout_is("rea CRITICAL: 1 of 2 jobs failing: bad (failed, exit 3, 2 in a row)\n");
    // A disabled job that failed long ago is not a failing job.
    env.rea(&["trigger", "off", "--wait", "--force"]);

    // Fixed: OK again.
    env.jobs(&format!("{good}{}{off}", bad.replace("exit 3", "true")));
    env.rea(&["reload"]).ok();
    env.rea(&["trigger", "bad", "--wait"]).ok();
    env.rea(&["status", "--check"])
        .ok()
        .stdout_is("rea OK: 2 jobs, none failing\n");

    // An invalid edit: the daemon keeps the last good file; WARNING.
    env.jobs(&format!("{good}[jobs.broken]\n"));
    env.rea(&["reload"]).code(2);
    env.rea(&["status", "--check"]).code(1).stdout_is(
        "rea WARNING: the job file is invalid (2 errors); the daemon runs the last good one\n",
    );

    // --check is for people's probes, not scripts' JSON.
    env.rea(&["status", "--check", "--json"]).code(2);

    // Stopped, with a failure in the history: both are said.
    env.jobs(&format!("{good}{bad}"));
    env.rea(&["reload"]).ok();
    env.rea(&["trigger", "bad", "--wait"]).code(3);
    assert_eq!(d.stop(), 0);
    env.rea(&["status", "--check"]).code(2).stdout_is(&format!(
        "rea CRITICAL: no daemon runs for {}; 1 of 2 jobs failing: bad (failed, exit 3)\n",
        env.state().display()
    ));
}

/// What cron takes silently but no one means: a day that does not exist in
/// its months (the job never runs) and a start delay as long as the period
/// (a delayed run starts after the next one is due). Accepted, as cron
/// accepts them, each with a located warning.
#[test]
fn check_warns_of_a_schedule_that_never_fires_and_of_jitter_longer_than_the_period() {
    let env = Env::new();
    env.jobs(
        "[jobs.never]\nschedule = \"0 0 31 2 *\"\ncommand = \"true\"\n\
         [jobs.drifts]\nschedule = \"*/5 * * * *\"\ncommand = \"true\"\njitter = \"10m\"\n\
         [jobs.fine]\nschedule = \"*/5 * * * *\"\ncommand = \"true\"\njitter = \"30s\"\n\
         [jobs.leap]\nschedule = \"0 0 29 2 *\"\ncommand = \"true\"\n",
    );
    let out = env.rea(&["check", "-f", "jobs.toml"]);
    out.ok().stdout_is("jobs.toml: 4 jobs OK\n");
    out.stderr_has("jobs.toml:2:17: warning: this schedule never fires: none of its days exists in its months\n  hint: February has at most 29 days");
    out.stderr_has("jobs.toml:7:1: warning: job \"drifts\": jitter 10m is not shorter than the time between two of its runs (5m): a delayed run starts after the next one is due\n");
    let json = env.rea(&["check", "--json"]).json();
    assert_eq!(json["warnings"].as_array().map(Vec::len), Some(2), "{json}");
}
