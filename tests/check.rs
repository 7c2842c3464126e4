//! `rea check`: exit codes and every error message a user can meet.

use crate::support::Env;

#[test]
fn the_shipped_example_passes() {
    let env = Env::new();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.example.toml");
    env.rea(&["check", "-f", example])
        .ok()
        .stdout_has("12 jobs OK");
}

#[test]
fn a_valid_file_prints_a_one_line_summary() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let out = env.rea(&["check"]);
    out.ok();
    assert_eq!(
        out.stdout,
        format!("{}: 1 job OK\n", env.jobs_path().display())
    );
}

#[test]
fn every_error_is_reported_with_its_position() {
    let env = Env::new();
    env.jobs(
        "[jobs.a]\nschedule = \"61 * * * *\"\ncomand = \"true\"\n\n[jobs.b]\nschedule = \"@daily\"\ncommand = \"x\"\ntimezone = \"Europe/Berln\"\nretry = { attempts = -1 }\n",
    );
    let out = env.rea(&["check"]);
    out.code(2);
    let f = env.jobs_path().display().to_string();
    out.stderr_has(&format!("{f}:2:13: "))
        .stderr_has(&format!("{f}:3:1: unknown field \"comand\""))
        .stderr_has("did you mean \"command\"?")
        .stderr_has(&format!("{f}:8:12: unknown timezone \"Europe/Berln\""))
        .stderr_has("attempts")
        .stderr_has("errors");
}
