//! Users' own job files (`users/NAME.toml`, cron's user crontabs) and `rea
//! edit`: a root daemon runs each user's jobs as that user, and authorizes
//! each socket request by who sent it. Two unprivileged users, neither of
//! whom can touch the other's jobs, the system's jobs, or one-shots (which
//! would run as root). Needs root (to switch users); skips loudly without.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::process::Command;

use crate::support::{rea_bin, skip_unless_root, throwaway_user, Env, Run, PATIENCE};

const ALICE: &str = "rea-alice";
const BOB: &str = "rea-bob";

/// `rea ARGS` as `user`, against the sandbox's state directory, with
/// `EDITOR` set to `editor` if given.
pub(crate) fn rea_as(env: &Env, user: &str, args: &[&str], editor: Option<&str>) -> Run {
    rea_as_with_input(env, user, args, editor, b"")
}

/// [`rea_as`] with `input` on stdin.
pub(crate) fn rea_as_with_input(
    env: &Env,
    user: &str,
    args: &[&str],
    editor: Option<&str>,
    input: &[u8],
) -> Run {
    use std::io::Write;
    let (uid, gid) = throwaway_user(user).expect("root creates the test users");
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(rea_bin())
        .args(args)
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("REA_STATE_DIR", env.state())
        .env("NO_COLOR", "1");
    if let Some(e) = editor {
        cmd.env("EDITOR", e);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv rea");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("stdin");
    let out = child.wait_with_output().expect("setpriv rea");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "rea panicked:\n{}",
        run.stderr
    );
    run
}

/// An editor script that replaces the file with the next of `versions`
/// (one per opening), readable by every user.
pub(crate) fn editor(env: &Env, name: &str, versions: &[&str]) -> String {
    let dir = env.path(&format!("editor-{name}"));
    fs::create_dir_all(&dir).expect("mkdir");
    for (i, v) in versions.iter().enumerate() {
        fs::write(dir.join(format!("v{i}")), v).expect("write");
    }
    let count = dir.join("count");
    fs::write(&count, "0").expect("write");
    let script = dir.join("edit.sh");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nn=$(cat {c})\ncat {d}/v$n > \"$1\"\necho $((n + 1)) > {c}\n",
            c = count.display(),
            d = dir.display()
        ),
    )
    .expect("write");
    for p in [&dir, &script, &count] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    for i in 0..versions.len() {
        fs::set_permissions(dir.join(format!("v{i}")), fs::Permissions::from_mode(0o644))
            .expect("chmod");
    }
    script.display().to_string()
}

/// A sandbox other users can reach (its directory 0711, so the socket and
/// the editor scripts), with `main` as root's job file and a `users`
/// directory beside it.
pub(crate) fn shared_env(main: &str) -> Env {
    let env = Env::new();
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
    env.jobs(main);
    fs::create_dir_all(env.path("users")).expect("mkdir users");
    env
}

/// Writes `text` as `user`'s job file in a [`shared_env`]: 0600 and
/// root's, as `rea edit` installs it and the daemon requires.
pub(crate) fn user_file(env: &Env, user: &str, text: &str) -> std::path::PathBuf {
    let f = env.write(&format!("users/{user}.toml"), text);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
    f
}

/// [`shared_env`] with a system job `sys` and one job per user (`hers` for
/// rea-alice, `his` for rea-bob), each a long sleep.
pub(crate) fn hung_jobs_env() -> Env {
    let hung = |name: &str| {
        format!(
            "[jobs.{name}]\nschedule = \"@yearly\"\ncommand = \"sleep 300\"\nkill_grace = \"1s\"\n"
        )
    };
    let env = shared_env(&hung("sys"));
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    for (user, job) in [(ALICE, "hers"), (BOB, "his")] {
        user_file(&env, user, &hung(job));
    }
    env
}

pub(crate) fn job_names(status: &serde_json::Value) -> Vec<String> {
    status["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| j["name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn users_edit_and_run_their_own_jobs_and_nothing_else() {
    if skip_unless_root("users_edit_and_run_their_own_jobs_and_nothing_else") {
        return;
    }
    let env = Env::new();
    // Other users must reach the socket (the state directory becomes 0711)
    // and run the editor script; the sandbox itself stays root's.
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
    env.jobs("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"id -un\"\n");
    fs::create_dir(env.path("users")).expect("mkdir users");
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    let d = env.daemon();

    // A broken drop-in of root's is not alice's to fix, nor to read.
    let broken = env.write("jobs.d/broken.toml", "[jobs.x]\nschedule = \"@yearly\"\n");
    fs::set_permissions(&broken, fs::Permissions::from_mode(0o600)).expect("chmod");
    env.rea(&["reload"]);

    // Alice's first edit has an error; the editor opens again and she fixes it.
    let bad = "[jobs.mine]\nschedule = \"@yearly\"\ncommand = \"id -un\"\nuser = \"root\"\n";
    let good = "[jobs.mine]\nschedule = \"@yearly\"\ncommand = \"id -un\"\ntags = [\"a\"]\n";
    let script = editor(&env, "alice", &[bad, good]);
    let out = rea_as(&env, ALICE, &["edit"], Some(&script));
    out.ok()
        .stderr_has("the jobs of rea-alice's file run as rea-alice, not as \"root\"")
        .stderr_has("opening it again")
        .stderr_has("installed");
    assert!(!out.stderr.contains("broken.toml"), "{}", out.stderr);
    let file = env.path("users/rea-alice.toml");
    let meta = fs::metadata(&file).expect("installed");
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (0, 0o600),
        "root's, private"
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), good);

    // She sees and runs her own job, as herself.
    let status = rea_as(&env, ALICE, &["status", "--json"], None).ok().json();
    assert_eq!(job_names(&status), ["mine"]);
    rea_as(&env, ALICE, &["trigger", "mine", "--wait"], None).ok();
    // Stored under her tenant: root's view names it rea-alice/mine.
    let mine = format!("{ALICE}/mine");
    env.wait_until("mine's run", || !env.runs(&mine, "succeeded").is_empty());
    assert_eq!(env.runs(&mine, "succeeded")[0]["output"], "rea-alice\n");
    rea_as(&env, ALICE, &["pause", "--all"], None)
        .ok()
        .stdout_has("paused: mine");
    // Her history and output, through the daemon (the state directory is
    // root's), and nobody else's.
    rea_as(&env, ALICE, &["history", "mine"], None)
        .ok()
        .stdout_has("succeeded");
    rea_as(&env, ALICE, &["logs", "mine"], None)
        .ok()
        .stdout_is("rea-alice\n");
    // "sys" in her mouth is her own (none): root's is not shown.
    rea_as(&env, ALICE, &["history", "sys"], None)
        .ok()
        .stdout_is("")
        .stderr_has("no matching runs");
    // Her runs' output as it comes, and nobody else's.
    rea_as(&env, ALICE, &["trigger", "mine", "--follow"], None)
        .ok()
        .stdout_is("rea-alice\n");
    rea_as(&env, ALICE, &["logs", "--follow", "sys"], None)
        .code(5)
        .stderr_has("no job named \"sys\"");
    rea_as(&env, BOB, &["logs", "--follow", "mine"], None).code(5);
    // Her whole history is her tenant's records, named as she names them.
    let history = rea_as(&env, ALICE, &["history"], None).ok().stdout.clone();
    assert!(
        history.contains("mine") && !history.contains("sys"),
        "{history}"
    );
    assert!(!history.contains(ALICE), "{history}");

    // Nothing of anyone else's.
    rea_as(&env, ALICE, &["trigger", "sys"], None)
        .code(5)
        .stderr_has("no job named \"sys\"");
    rea_as(&env, BOB, &["trigger", "mine"], None).code(5);
    let bobs = rea_as(&env, BOB, &["status", "--json"], None).ok().json();
    assert!(job_names(&bobs).is_empty(), "{bobs}");
    rea_as(&env, BOB, &["edit", "--user", ALICE], Some(&script))
        .code(1)
        .stderr_has("only root may edit rea-alice's jobs");
    rea_as(&env, ALICE, &["submit", "--in", "1h", "--", "id"], None)
        .code(1)
        .stderr_has("a one-shot is for root");
    rea_as(&env, ALICE, &["reload"], None).code(1);
    // Root sees everything; the system job is untouched, alice's paused.
    let all = env.rea(&["status", "--json"]).ok().json();
    assert_eq!(job_names(&all), ["sys", mine.as_str()]);
    assert_eq!(all["jobs"][1]["paused"], true);
    assert_eq!(all["jobs"][0]["paused"], false);
    assert_eq!(d.stop(), 0);
}

/// A user cannot take a job name another file uses: the loader would drop
/// the later of the two files (here bob's) while she was told her edit was
/// A record is its owner's, not whoever's file has its name now (#19,
/// finding 1): alice, taking the name of a job root removed and of a
/// one-shot root ran, reads none of their history or output.
#[test]
fn a_name_taken_after_root_used_it_shows_none_of_roots_runs() {
    if skip_unless_root("a_name_taken_after_root_used_it_shows_none_of_roots_runs") {
        return;
    }
    let env = shared_env(
        "[jobs.deploy]\nschedule = \"@yearly\"\ncommand = \"echo --password=hunter2\"\n",
    );
    throwaway_user(ALICE).expect("user");
    let d = env.daemon();
    env.rea(&["trigger", "deploy", "--wait"]).ok();
    env.rea(&[
        "submit", "--name", "rotate", "--in", "0s", "--", "echo", "key=live",
    ])
    .ok();
    env.wait_until("root's one-shot", || !env.finals("rotate").is_empty());
    // Root removes the job; alice takes both names.
    env.jobs("[jobs.other]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    env.rea(&["reload"]).ok();
    let hers = "[jobs.deploy]\nschedule = \"@yearly\"\ncommand = \"true\"\n[jobs.rotate]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice", &[hers])),
    )
    .ok();
    for name in ["deploy", "rotate"] {
        for args in [
            vec!["history", name],
            vec!["history", name, "--json"],
            vec!["logs", name],
        ] {
            let out = rea_as(&env, ALICE, &args, None);
            let seen = format!("{}{}", out.stdout, out.stderr);
            assert!(
                !seen.contains("hunter2") && !seen.contains("key=live"),
                "{args:?}: {seen}"
            );
        }
    }
    let all = rea_as(&env, ALICE, &["history", "--json"], None)
        .ok()
        .stdout
        .clone();
    assert!(
        !all.contains("hunter2") && !all.contains("key=live"),
        "{all}"
    );
    // Root still reads its own.
    env.rea(&["logs", "deploy"]).ok().stdout_has("hunter2");
    assert_eq!(d.stop(), 0);
}

/// Pauses are kept by owner (#19, finding 7): a name alice paused and then
/// dropped does not pause root's later job of that name, across a restart.
#[test]
fn a_pause_a_user_left_behind_pauses_no_job_of_roots() {
    if skip_unless_root("a_pause_a_user_left_behind_pauses_no_job_of_roots") {
        return;
    }
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    throwaway_user(ALICE).expect("user");
    let d = env.daemon();
    let hers = "[jobs.nightly]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    let none = "# nothing\n";
    let script = editor(&env, "alice", &[hers, none]);
    rea_as(&env, ALICE, &["edit"], Some(&script)).ok();
    rea_as(&env, ALICE, &["pause", "nightly"], None)
        .ok()
        .stdout_has("paused: nightly");
    rea_as(&env, ALICE, &["edit"], Some(&script)).ok();
    assert_eq!(d.stop(), 0);
    env.jobs("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n[jobs.nightly]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let all = env.rea(&["status", "--json"]).ok().json();
    let nightly = all["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["name"] == "nightly")
        .cloned()
        .expect("root's nightly");
    assert_eq!(nightly["paused"], false, "{all}");
    assert_eq!(d.stop(), 0);
}

/// Job names are per tenant (#19, finding 9): two users and the system
/// may each have a job "shared", a drop-in taking a name drops no user's
/// job, and root sees and addresses users' jobs qualified (`rea-alice/x`)
/// while each user sees her own bare.
#[test]
fn names_are_per_tenant_so_no_file_can_take_a_users_name() {
    if skip_unless_root("names_are_per_tenant_so_no_file_can_take_a_users_name") {
        return;
    }
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    let d = env.daemon();
    // Each run is told its name as its file writes it, and whose it is.
    let shared = "[jobs.shared]\nschedule = \"@yearly\"\ncommand = \"echo $REA_JOB $REA_TENANT\"\n";
    rea_as(&env, BOB, &["edit"], Some(&editor(&env, "bob", &[shared]))).ok();
    let hers = format!("{shared}[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let out = rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice", &[&hers])),
    );
    out.ok().stderr_has("installed");
    assert!(!out.stderr.contains("already used"), "{}", out.stderr);
    // A package's drop-in takes the name too: the system's own namespace.
    let drop_in = env.write("jobs.d/pkg.toml", shared);
    fs::set_permissions(&drop_in, fs::Permissions::from_mode(0o600)).expect("chmod");
    let all = || {
        let mut names = job_names(&env.rea(&["status", "--json"]).ok().json());
        names.sort();
        names
    };
    env.wait_until("the drop-in's job", || all().len() == 5);
    assert_eq!(
        all(),
        [
            "rea-alice/shared",
            "rea-alice/sys",
            "rea-bob/shared",
            "shared",
            "sys"
        ]
    );
    let mut mine = job_names(&rea_as(&env, ALICE, &["status", "--json"], None).ok().json());
    mine.sort();
    assert_eq!(mine, ["shared", "sys"]);
    // Each "shared" is its owner's: alice's trigger runs hers.
    rea_as(&env, ALICE, &["trigger", "shared", "--wait"], None).ok();
    assert_eq!(env.finals("rea-alice/shared").len(), 1);
    assert_eq!(
        env.finals("rea-alice/shared")[0]["output"],
        "shared rea-alice\n"
    );
    assert!(env.finals("shared").is_empty() && env.finals("rea-bob/shared").is_empty());
    assert_eq!(d.stop(), 0);
}

/// `rea edit` reads the job file as the daemon does: a FIFO put at its
/// path is refused at once (it hung the editor's read before), and nothing
/// is installed.
#[test]
fn rea_edit_refuses_a_fifo_at_the_job_file() {
    if skip_unless_root("rea_edit_refuses_a_fifo_at_the_job_file") {
        return;
    }
    let env = Env::new();
    let status = Command::new("mkfifo")
        .arg(env.jobs_path())
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let script = editor(
        &env,
        "root",
        &["[jobs.a]\nschedule = \"@yearly\"\ncommand = \"true\"\n"],
    );
    env.rea_within(&["edit"], &[("EDITOR", &script)], PATIENCE)
        .expect("rea edit answers without hanging on the FIFO")
        .code(1)
        .stderr_has("is not a regular file (it is a FIFO)");
    assert!(fs::symlink_metadata(env.jobs_path())
        .expect("still there")
        .file_type()
        .is_fifo());
}

#[test]
fn root_edits_the_main_job_file_and_the_daemon_reloads() {
    if skip_unless_root("root_edits_the_main_job_file_and_the_daemon_reloads") {
        return;
    }
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let bad = "[jobs.a]\nschedule = \"@yearly\"\ncomand = \"true\"\n";
    let good = "[jobs.a]\nschedule = \"@yearly\"\ncommand = \"true\"\n[jobs.b]\nschedule = \"@daily\"\ncommand = \"true\"\n";
    let script = editor(&env, "root", &[bad, good]);
    let mut cmd = Command::new(rea_bin());
    let out = cmd
        .args(["edit"])
        .current_dir(env.dir.path())
        .env("REA_FILE", env.jobs_path())
        .env("REA_STATE_DIR", env.state())
        .env("EDITOR", &script)
        .output()
        .expect("rea edit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("unknown field \"comand\""), "{stderr}");
    assert!(stderr.contains("the daemon reloaded: 2 jobs"), "{stderr}");
    let meta = fs::metadata(env.jobs_path()).expect("stat");
    assert_eq!(meta.mode() & 0o777, 0o600, "the original's mode is kept");
    let status = env.rea(&["status", "--json"]).ok().json();
    assert_eq!(job_names(&status), ["a", "b"]);

    // Saved unchanged twice with an error: nothing is installed.
    let script = editor(&env, "root2", &[bad, bad]);
    let out = Command::new(rea_bin())
        .args(["edit"])
        .current_dir(env.dir.path())
        .env("REA_FILE", env.jobs_path())
        .env("REA_STATE_DIR", env.state())
        .env("EDITOR", &script)
        .output()
        .expect("rea edit");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(fs::read_to_string(env.jobs_path()).unwrap(), good);
    assert_eq!(d.stop(), 0);
}

/// Drop-ins: each file on its own; a bad one is left out alone (with its
/// path in every diagnostic) while the others run.
#[test]
fn drop_in_files_are_read_and_refused_one_by_one() {
    let env = Env::new();
    env.jobs("[jobs.main]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    env.write(
        "jobs.d/pkg.toml",
        "[jobs.pkg]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    env.write("jobs.d/broken.toml", "[jobs.x]\nschedule = \"@yearly\"\n");
    env.write("jobs.d/notes.txt", "not a job file");
    for f in ["jobs.d/pkg.toml", "jobs.d/broken.toml"] {
        fs::set_permissions(env.path(f), fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let out = env.rea(&["check"]);
    out.code(2)
        .stderr_has("jobs.d/broken.toml:1:1: job \"x\" has no \"command\"")
        .stderr_has("jobs.d/broken.toml: 1 error");
    let d = env.daemon();
    let status = env.rea(&["status", "--json"]).ok().json();
    assert_eq!(job_names(&status), ["main", "pkg"]);
    assert!(status["daemon"]["config_error"]["errors"][0]
        .as_str()
        .unwrap_or("")
        .contains("broken.toml"));
    // Fixed and reloaded: it joins.
    env.write(
        "jobs.d/broken.toml",
        "[jobs.x]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    env.rea(&["reload"]).ok();
    let status = env.rea(&["status", "--json"]).ok().json();
    assert_eq!(job_names(&status), ["main", "x", "pkg"]);
    assert!(status["daemon"]["config_error"].is_null());
    env.rea(&["check"]).ok().stdout_has("3 jobs OK in 3 files");
    assert_eq!(d.stop(), 0);
}

/// A refused drop-in that is deleted takes its error with it (the banner
/// and `rea status --check` clear), and one left as it is is not applied
/// again at every reload.
#[test]
fn deleting_a_refused_drop_in_clears_its_error() {
    let env = Env::new();
    env.jobs("[jobs.main]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let broken = env.write("jobs.d/broken.toml", "[jobs.x]\nschedule = \"@yearly\"\n");
    fs::set_permissions(&broken, fs::Permissions::from_mode(0o600)).expect("chmod");
    let d = env.daemon();
    let error = || env.rea(&["status", "--json"]).ok().json()["daemon"]["config_error"].clone();
    assert!(!error().is_null(), "the broken drop-in is reported");
    let loaded = || {
        env.history()
            .iter()
            .filter(|r| r["event"] == "config_loaded")
            .count()
    };
    let before = loaded();
    env.rea(&["reload"]);
    // Refused again for the same reason: nothing applied, still an error.
    env.rea(&["reload"]).code(2).stderr_has("broken.toml");
    assert_eq!(
        loaded(),
        before,
        "an unchanged refusal applies nothing again"
    );
    fs::remove_file(&broken).expect("rm");
    env.rea(&["reload"]).ok();
    assert!(error().is_null(), "{}", error());
    env.rea(&["status", "--check"]).ok();
    assert_eq!(d.stop(), 0);
}

/// A drop-in written while the daemon runs is picked up without a reload,
/// as an edit of the main file is, even when `jobs.d` did not exist when
/// the daemon started; its removal takes its jobs away.
#[test]
fn drop_in_files_are_watched() {
    let env = Env::new();
    env.jobs("[jobs.main]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let names = || job_names(&env.rea(&["status", "--json"]).ok().json());
    // Written aside and renamed in, as packages and tools do.
    let tmp = env.write(
        "jobs.d/.late.toml.tmp",
        "[jobs.late]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::rename(&tmp, env.path("jobs.d/late.toml")).expect("rename");
    env.wait_until("the drop-in's job", || names() == ["main", "late"]);
    fs::remove_file(env.path("jobs.d/late.toml")).expect("rm");
    env.wait_until("the drop-in's job to go", || names() == ["main"]);
    assert_eq!(d.stop(), 0);
}

/// `crontab -l | rea import --user --install -` as a user: their crontab
/// becomes their own job file, through the daemon.
#[test]
fn a_user_imports_their_crontab_into_their_own_file() {
    if skip_unless_root("a_user_imports_their_crontab_into_their_own_file") {
        return;
    }
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    rea_as_with_input(
        &env,
        BOB,
        &["import", "--user", "--install", "--timezone", "UTC", "-"],
        None,
        b"# nightly report\n30 2 * * * /usr/bin/report --all\n",
    )
    .ok()
    .stderr_has("users/rea-bob.toml (1 jobs)");
    let status = env.rea(&["status", "--json"]).ok().json();
    let report = status["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == format!("{BOB}/report"))
        .cloned()
        .expect("bob's job is in force");
    assert_eq!(report["paused"], false);
    let listed = env.rea(&["list", "--json"]).ok().json();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|j| j["name"] == format!("{BOB}/report")));
    assert_eq!(d.stop(), 0);
}

/// `rea kill` follows the socket's rule: a user kills only the runs of her
/// own jobs (another's job, by name or by run id, is unknown to her, as it
/// is to `rea trigger`); root kills any.
#[test]
fn a_user_kills_only_the_runs_of_her_own_jobs() {
    if skip_unless_root("a_user_kills_only_the_runs_of_her_own_jobs") {
        return;
    }
    let env = hung_jobs_env();
    let _d = env.daemon();
    let run_of = |job: &str| {
        let out = env.rea(&["trigger", job]).ok().stdout.clone();
        out.split_whitespace().nth(2).expect("run id").to_string()
    };
    // Root names a user's jobs qualified with their owner.
    let (hers, his, sys) = (
        run_of(&format!("{ALICE}/hers")),
        run_of(&format!("{BOB}/his")),
        run_of("sys"),
    );
    env.wait_until("three runs", || env.events("run").len() >= 3);

    for target in ["hers", hers.as_str(), "sys", sys.as_str()] {
        rea_as(&env, BOB, &["kill", target], None)
            .code(5)
            .stderr_has("no job and no run in progress named");
    }
    rea_as(&env, ALICE, &["kill", "hers"], None)
        .ok()
        .stdout_is(&format!("killing run {hers} of hers\n"));
    let (hers_q, his_q) = (format!("{ALICE}/hers"), format!("{BOB}/his"));
    env.wait_until("hers killed", || !env.runs(&hers_q, "killed").is_empty());
    assert_eq!(
        env.runs(&hers_q, "killed")[0]["reason"],
        "killed by operator"
    );
    assert!(env.finals(&his_q).is_empty() && env.finals("sys").is_empty());
    rea_as(&env, ALICE, &["kill", "hers"], None)
        .code(1)
        .stderr_is("rea: job \"hers\" has no run in progress; nothing was killed\n");
    // Bob's qualified name typed by alice is no job of hers.
    rea_as(&env, ALICE, &["kill", &his_q], None)
        .code(5)
        .stderr_has("no job and no run in progress named");
    env.rea(&["kill", &his]).ok();
    env.rea(&["kill", "sys"]).ok();
    env.wait_until("his and sys killed", || {
        env.runs(&his_q, "killed").len() == 1 && env.runs("sys", "killed").len() == 1
    });
}

/// What each caller sees (#19, finding 10): every command a user runs
/// shows her tenant only, with nothing of other files' refusals; root's
/// probe counts the system's jobs and says how the users' fare; a user
/// with nothing to check gets UNKNOWN (exit 3), not OK; a member of
/// `[daemon] monitor_group` reads every tenant's status.
#[test]
fn each_caller_sees_and_probes_their_own_tenant() {
    if skip_unless_root("each_caller_sees_and_probes_their_own_tenant") {
        return;
    }
    const CAROL: &str = "rea-carol";
    let env = Env::new();
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    throwaway_user(CAROL).expect("user");
    let ok = |c: &mut Command| assert!(c.status().expect("run").success());
    ok(Command::new("groupadd").args(["-f", "rea-watch"]));
    ok(Command::new("usermod").args(["-aG", "rea-watch", CAROL]));
    env.jobs(
        "[daemon]\nmonitor_group = \"rea-watch\"\n[jobs.payroll]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    let f = env.write(
        &format!("users/{ALICE}.toml"),
        "[jobs.flaky]\nschedule = \"@yearly\"\ncommand = \"exit 3\"\n[jobs.fine]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
    // A drop-in root's file set refuses, quoting a value alice must not read.
    let bad = env.write(
        "jobs.d/secret.toml",
        "[jobs.s]\nschedule = \"@yearly\"\ncommand = \"true\"\nuser = \"token-4f2a\"\n",
    );
    fs::set_permissions(&bad, fs::Permissions::from_mode(0o600)).expect("chmod");
    let d = env.daemon();
    env.rea(&["trigger", &format!("{ALICE}/flaky"), "--wait"])
        .code(3);

    // Root: the system's jobs count; alice's failure is said, not counted.
    let root = env.rea(&["status", "--check"]);
    root.code(1)
        .stdout_has(
            "rea WARNING: the system's 1 job, none failing; the job file is invalid (1 error)",
        )
        .stdout_has("not counted: 1 of the other tenants' jobs failing (rea-alice/flaky)");
    env.rea(&["status", "--check", "--tenant", "all"])
        .code(2)
        .stdout_has("every tenant's 1 of 3 jobs failing: rea-alice/flaky");
    env.rea(&["status", "--check", "--tenant", ALICE])
        .code(2)
        .stdout_has("rea-alice's 1 of 2 jobs failing: rea-alice/flaky (failed, exit 3)");

    // Alice: her jobs, named as she names them; no refusal of root's.
    rea_as(&env, ALICE, &["status", "--check"], None)
        .code(2)
        .stdout_is("rea CRITICAL: rea-alice's 1 of 2 jobs failing: flaky (failed, exit 3)\n");
    let hers = rea_as(&env, ALICE, &["status", "--json"], None).ok().json();
    assert!(hers["daemon"]["config_error"].is_null(), "{hers}");
    assert!(!hers.to_string().contains("token-4f2a"), "{hers}");
    let text = rea_as(&env, ALICE, &["status"], None).ok().stdout.clone();
    assert!(
        !text.contains("token-4f2a") && !text.contains("payroll"),
        "{text}"
    );
    rea_as(&env, ALICE, &["next", "flaky", "-n", "1"], None)
        .ok()
        .stdout_has("-01-01");
    for args in [&["list"][..], &["history"]] {
        let out = rea_as(&env, ALICE, args, None).ok().stdout.clone();
        assert!(out.contains("flaky"), "{args:?}: {out}");
        assert!(
            !out.contains("payroll") && !out.contains(ALICE),
            "{args:?}: {out}"
        );
    }
    rea_as(
        &env,
        ALICE,
        &["status", "--check", "--tenant", "system"],
        None,
    )
    .code(3)
    .stdout_has("rea UNKNOWN: system's jobs are not rea-alice's to see");

    // Bob has no jobs: nothing he can check is not "OK".
    rea_as(&env, BOB, &["status", "--check"], None)
        .code(3)
        .stdout_has("rea UNKNOWN: rea-bob has no jobs here");

    // Carol monitors: every tenant's status, counted as root's is, and no
    // action.
    rea_as(&env, CAROL, &["status", "--check", "--tenant", "all"], None)
        .code(2)
        .stdout_has("rea-alice/flaky");
    let all = rea_as(&env, CAROL, &["status", "--json"], None).ok().json();
    assert_eq!(all["jobs"].as_array().map(Vec::len), Some(3), "{all}");
    rea_as(&env, CAROL, &["trigger", "payroll"], None).code(5);

    // Root reads one tenant's history; a user reads no one else's.
    let alices = env
        .rea(&["history", "--tenant", ALICE, "--json"])
        .ok()
        .stdout
        .clone();
    assert!(
        alices.contains("rea-alice/flaky") && !alices.contains("\"payroll\""),
        "{alices}"
    );
    rea_as(&env, BOB, &["history", "--tenant", ALICE], None)
        .code(1)
        .stderr_has("only root may read another tenant's history");
    assert_eq!(d.stop(), 0);
}
