//! Completion of job names, one-shot ids and tags, in real bash, zsh and
//! fish running the committed scripts of `completions/` (zsh and fish when
//! installed; skipped loudly otherwise). The names come from the job file
//! and the daemon through the hidden `rea complete`, which the scripts
//! find on the PATH as `rea`.

use std::path::Path;
use std::process::Command;

use crate::support::{rea_bin, Env};

fn repo(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(rel)
        .display()
        .to_string()
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A shell command with this test's `rea` first on the PATH and the
/// sandbox's job file and state directory in the environment.
fn shell(env: &Env, program: &str) -> Command {
    let bin_dir = Path::new(rea_bin())
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(program);
    c.env("PATH", path)
        .env("REA_FILE", env.jobs_path())
        .env("REA_STATE_DIR", env.state())
        .env("TZ", "UTC")
        .current_dir(env.dir.path());
    c
}

fn lines(out: std::process::Output, what: &str) -> Vec<String> {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_string())
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

/// TAB in bash: the function `complete -p rea` names, with COMP_WORDS set.
fn bash(env: &Env, words: &[&str]) -> Vec<String> {
    let script = r#"
        source "$REA_COMPLETION" || exit 90
        fn=$(complete -p rea | sed -n 's/.*-F \([^ ]*\).*/\1/p')
        [ -n "$fn" ] || exit 92
        COMP_WORDS=("$@")
        COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        "$fn" rea "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = shell(env, "bash")
        .args(["--norc", "--noprofile", "-c", script, "bash"])
        .args(words)
        .env("REA_COMPLETION", repo("completions/rea.bash"))
        .output()
        .expect("run bash");
    lines(out, &format!("bash completing {words:?}"))
}

/// zsh: the script's `_rea_names` with `words`/`CURRENT` set as the
/// completion system sets them, and `compadd` printing what it is given
/// (driving zsh's line editor needs a terminal; this runs everything of
/// ours in real zsh). The static fallback prints STATIC.
fn zsh(env: &Env, words: &[&str]) -> Vec<String> {
    let script = r#"
        compdef() { : }
        source "$REA_COMPLETION" || exit 90
        _rea() { print -r -- STATIC }
        compadd() {
            while [[ $1 == -* && $1 != -a ]]; do shift; done
            [[ $1 == -a ]] && print -rl -- "${(@P)2}"
        }
        words=("$@")
        CURRENT=$#
        _rea_names
    "#;
    let out = shell(env, "zsh")
        .args(["-f", "-c", script, "zsh"])
        .args(words)
        .env("REA_COMPLETION", repo("completions/_rea"))
        .output()
        .expect("run zsh");
    lines(out, &format!("zsh completing {words:?}"))
}

/// fish's own answer to TAB after `line`.
fn fish(env: &Env, line: &str) -> Vec<String> {
    let out = shell(env, "fish")
        .args(["--no-config", "-c"])
        .arg(format!(
            "source {}; complete -C '{line}'",
            repo("completions/rea.fish")
        ))
        .output()
        .expect("run fish");
    lines(out, &format!("fish completing {line:?}"))
}

const JOBS: &str = r#"
[jobs.backup]
schedule = "@daily"
command = "true"
tags = ["billing", "nightly"]

[jobs.bounce]
schedule = "@daily"
command = "true"

[jobs.report]
schedule = "@weekly"
command = "true"
tags = ["billing"]
"#;

/// A sandbox with the jobs above, a daemon and one pending one-shot.
fn sandbox() -> (Env, crate::support::Daemon) {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    env.rea(&[
        "submit",
        "--in",
        "1h",
        "--name",
        "close-order-1",
        "--tag",
        "orders",
        "--",
        "true",
    ])
    .ok();
    (env, d)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn bash_completes_job_names_one_shot_ids_and_tags() {
    let (env, _d) = sandbox();
    assert_eq!(bash(&env, &["rea", "trigger", "b"]), ["backup", "bounce"]);
    assert_eq!(
        bash(&env, &["rea", "trigger", ""]),
        ["backup", "bounce", "report"]
    );
    assert_eq!(bash(&env, &["rea", "logs", "--raw", "r"]), ["report"]);
    assert_eq!(bash(&env, &["rea", "cancel", ""]), ["close-order-1"]);
    assert_eq!(
        bash(&env, &["rea", "status", ""]),
        ["backup", "bounce", "close-order-1", "report"]
    );
    assert_eq!(
        bash(&env, &["rea", "pause", "--tag", ""]),
        ["billing", "nightly", "orders"]
    );
    // Nothing matches: nothing offered (not file names).
    assert_eq!(bash(&env, &["rea", "trigger", "zz"]), Vec::<String>::new());
    // A job file named on the line is the one read.
    env.write(
        "other.toml",
        "[jobs.elsewhere]\nschedule = \"@daily\"\ncommand = \"true\"\n",
    );
    assert_eq!(
        bash(&env, &["rea", "-f", "other.toml", "trigger", ""]),
        ["elsewhere"]
    );
    // The drop-ins beside the job file are read too.
    env.write(
        "jobs.d/pkg.toml",
        "[jobs.dropped-in]\nschedule = \"@daily\"\ncommand = \"true\"\n",
    );
    assert_eq!(bash(&env, &["rea", "trigger", "d"]), ["dropped-in"]);
    // The static completion still answers everything else.
    assert_eq!(bash(&env, &["rea", "tri"]), ["trigger"]);
    assert!(bash(&env, &["rea", "trigger", "--w"]).contains(&"--wait".to_string()));
}

#[test]
fn zsh_completes_job_names_one_shot_ids_and_tags() {
    if !have("zsh") {
        eprintln!("SKIPPED: zsh is not installed: zsh completion not tested (apt-get install zsh)");
        return;
    }
    let (env, _d) = sandbox();
    assert_eq!(zsh(&env, &["rea", "trigger", "b"]), ["backup", "bounce"]);
    assert_eq!(zsh(&env, &["rea", "cancel", ""]), ["close-order-1"]);
    assert_eq!(
        zsh(&env, &["rea", "pending", "--tag", ""]),
        ["billing", "nightly", "orders"]
    );
    assert_eq!(zsh(&env, &["rea", "tri"]), ["STATIC"]);
    assert_eq!(zsh(&env, &["rea", "trigger", "zz"]), Vec::<String>::new());
}

#[test]
fn fish_completes_job_names_one_shot_ids_and_tags() {
    if !have("fish") {
        eprintln!(
            "SKIPPED: fish is not installed: fish completion not tested (apt-get install fish)"
        );
        return;
    }
    let (env, _d) = sandbox();
    assert_eq!(fish(&env, "rea trigger b"), strings(&["backup", "bounce"]));
    assert_eq!(fish(&env, "rea cancel "), strings(&["close-order-1"]));
    assert_eq!(
        fish(&env, "rea resume --tag "),
        strings(&["billing", "nightly", "orders"])
    );
    let subcommands = fish(&env, "rea tri");
    assert_eq!(subcommands, strings(&["trigger"]));
    // In `rea logs`, -f is --follow (as in tail -f): a job comes next, not
    // a file name.
    env.write("bystander.txt", "");
    assert_eq!(fish(&env, "rea logs -f b"), strings(&["backup", "bounce"]));
    assert_eq!(
        fish(&env, "rea logs -f "),
        strings(&["backup", "bounce", "report"])
    );
}

/// The same in bash, and rea-logs(1) agrees with itself: `-f` is
/// `--follow`, `--file` has no short form there.
#[test]
fn logs_dash_f_is_follow_in_completions_and_the_man_page() {
    let (env, _d) = sandbox();
    env.write("bystander.txt", "");
    assert_eq!(
        bash(&env, &["rea", "logs", "-f", "b"]),
        ["backup", "bounce"]
    );
    let page = std::fs::read_to_string(repo("man/rea-logs.1")).expect("rea-logs.1");
    assert!(
        page.contains("\\fB\\-f\\fR, \\fB\\-\\-follow\\fR"),
        "{page}"
    );
    assert!(!page.contains("\\fB\\-f\\fR, \\fB\\-\\-file\\fR"), "{page}");
}

#[test]
fn readme_installs_completions_where_debian_shells_read_them() {
    let readme = std::fs::read_to_string(repo("README.md")).expect("README.md");
    // What Debian's shells read without any XDG_DATA_DIRS (a root shell
    // over ssh has none): fish only /usr/share/fish/vendor_completions.d,
    // bash-completion and zsh also /usr/local/share.
    for path in [
        "/usr/share/fish/vendor_completions.d/rea.fish",
        "/usr/local/share/bash-completion/completions/rea",
        "/usr/local/share/zsh/site-functions/_rea",
    ] {
        assert!(readme.contains(path), "README.md does not install {path}");
    }
}
