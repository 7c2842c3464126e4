//! Hot reload: every way people and tools change a file reloads it; a bad
//! edit never stops the good jobs; unchanged jobs keep their state.

use std::fs;
use std::os::unix::fs::symlink;
use std::process::Command;

use crate::support::Env;

const ONE: &str = "[jobs.one]\nschedule = \"* * * * * *\"\ncommand = \"echo one\"\n";
const TWO: &str = "[jobs.one]\nschedule = \"* * * * * *\"\ncommand = \"echo one\"\n\n[jobs.two]\nschedule = \"* * * * * *\"\ncommand = \"echo two\"\n";

fn loaded(env: &Env) -> usize {
    env.events("config_loaded").len()
}

fn assert_reloads(env: &Env, edit: impl FnOnce()) {
    let before = loaded(env);
    edit();
    env.wait_until("the edit to be loaded", || loaded(env) > before);
    env.wait_until("the new job to run", || {
        !env.runs("two", "succeeded").is_empty()
    });
}

/// An edit the daemon refuses (a timeout it cannot read, at 4:11), waited
/// for until the refusal is recorded.
fn refuse_an_edit(env: &Env) {
    env.jobs("[jobs.one]\nschedule = \"* * * * * *\"\ncommand = \"echo one\"\ntimeout = \"ten minutes\"\n");
    env.wait_until("the rejection", || {
        !env.events("config_rejected").is_empty()
    });
}

#[test]
fn an_in_place_write_reloads() {
    let env = Env::new();
    env.jobs(ONE);
    let _d = env.daemon();
    assert_reloads(&env, || {
        env.jobs(TWO);
    });
}

#[test]
fn a_rename_over_reloads() {
    let env = Env::new();
    env.jobs(ONE);
    let _d = env.daemon();
    assert_reloads(&env, || {
        let tmp = env.write("jobs.toml.new", TWO);
        fs::rename(tmp, env.jobs_path()).unwrap();
    });
}

#[test]
fn sed_in_place_reloads() {
    let env = Env::new();
    env.jobs(&TWO.replace("[jobs.two]", "[jobs.tw0]"));
    let _d = env.daemon();
    assert_reloads(&env, || {
        let st = Command::new("sed")
            .args(["-i", "s/jobs.tw0/jobs.two/"])
            .arg(env.jobs_path())
            .status()
            .unwrap();
        assert!(st.success());
    });
}

#[test]
fn a_configmap_style_symlink_swap_reloads() {
    let env = Env::new();
    // jobs.toml -> ..data/jobs.toml, ..data -> v1; the update swaps ..data.
    env.write("v1/jobs.toml", ONE);
    env.write("v2/jobs.toml", TWO);
    symlink("v1", env.path("..data")).unwrap();
    symlink("..data/jobs.toml", env.jobs_path()).unwrap();
    let _d = env.daemon();
    env.wait_until("a first run", || !env.runs("one", "succeeded").is_empty());
    assert_reloads(&env, || {
        symlink("v2", env.path("..data_tmp")).unwrap();
        fs::rename(env.path("..data_tmp"), env.path("..data")).unwrap();
    });
}

#[test]
fn a_bad_edit_keeps_the_good_jobs_and_a_good_one_clears_the_banner() {
    let env = Env::new();
    env.jobs(ONE);
    let _d = env.daemon();
    env.wait_until("a first run", || !env.runs("one", "succeeded").is_empty());
    refuse_an_edit(&env);
    let rejected = &env.events("config_rejected")[0];
    assert!(
        rejected["reason"].as_str().unwrap().contains(":4:11: "),
        "{rejected}"
    );
    let before = env.runs("one", "succeeded").len();
    env.wait_until("the old job to keep running", || {
        env.runs("one", "succeeded").len() >= before + 2
    });
    env.rea(&["status"])
        .ok()
        .stdout_has("!! the job file is invalid");
    env.jobs(TWO);
    env.wait_until("the fixed file to load", || {
        !env.runs("two", "succeeded").is_empty()
    });
    let status = env.rea(&["status"]);
    assert!(!status.stdout.contains("!!"), "{}", status.stdout);
}

#[test]
fn unchanged_jobs_keep_their_retry_state_and_next_fire() {
    let env = Env::new();
    let base = "[jobs.flaky]\nschedule = \"@yearly\"\ncommand = \"exit 1\"\nretry = { attempts = 3, delay = \"1h\", max_delay = \"2h\" }\n";
    env.jobs(base);
    let _d = env.daemon();
    env.rea(&["trigger", "flaky", "--wait"]).code(1);
    let before = env.rea(&["status", "flaky", "--json"]).json();
    let retry_at = before["jobs"][0]["retry_at"].clone();
    assert!(retry_at.is_string(), "{before}");
    let loaded_before = loaded(&env);
    env.jobs(&format!(
        "{base}\n[jobs.other]\nschedule = \"@daily\"\ncommand = \"true\"\n"
    ));
    env.wait_until("the reload", || loaded(&env) > loaded_before);
    let after = env.rea(&["status", "flaky", "--json"]).json();
    assert_eq!(after["jobs"][0]["retry_at"], retry_at, "retry kept");
    assert_eq!(
        after["jobs"][0]["next_fire"],
        before["jobs"][0]["next_fire"]
    );
    let last = env.events("config_loaded").pop().unwrap();
    assert_eq!(
        (
            last["detail"]["unchanged"].as_u64(),
            last["detail"]["added"].as_u64()
        ),
        (Some(1), Some(1))
    );
}

#[test]
fn rea_reload_says_what_it_did_and_parses_an_unchanged_file_once() {
    let env = Env::new();
    env.jobs(ONE);
    let _d = env.daemon();
    env.rea(&["reload"])
        .ok()
        .stdout_is("the job file is unchanged: 1 jobs in force\n");
    let before = loaded(&env);
    env.jobs(TWO);
    env.wait_until("the watcher's reload", || loaded(&env) > before);
    env.rea(&["reload"])
        .ok()
        .stdout_is("the job file is unchanged: 2 jobs in force\n");
    assert_eq!(loaded(&env), before + 1, "the edit was parsed once");
}

/// Restoring the exact bytes of the configuration in force after a refused
/// edit is trusted at once: the banner, `status --check` and `rea reload`
/// say the file is good, without a SIGHUP.
#[test]
fn reverting_to_the_last_good_bytes_clears_the_refusal() {
    let env = Env::new();
    env.jobs(ONE);
    let _d = env.daemon();
    env.wait_until("a first run", || !env.runs("one", "succeeded").is_empty());
    refuse_an_edit(&env);
    env.rea(&["status"])
        .ok()
        .stdout_has("!! the job file is invalid");
    env.rea(&["status", "--check"]).code(1);
    env.jobs(ONE);
    env.wait_until("the banner to go", || {
        !env.rea(&["status"]).stdout.contains("!!")
    });
    env.rea(&["status", "--check"]).ok();
    env.rea(&["reload"]).ok();
}
