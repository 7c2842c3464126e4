//! Several users' files, seen from the accounts they belong to: a user's
//! edit reloads her file alone (root's file caught half written is not
//! read), her mail goes out as her and within her bounds, an expired,
//! locked or denied account's jobs do not run, and an empty import does
//! not wipe her jobs. Two or more unprivileged users each; needs root
//! (to switch users), skips loudly without.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use crate::support::{skip_unless_root, throwaway_user, Env};
use crate::users::{editor, job_names, rea_as, rea_as_with_input, shared_env, user_file};

/// Bytes the process `pid` has read (every thread), from /proc.
fn bytes_read(pid: i32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("rchar")
}

/// Finding 4 of #19: a user's `rea edit` reloaded every file, bypassing
/// the watcher's half-written guard, and root's main file caught
/// mid-rewrite was applied empty. Now her edit reads her file alone: with
/// root's file half written (and still open), her edit applies, root's
/// jobs stay, and the daemon reads far less than root's file.
#[test]
fn a_users_edit_reloads_her_file_alone() {
    if skip_unless_root("a_users_edit_reloads_her_file_alone") {
        return;
    }
    const ALICE: &str = "rea-acct-alice";
    const BOB: &str = "rea-acct-bob";
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    // Root's file: 10 jobs and 2 MB of comments, so reading it shows.
    let mut main = String::new();
    for i in 0..10 {
        main.push_str(&format!(
            "[jobs.sys{i}]\nschedule = \"@yearly\"\ncommand = \"true\"\n"
        ));
    }
    let padding = format!("# {}\n", "x".repeat(98)).repeat(20_000);
    main.push_str(&padding);
    let env = shared_env(&main);
    let d = env.daemon();
    let bobs = "[jobs.his]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    rea_as(&env, BOB, &["edit"], Some(&editor(&env, "bob", &[bobs]))).ok();

    // Root's file is being rewritten: truncated, its first job written,
    // not closed yet (`render > jobs.toml` in progress).
    let mut half = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(env.jobs_path())
        .expect("open root's file");
    half.write_all(b"[jobs.sys0]\nschedule = \"@yearly\"\ncommand = \"true\"\n")
        .expect("write");
    half.flush().expect("flush");

    let hers = "[jobs.hers]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice", &[hers])),
    )
    .ok()
    .stderr_has("installed");
    let status = env.rea(&["status", "--json"]).ok().json();
    let mut names = job_names(&status);
    names.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("sys{i}")).collect();
    want.extend([format!("{ALICE}/hers"), format!("{BOB}/his")]);
    want.sort();
    assert_eq!(names, want, "root's jobs are all still in force");
    assert!(
        status["daemon"]["config_error"].is_null(),
        "{}",
        status["daemon"]["config_error"]
    );
    assert!(
        env.events("config_rejected").is_empty(),
        "nothing about root's file was looked at"
    );

    // Root's rewrite completes (with a new job): the watcher applies it.
    let first = "[jobs.sys0]\nschedule = \"@yearly\"\ncommand = \"true\"\n".len();
    half.write_all(&main.as_bytes()[first..]).expect("write");
    half.write_all(b"[jobs.sys10]\nschedule = \"@yearly\"\ncommand = \"true\"\n")
        .expect("write");
    drop(half);
    env.wait_until("root's file is applied", || {
        let status = env.rea(&["status", "--json"]).ok().json();
        job_names(&status).len() == 13 && status["daemon"]["config_error"].is_null()
    });

    // Her next edit reads her file, not root's 2 MB (neither the loop nor
    // the watcher).
    let before = bytes_read(d.pid());
    let again = "[jobs.hers]\nschedule = \"@daily\"\ncommand = \"true\"\n";
    rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice2", &[again])),
    )
    .ok()
    .stderr_has("installed");
    // The watcher's look at her file, too.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let read = bytes_read(d.pid()) - before;
    assert!(
        read < padding.len() as u64 / 2,
        "her edit made the daemon read {read} bytes: root's file ({} bytes) was read again",
        main.len()
    );
    let status = env.rea(&["status", "--json"]).ok().json();
    assert_eq!(job_names(&status).len(), 13);
    assert_eq!(d.stop(), 0);
}

/// The watcher reloads a drop-in that changed alone, through the guards
/// the main file has, weighed on that file's jobs: emptied (half written,
/// say), it is not applied until `rea reload`.
#[test]
fn an_emptied_drop_in_is_held_like_an_emptied_main_file() {
    let env = Env::new();
    env.jobs("[jobs.main]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let pkg: String = (0..4)
        .map(|i| format!("[jobs.p{i}]\nschedule = \"@yearly\"\ncommand = \"true\"\n"))
        .collect();
    let f = env.write("jobs.d/pkg.toml", &pkg);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
    let d = env.daemon();
    let status = || env.rea(&["status", "--json"]).ok().json();
    assert_eq!(job_names(&status()).len(), 5);
    fs::write(&f, "").expect("empty it in place");
    env.wait_until("the emptied drop-in refused", || {
        status()["daemon"]["config_error"]["errors"][0]
            .as_str()
            .is_some_and(|e| e.contains("pkg.toml: the job file is now empty of jobs (it had 4)"))
    });
    // Past the settle time: still held.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(job_names(&status()).len(), 5, "its jobs are still in force");
    env.rea(&["reload"]).ok();
    assert_eq!(job_names(&status()), ["main"]);
    assert_eq!(d.stop(), 0);
}

/// A part reloaded alone reads again the parts refused at the last load:
/// a drop-in left out for a name another drop-in had joins when that one
/// goes, without a reload of the whole set.
#[test]
fn a_drop_in_left_out_for_a_name_joins_when_the_other_goes() {
    let env = Env::new();
    env.jobs("[jobs.main]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let job = "[jobs.x]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    for name in ["a", "b"] {
        let f = env.write(&format!("jobs.d/{name}.toml"), job);
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let d = env.daemon();
    let status = || env.rea(&["status", "--json"]).ok().json();
    assert!(status()["daemon"]["config_error"]["errors"][0]
        .as_str()
        .is_some_and(|e| e.contains("b.toml")));
    fs::remove_file(env.path("jobs.d/a.toml")).expect("rm");
    env.wait_until("b's job in force, the error gone", || {
        let s = status();
        job_names(&s) == ["main", "x"] && s["daemon"]["config_error"].is_null()
    });
    assert_eq!(d.stop(), 0);
}

/// The last sentence of finding 9 of #19: `crontab -l | rea import --user
/// --install -` of someone with no crontab installed an empty file over
/// her jobs, exit 0. Now empty input is refused, unless `--allow-empty`.
#[test]
fn an_empty_import_does_not_wipe_her_jobs() {
    if skip_unless_root("an_empty_import_does_not_wipe_her_jobs") {
        return;
    }
    const ALICE: &str = "rea-acct-alice";
    const BOB: &str = "rea-acct-bob";
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let import = ["import", "--user", "--install", "--timezone", "UTC", "-"];
    for (user, crontab) in [
        (ALICE, &b"30 2 * * * /usr/bin/report\n"[..]),
        (BOB, b"0 4 * * * /usr/bin/backup\n"),
    ] {
        rea_as_with_input(&env, user, &import, None, crontab).ok();
    }
    let names = || {
        let mut n = job_names(&env.rea(&["status", "--json"]).ok().json());
        n.sort();
        n
    };
    assert_eq!(names().len(), 3, "{:?}", names());
    // `crontab -l` with no crontab prints nothing (or only comments).
    for input in [&b""[..], b"# no crontab for rea-acct-alice\n"] {
        rea_as_with_input(&env, ALICE, &import, None, input)
            .code(2)
            .stderr_has("nothing to install: the input has no jobs")
            .stderr_has("--allow-empty");
    }
    assert_eq!(names().len(), 3, "her jobs are still there: {:?}", names());
    let mut with = import.to_vec();
    with.insert(3, "--allow-empty");
    rea_as_with_input(&env, ALICE, &with, None, b"").ok();
    env.wait_until("her job to go", || names().len() == 2);
    assert_eq!(d.stop(), 0);
}

/// Runs `cmd` with `args` (useradd's family), which must succeed.
fn admin(cmd: &str, args: &[&str]) {
    let status = std::process::Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(status.success(), "{cmd} {args:?}: {status}");
}

/// The history records of the runs of `job`, named as its owner names it
/// (bare) or as root does (qualified), with `status`.
fn runs_of(env: &Env, job: &str, status: &str) -> Vec<serde_json::Value> {
    let qualified = format!("/{job}");
    env.history()
        .into_iter()
        .filter(|v| {
            let name = v["job"].as_str().unwrap_or("");
            v["event"] == "run"
                && (name == job || name.ends_with(&qualified))
                && v["status"] == status
        })
        .collect()
}

/// A users/NAME.toml written by root (as `rea edit` installs it) with one
/// job named `job`.
fn id_job_file(env: &Env, user: &str, job: &str) {
    user_file(
        env,
        user,
        &format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"id -un\"\n"),
    );
}

/// Finding 8 of #19: the jobs of an expired or locked account kept
/// running (cron's PAM account check refuses them). Now each run of a
/// user's job checks her account first, and a refusal is in the history
/// with why; the check follows the shadow file as it changes.
#[test]
fn expired_and_locked_accounts_do_not_run_their_jobs() {
    if skip_unless_root("expired_and_locked_accounts_do_not_run_their_jobs") {
        return;
    }
    // Dedicated users: their accounts are expired and locked here.
    const EXPIRED: &str = "rea-acct-expired";
    const LOCKED: &str = "rea-acct-locked";
    const FINE: &str = "rea-acct-fine";
    for u in [EXPIRED, LOCKED, FINE] {
        throwaway_user(u).expect("user");
        admin("chage", &["-E", "-1", u]);
    }
    admin("usermod", &["-p", "$6$rea$notarealhash", LOCKED]);
    admin("usermod", &["-L", LOCKED]);
    admin("chage", &["-E", "0", EXPIRED]);
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    for (user, job) in [(LOCKED, "lck"), (FINE, "fin")] {
        id_job_file(&env, user, job);
    }
    // A hook of a refused run would run as the refused account too.
    let hooks = env.path("hooks");
    fs::create_dir(&hooks).expect("mkdir");
    fs::set_permissions(&hooks, fs::Permissions::from_mode(0o777)).expect("chmod");
    user_file(
        &env,
        EXPIRED,
        &format!(
            "[jobs.exp]\nschedule = \"@yearly\"\ncommand = \"id -un\"\non_failure = \"touch {}/ran\"\n",
            hooks.display()
        ),
    );
    let d = env.daemon();
    rea_as(&env, FINE, &["trigger", "fin", "--wait"], None).ok();
    assert_eq!(
        runs_of(&env, "fin", "succeeded")[0]["output"],
        "rea-acct-fine\n"
    );
    for (user, job, why) in [
        (
            EXPIRED,
            "exp",
            "refused: the account \"rea-acct-expired\" expired on 1970-01-01",
        ),
        (
            LOCKED,
            "lck",
            "refused: the account \"rea-acct-locked\" is locked",
        ),
    ] {
        rea_as(&env, user, &["trigger", job], None).ok();
        env.wait_until("the refusal", || !runs_of(&env, job, "failed").is_empty());
        let failed = runs_of(&env, job, "failed");
        assert!(
            failed[0]["reason"].as_str().unwrap_or("").starts_with(why),
            "{}",
            failed[0]
        );
        assert!(runs_of(&env, job, "started").is_empty(), "it never started");
        // She sees why in her history, root in his.
        rea_as(&env, user, &["history", job], None)
            .ok()
            .stdout_has(why);
        env.rea(&["history"]).ok().stdout_has(why);
    }
    env.wait_until("the refused run's hooks given up", || {
        fs::read_to_string(&d.log)
            .unwrap_or_default()
            .contains("cannot run hooks: refused: the account \"rea-acct-expired\"")
    });
    assert!(
        !hooks.join("ran").exists(),
        "no hook ran as the expired account"
    );
    // The shadow file changes (a new version is read): the fine account
    // expires, its next run is refused; renewed, it runs again.
    admin("chage", &["-E", "0", FINE]);
    rea_as(&env, FINE, &["trigger", "fin"], None).ok();
    env.wait_until("her refusal", || !runs_of(&env, "fin", "failed").is_empty());
    admin("chage", &["-E", "-1", FINE]);
    rea_as(&env, FINE, &["trigger", "fin", "--wait"], None).ok();
    assert_eq!(runs_of(&env, "fin", "succeeded").len(), 2);
    assert_eq!(d.stop(), 0);
}

/// Finding 8 of #19, its second half: there was no cron.allow/cron.deny.
/// `users.allow` and `users.deny` beside the job file say who may have
/// jobs of her own: checked at `rea edit` (with a clear error) and when the
/// users' files are loaded (a denied user's jobs go).
#[test]
fn users_allow_and_deny_say_who_may_have_jobs() {
    if skip_unless_root("users_allow_and_deny_say_who_may_have_jobs") {
        return;
    }
    const ALICE: &str = "rea-acct-alice";
    const BOB: &str = "rea-acct-bob";
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    id_job_file(&env, BOB, "his");
    let d = env.daemon();
    let names = || {
        let mut n = job_names(&env.rea(&["status", "--json"]).ok().json());
        n.sort();
        n
    };
    assert_eq!(names(), ["rea-acct-bob/his", "sys"]);
    // Denied: bob's edit is refused, and at the next reload his jobs go.
    env.write("users.deny", "# no jobs for these\nrea-acct-bob\n");
    let theirs = "[jobs.mine]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    rea_as(&env, BOB, &["edit"], Some(&editor(&env, "bob", &[theirs])))
        .code(1)
        .stderr_has("rea-acct-bob may not have jobs of their own here")
        .stderr_has("users.deny lists rea-acct-bob")
        .stderr_has("hint: root decides who may have jobs of their own");
    rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice", &[theirs])),
    )
    .ok();
    env.rea(&["reload"])
        .code(2)
        .stderr_has("users.deny lists rea-acct-bob");
    assert_eq!(names(), ["rea-acct-alice/mine", "sys"]);
    // A list others may write is no list: whoever could edit it could
    // give herself jobs. Nobody may then.
    fs::set_permissions(env.path("users.deny"), fs::Permissions::from_mode(0o666)).expect("chmod");
    rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice1", &[theirs])),
    )
    .code(1)
    .stderr_has("users.deny cannot be read (it must be root's and writable by nobody else)");
    // An allow list wins: only those it lists.
    env.write("users.allow", "rea-acct-bob\n");
    fs::remove_file(env.path("users.deny")).expect("rm");
    rea_as(
        &env,
        ALICE,
        &["edit"],
        Some(&editor(&env, "alice2", &[theirs])),
    )
    .code(1)
    .stderr_has("users.allow does not list rea-acct-alice");
    rea_as_with_input(
        &env,
        ALICE,
        &["import", "--user", "--install", "--timezone", "UTC", "-"],
        None,
        b"0 1 * * * /usr/bin/true\n",
    )
    .code(1)
    .stderr_has("users.allow does not list rea-acct-alice");
    env.rea(&["reload"]).code(2);
    assert_eq!(names(), ["rea-acct-bob/his", "sys"]);
    assert_eq!(d.stop(), 0);
}

/// Finding 3 of #19: `mailto` in a user's file ran sendmail unbounded
/// (20 per-second jobs made 121 sendmail processes in 6 s). Mail runs as
/// the job's user, at most two sendmails at once per tenant, with a
/// bounded queue behind them (1 MiB here) whose overflow is dropped,
/// logged and counted; another tenant's mail is not held by hers.
#[test]
fn mail_runs_as_her_and_is_bounded_per_tenant() {
    if skip_unless_root("mail_runs_as_her_and_is_bounded_per_tenant") {
        return;
    }
    const ALICE: &str = "rea-acct-alice";
    const BOB: &str = "rea-acct-bob";
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    let env = shared_env("");
    let mail = env.path("mail");
    fs::create_dir_all(mail.join("running")).expect("mkdir");
    fs::write(mail.join("log"), "").expect("log");
    for (p, mode) in [
        (&mail, 0o777),
        (&mail.join("running"), 0o777),
        (&mail.join("log"), 0o666),
    ] {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
    }
    // Records who it runs as and how many of that user's are running,
    // then delivers once the test says go (20 s at most).
    let sendmail = env.write(
        "sendmail",
        &format!(
            "#!/bin/sh\nd={}\nme=$(id -un)\ntouch \"$d/running/$me.$$\"\nn=$(ls \"$d/running\" | grep -c \"^$me\\.\")\ncat > /dev/null\necho \"$me $n\" >> \"$d/log\"\ni=0\nwhile [ ! -e \"$d/go\" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done\nrm -f \"$d/running/$me.$$\"\necho \"end $me\" >> \"$d/log\"\n",
            mail.display()
        ),
    );
    fs::set_permissions(&sendmail, fs::Permissions::from_mode(0o755)).expect("chmod");
    env.jobs(&format!(
        "[daemon]\nsendmail = \"{}\"\n\n[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
        sendmail.display()
    ));
    // Alice's 8 jobs each mail 300 kB of output.
    let mut hers = String::new();
    for i in 0..8 {
        hers.push_str(&format!(
            "[jobs.a{i}]\nschedule = \"@yearly\"\ncommand = \"head -c 300000 /dev/zero | tr '\\\\0' x\"\noutput_limit = \"1MiB\"\nmailto = \"alice@example.com\"\nmail_on = \"always\"\n"
        ));
    }
    let his = "[jobs.b0]\nschedule = \"@yearly\"\ncommand = \"true\"\nmailto = \"bob@example.com\"\nmail_on = \"always\"\n";
    for (user, text) in [(ALICE, hers.as_str()), (BOB, his)] {
        user_file(&env, user, text);
    }
    let d = env.daemon();
    let log = || fs::read_to_string(mail.join("log")).unwrap_or_default();
    let ended = |user: &str| log().matches(&format!("end {user}\n")).count();
    let dropped = || {
        fs::read_to_string(&d.log)
            .unwrap_or_default()
            .matches("mail queue is full")
            .count()
    };
    for i in 0..8 {
        rea_as(&env, ALICE, &["trigger", &format!("a{i}")], None).ok();
    }
    // Her 8 runs end; 2 mails are being sent, 3 of about 300 kB wait
    // (1 MiB), the other 3 are dropped.
    env.wait_until("her runs and her mail", || {
        (0..8).all(|i| !runs_of(&env, &format!("a{i}"), "succeeded").is_empty()) && dropped() == 3
    });
    // Bob's mail goes while hers is full.
    rea_as(&env, BOB, &["trigger", "b0"], None).ok();
    env.wait_until("bob's sendmail", || log().contains(&format!("{BOB} 1\n")));
    fs::write(mail.join("go"), "").expect("go");
    env.wait_until("every mail sent", || ended(ALICE) == 5 && ended(BOB) == 1);
    assert_eq!(dropped(), 3);
    let log = log();
    let mut most = 0;
    for line in log.lines().filter(|l| !l.starts_with("end ")) {
        let (user, n) = line.split_once(' ').expect("user count");
        assert!(
            user == ALICE || user == BOB,
            "sendmail ran as {user}:\n{log}"
        );
        most = most.max(n.parse::<usize>().expect("count"));
    }
    assert!(most <= 2, "{most} sendmails of one user at once:\n{log}");
    assert_eq!(d.stop(), 0);
}
