//! `rea edit` as root on the main job file (crontab -e): what the editor
//! shows when the file has errors, what is left in the temporary directory,
//! names others could take in advance there, and a job file that is a
//! symbolic link. (Users' own files, edited through the daemon, are in
//! `users.rs`.)

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{rea_bin, skip_unless_root, Env, Run};

/// An editor script that saves what it was shown as `seenN` and replaces
/// the file with the next of `versions` (one per opening).
fn editor(env: &Env, versions: &[&str]) -> String {
    let dir = env.path("editor");
    fs::create_dir_all(&dir).expect("mkdir");
    for (i, v) in versions.iter().enumerate() {
        fs::write(dir.join(format!("v{i}")), v).expect("write");
    }
    fs::write(dir.join("count"), "0").expect("write");
    let script = dir.join("edit.sh");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nd={d}\nn=$(cat $d/count)\ncp \"$1\" $d/seen$n\ncat $d/v$n > \"$1\"\necho $((n + 1)) > $d/count\n",
            d = dir.display()
        ),
    )
    .expect("write");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    script.display().to_string()
}

/// `PREFIX... rea edit` as root with `REA_FILE=file`, `EDITOR=editor` and
/// `TMPDIR=<sandbox>/tmp`.
fn edit(env: &Env, prefix: &[&str], file: &Path, editor: &str) -> Run {
    let tmp = env.path("tmp");
    fs::create_dir_all(&tmp).expect("mkdir");
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).expect("chmod");
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(rea_bin());
            c
        }
        None => Command::new(rea_bin()),
    };
    let out = cmd
        .arg("edit")
        .current_dir(env.dir.path())
        .env("REA_FILE", file)
        .env("REA_STATE_DIR", env.state())
        .env("EDITOR", editor)
        .env_remove("VISUAL")
        .env("TMPDIR", &tmp)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run rea edit");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

fn leftovers(env: &Env) -> Vec<String> {
    fs::read_dir(env.path("tmp"))
        .expect("read tmp")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

const GOOD: &str = "[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n";
const BAD: &str = "[jobs.a]\nschedule = \"@daily\"\ncomand = \"true\"\n";

/// The errors used to be printed and then hidden by the editor that opened
/// again: now they are at the top of the reopened file, as comments whose
/// line numbers point at the lines the editor shows, and the comment is not
/// installed.
#[test]
fn an_edit_with_errors_reopens_with_the_errors_at_the_top() {
    if skip_unless_root("an_edit_with_errors_reopens_with_the_errors_at_the_top") {
        return;
    }
    let env = Env::new();
    env.jobs("");
    let script = editor(&env, &[BAD, GOOD]);
    let out = edit(&env, &[], &env.jobs_path(), &script);
    out.ok().stderr_has("unknown field \"comand\"");
    let shown = env.read("editor/seen1");
    let first = shown.lines().next().unwrap_or("");
    assert!(first.starts_with("# rea: not installed"), "{shown}");
    // "#   /path/jobs.toml:LINE:COL: unknown field ..." names a line of the
    // reopened file: the misspelt one.
    let prefix = format!("#   {}:", env.jobs_path().display());
    let located = shown
        .lines()
        .filter(|l| l.contains("unknown field"))
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no located error in:\n{shown}"));
    let line: usize = located
        .split(':')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no line number in {located:?}"));
    assert_eq!(
        shown.lines().nth(line - 1),
        Some("comand = \"true\""),
        "line {line} of:\n{shown}"
    );
    assert!(shown.ends_with(BAD), "the user's text follows:\n{shown}");
    assert_eq!(env.read("jobs.toml"), GOOD, "the comment is not installed");
    assert!(leftovers(&env).is_empty(), "{:?}", leftovers(&env));
}

/// Saved twice with the same errors, even with the comment deleted: the
/// user gave up; nothing is installed and nothing is left behind.
#[test]
fn saving_the_same_errors_again_gives_up() {
    if skip_unless_root("saving_the_same_errors_again_gives_up") {
        return;
    }
    let env = Env::new();
    env.jobs(GOOD);
    let script = editor(&env, &[BAD, BAD]);
    edit(&env, &[], &env.jobs_path(), &script)
        .code(2)
        .stderr_has("still has errors; nothing was changed");
    assert_eq!(env.read("jobs.toml"), GOOD);
    assert!(leftovers(&env).is_empty(), "{:?}", leftovers(&env));
}

/// crontab removes its copy when the editor fails; so does rea edit.
#[test]
fn a_failed_editor_leaves_nothing_behind() {
    if skip_unless_root("a_failed_editor_leaves_nothing_behind") {
        return;
    }
    let env = Env::new();
    env.jobs(GOOD);
    edit(&env, &[], &env.jobs_path(), "false")
        .code(1)
        .stderr_has("the editor \"false\" failed");
    assert!(leftovers(&env).is_empty(), "{:?}", leftovers(&env));
    assert_eq!(env.read("jobs.toml"), GOOD);
}

/// Anyone can create directories in /tmp: names made of rea's process id
/// could all be taken in advance. In a new PID namespace rea's process id
/// is known (1), and all the names it used to try are taken.
#[test]
fn names_taken_in_advance_in_the_temporary_directory_do_not_block_it() {
    if skip_unless_root("names_taken_in_advance_in_the_temporary_directory_do_not_block_it") {
        return;
    }
    let namespaces = Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !namespaces {
        eprintln!("\n*** SKIPPED names_taken_in_advance...: unshare --pid cannot run here ***\n");
        return;
    }
    let env = Env::new();
    env.jobs("");
    let tmp = env.path("tmp");
    for pid in 1..=3 {
        for n in 0..100 {
            fs::create_dir_all(tmp.join(format!("rea-edit-{pid}-{n}"))).expect("mkdir");
        }
    }
    let script = editor(&env, &[GOOD]);
    edit(
        &env,
        &["unshare", "--pid", "--fork"],
        &env.jobs_path(),
        &script,
    )
    .ok();
    assert_eq!(env.read("jobs.toml"), GOOD);
    assert_eq!(leftovers(&env).len(), 300, "only the squatters are left");
}

/// A job file that is a symbolic link (to a file under version control,
/// say) stays a link; the file it points to gets the edit.
#[test]
fn a_symlinked_job_file_stays_a_link() {
    if skip_unless_root("a_symlinked_job_file_stays_a_link") {
        return;
    }
    let env = Env::new();
    let real = env.write("real/jobs.toml", "");
    fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).expect("chmod");
    let link = env.path("jobs.toml");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let script = editor(&env, &[GOOD]);
    edit(&env, &[], &link, &script)
        .ok()
        .stderr_has("(the link ");
    assert!(
        fs::symlink_metadata(&link)
            .expect("stat")
            .file_type()
            .is_symlink(),
        "the link was replaced by a file"
    );
    assert_eq!(env.read("real/jobs.toml"), GOOD);
    let mode = fs::metadata(&real).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "the target keeps its mode");
}
