//! Per-tenant quotas on what the daemon's users share (issue #19, findings
//! 5 and 6): one user holding every connection, follower or metrics slot
//! she can get locks neither root nor another user out, and her history
//! query's cost does not stay in the daemon. Two throwaway users, a root
//! daemon reading their files; needs root (skips loudly without).

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::support::{skip_unless_root, throwaway_user, Env};
use crate::users::{rea_as, shared_env, user_file};

const ALICE: &str = "rea-alice";
const BOB: &str = "rea-bob";

/// A sandbox ([`shared_env`]) whose daemon reads alice's and bob's files
/// (`toml(job)` each, with their job named `hers` and `his`) beside root's
/// `sys`.
fn two_users(main: &str, toml: impl Fn(&str) -> String) -> Env {
    let env = shared_env(&format!("{main}{}", toml("sys")));
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    for (user, job) in [(ALICE, "hers"), (BOB, "his")] {
        user_file(&env, user, &toml(job));
    }
    env
}

/// A perl script run as `user`: it holds what it is told, and says how
/// much it got; it reads its orders on stdin and ends with it (or after a
/// minute, whatever happens to the test).
struct Holder {
    child: Child,
    orders: ChildStdin,
    said: BufReader<ChildStdout>,
}

impl Holder {
    fn start(user: &str, script: &str, args: &[&str]) -> Holder {
        let (uid, gid) = throwaway_user(user).expect("root creates the test users");
        let mut child = Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .args(["perl", "-e", script])
            .args(args)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv perl");
        let orders = child.stdin.take().expect("stdin");
        let said = BufReader::new(child.stdout.take().expect("stdout"));
        Holder {
            child,
            orders,
            said,
        }
    }

    /// Sends one order line and returns the script's answer line.
    fn ask(&mut self, order: &str) -> String {
        writeln!(self.orders, "{order}").expect("order the holder");
        let mut line = String::new();
        self.said.read_line(&mut line).expect("the holder's answer");
        line.trim().to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Opens up to N connections to the control socket, sends REQUEST on
/// each and keeps those whose first answer is `ok`; prints how many.
const HOLD_CONTROL: &str = r#"
use IO::Socket::UNIX; $| = 1; alarm 60; $SIG{PIPE} = "IGNORE";
my ($path, $n, $request) = @ARGV; my @held;
while (my $order = <STDIN>) {
    for (1 .. $n) {
        my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $path) or last;
        print $s "$request\n";
        my $answer = <$s>;
        push @held, $s if defined $answer && $answer =~ /"ok":true/;
    }
    print scalar(@held), "\n";
}
"#;

/// Finding 5: one user's 300 idle connections (the daemon serves 256)
/// left root and every other user "too many connections".
#[test]
fn one_users_idle_connections_lock_out_neither_root_nor_another_user() {
    if skip_unless_root("one_users_idle_connections_lock_out_neither_root_nor_another_user") {
        return;
    }
    let yearly = |job: &str| format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let env = two_users("", yearly);
    let d = env.daemon();
    let socket = env.socket().display().to_string();
    let mut alice = Holder::start(
        ALICE,
        HOLD_CONTROL,
        &[&socket, "300", r#"{"v":1,"op":"ping"}"#],
    );
    let held: usize = alice.ask("hold").parse().expect("a count");
    // Everyone else still gets in, and so does she once she lets go.
    rea_as(&env, BOB, &["status", "his"], None).ok();
    env.rea(&["status"]).ok();
    assert!(
        (1..=64).contains(&held),
        "alice holds {held} connections: more than her share (a quarter of 256)"
    );
    rea_as(&env, ALICE, &["status", "hers"], None)
        .code(1)
        .stderr_has("too many connections from your user");
    drop(alice);
    env.wait_until("alice's connections closed", || {
        rea_as(&env, ALICE, &["status", "hers"], None).code == 0
    });
    assert_eq!(d.stop(), 0);
}

/// Finding 5: one user's 64 followers of a job that never runs blocked
/// every `rea logs -f` and `trigger --follow`.
#[test]
fn one_users_idle_followers_block_no_one_elses() {
    if skip_unless_root("one_users_idle_followers_block_no_one_elses") {
        return;
    }
    let yearly =
        |job: &str| format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"echo {job}\"\n");
    let env = two_users("", yearly);
    let d = env.daemon();
    let socket = env.socket().display().to_string();
    let mut alice = Holder::start(
        ALICE,
        HOLD_CONTROL,
        &[&socket, "80", r#"{"v":1,"op":"follow","job":"hers"}"#],
    );
    let held: usize = alice.ask("hold").parse().expect("a count");
    rea_as(&env, BOB, &["trigger", "his", "--follow"], None)
        .ok()
        .stdout_is("his\n");
    env.rea(&["trigger", "sys", "--follow"])
        .ok()
        .stdout_is("sys\n");
    assert!(
        (1..=16).contains(&held),
        "alice follows {held} times: more than her share (a quarter of 64)"
    );
    rea_as(&env, ALICE, &["logs", "--follow", "hers"], None)
        .code(1)
        .stderr_has("too many followers of yours");
    drop(alice);
    assert_eq!(d.stop(), 0);
}

/// On each order, opens N more idle TCP connections (sending nothing) and
/// keeps the last 2N; prints how many it holds.
const HOLD_TCP: &str = r#"
use IO::Socket::INET; $| = 1; alarm 60; $SIG{PIPE} = "IGNORE";
my ($addr, $n) = @ARGV; my @held;
while (my $order = <STDIN>) {
    for (1 .. $n) {
        my $s = IO::Socket::INET->new(PeerAddr => $addr) or last;
        push @held, $s;
    }
    shift @held while @held > 2 * $n;
    print scalar(@held), "\n";
}
"#;

/// Finding 5: holding the metrics endpoint's 16 slots with connections
/// that never send a request (and opening new ones as they time out)
/// made 0 of 20 scrapes succeed. Alice holds, bob scrapes.
#[test]
fn idle_metrics_connections_keep_no_scrape_out() {
    if skip_unless_root("idle_metrics_connections_keep_no_scrape_out") {
        return;
    }
    let yearly = |job: &str| format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let env = two_users("[daemon]\nmetrics = \"127.0.0.1:0\"\n", yearly);
    let d = env.daemon();
    let addr = crate::metrics::endpoint(&d);
    let (uid, gid) = throwaway_user(BOB).expect("user");
    let mut alice = Holder::start(ALICE, HOLD_TCP, &[&addr, "16"]);
    let mut scraped = 0;
    for _ in 0..20 {
        let held: usize = alice.ask("more").parse().expect("a count");
        assert!(held >= 16, "alice holds {held} connections");
        let out = Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .args(["curl", "-sS", "--max-time", "10"])
            .arg(format!("http://{addr}/metrics"))
            .output()
            .expect("curl");
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("rea_runs_total") {
            scraped += 1;
        }
    }
    assert_eq!(scraped, 20, "scrapes that succeeded while alice held slots");
    drop(alice);
    assert_eq!(d.stop(), 0);
}

/// `n` history lines of `job`'s runs, each with `output` bytes of output,
/// oldest first, as the daemon writes them.
pub(crate) fn history_lines(job: &str, n: usize, output: usize) -> Vec<u8> {
    let text = "x".repeat(output);
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("an instant")
        .with_timezone(&chrono::Utc);
    let mut out = Vec::with_capacity(n * (output + 300));
    for i in 0..n {
        let ts = (start + chrono::Duration::seconds(i as i64))
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        writeln!(
            out,
            r#"{{"v":1,"ts":"{ts}","event":"run","job":"{job}","run":"r{i}","attempt":1,"trigger":"manual","status":"succeeded","started":"{ts}","ended":"{ts}","duration_ms":1,"exit_code":0,"output":"{text}","output_bytes":{output}}}"#
        )
        .expect("write to memory");
    }
    out
}

/// A process's resident and peak resident memory, in KiB.
fn rss_kib(pid: i32) -> (u64, u64) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Finding 6: a user's `rea history --json` over 153 MB of her own history
/// took the root daemon from 19 MB to 1.1 GB. The answer is streamed now:
/// over 64 MB of her history, the daemon's peak grows by at most 32 MB.
#[test]
fn a_users_big_history_query_does_not_stay_in_the_daemon() {
    if skip_unless_root("a_users_big_history_query_does_not_stay_in_the_daemon") {
        return;
    }
    let yearly = |job: &str| format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let env = two_users("", yearly);
    fs::create_dir_all(env.state()).expect("mkdir state");
    let records = 16_000;
    let mut history = history_lines(&format!("{ALICE}/hers"), records, 4000);
    history.extend(history_lines(&format!("{BOB}/his"), 10, 10));
    fs::write(env.state().join("history.jsonl"), history).expect("write the history");
    let d = env.daemon();
    rea_as(&env, BOB, &["status", "his"], None).ok();
    // The peak so far is forgotten (proc(5), clear_refs): what follows is
    // the query's.
    fs::write(format!("/proc/{}/clear_refs", d.pid()), "5").expect("reset VmHWM");
    let (before, _) = rss_kib(d.pid());
    let out = rea_as(
        &env,
        ALICE,
        &["history", "hers", "--json", "--limit", "1000000"],
        None,
    );
    out.ok();
    let (after, peak) = rss_kib(d.pid());
    assert_eq!(
        out.stdout.lines().count(),
        records,
        "her records, a line each"
    );
    let newest: serde_json::Value =
        serde_json::from_str(out.stdout.lines().next().unwrap_or("")).expect("JSON");
    assert_eq!(
        (&newest["job"], &newest["run"]),
        (&"hers".into(), &format!("r{}", records - 1).into())
    );
    let grew = peak.saturating_sub(before) / 1024;
    assert!(
        grew <= 32,
        "the daemon's peak grew by {grew} MiB during a 64 MB query (RSS {before} KiB before, {after} KiB after)"
    );
    assert!(
        after <= before + 16 * 1024,
        "the query's memory stayed in the daemon: RSS {before} KiB before, {after} KiB after"
    );
    assert_eq!(d.stop(), 0);
}

/// Finding 6: a user's jobs writing much output rotated every record of
/// root's out of the history in seconds. Each user's records are in a log
/// of her own now, rotated at the same size: hers rotate out only hers.
#[test]
fn a_users_output_rotates_out_no_one_elses_history() {
    if skip_unless_root("a_users_output_rotates_out_no_one_elses_history") {
        return;
    }
    let job = |job: &str| {
        let bytes = if job == "hers" { 20_000 } else { 10 };
        format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"yes {job} | head -c {bytes}\"\n")
    };
    let env = two_users(
        "[daemon]\nhistory_max_bytes = 65536\nhistory_files = 1\n",
        job,
    );
    let d = env.daemon();
    env.rea(&["trigger", "sys", "--wait"]).ok();
    rea_as(&env, BOB, &["trigger", "his", "--wait"], None).ok();
    // Her log holds two files of 64 KiB: 12 runs of 20 kB overflow it.
    for _ in 0..12 {
        rea_as(&env, ALICE, &["trigger", "hers", "--wait"], None).ok();
    }
    let finals = |run: crate::support::Run| {
        run.ok()
            .stdout
            .lines()
            .filter(|l| l.contains("\"succeeded\""))
            .count()
    };
    assert_eq!(
        finals(env.rea(&["history", "sys", "--json"])),
        1,
        "root's run is still in the history"
    );
    assert_eq!(
        finals(rea_as(&env, BOB, &["history", "his", "--json"], None)),
        1,
        "bob's run is still in the history"
    );
    let hers = finals(rea_as(&env, ALICE, &["history", "hers", "--json"], None));
    assert!(
        (3..12).contains(&hers),
        "alice's own records rotate out, some are kept: {hers}"
    );
    // Root's view of everything, merged in order: hers newest.
    let all = env
        .rea(&["history", "--json", "--limit", "100"])
        .ok()
        .stdout
        .clone();
    let jobs: Vec<String> = all
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["status"] == "succeeded")
        .filter_map(|r| r["job"].as_str().map(str::to_string))
        .collect();
    assert_eq!(jobs.first().map(String::as_str), Some("rea-alice/hers"));
    assert_eq!(&jobs[jobs.len() - 2..], ["rea-bob/his", "sys"]);
    assert!(env
        .state()
        .join("tenants/rea-alice/history.jsonl.1")
        .is_file());
    assert_eq!(d.stop(), 0);
}

/// A streamed answer waits for its client: a user who asks and stops
/// reading holds her own query slot, and only hers (one at a time), never
/// another user's.
#[test]
fn a_users_stalled_history_queries_hold_only_her_own_slot() {
    if skip_unless_root("a_users_stalled_history_queries_hold_only_her_own_slot") {
        return;
    }
    let yearly = |job: &str| format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let env = two_users("", yearly);
    fs::create_dir_all(env.state()).expect("mkdir state");
    // Far more than the socket buffers: her answers stall, unread.
    let mut history = history_lines(&format!("{ALICE}/hers"), 2_000, 4000);
    history.extend(history_lines(&format!("{BOB}/his"), 3, 10));
    fs::write(env.state().join("history.jsonl"), history).expect("write the history");
    let d = env.daemon();
    let socket = env.socket().display().to_string();
    let query = r#"{"v":1,"op":"history","query":{"job":"hers","statuses":[],"runs_only":false,"with_missed":false}}"#;
    let mut alice = Holder::start(ALICE, HOLD_CONTROL, &[&socket, "3", query]);
    let held: usize = alice.ask("hold").parse().expect("a count");
    for _ in 0..3 {
        let his = rea_as(&env, BOB, &["history", "his", "--json"], None);
        assert_eq!(his.ok().stdout.lines().count(), 3, "bob's records");
    }
    assert_eq!(held, 1, "alice's queries answered at once");
    rea_as(&env, ALICE, &["history", "hers"], None)
        .code(1)
        .stderr_has("one history query of yours is being answered already");
    drop(alice);
    env.wait_until("alice's stalled query given up", || {
        rea_as(&env, ALICE, &["history", "hers", "--limit", "1"], None).code == 0
    });
    assert_eq!(d.stop(), 0);
}
