//! The live views through the real daemon: per-job summaries, pages of
//! jobs (filters, sorts, cursors), the overview, a user's own view, and
//! the subscription's deltas (a run's end, a slow client, a client that
//! hangs up).

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{Conn, Env};

/// 30 jobs: `job-00`..`job-29`, every third tagged `db`, `boom` (fails at
/// start), `fine` (succeeds at start), `off` (disabled).
fn many_jobs() -> String {
    let mut toml = String::new();
    for i in 0..30 {
        let tags = if i % 3 == 0 { "tags = [\"db\"]\n" } else { "" };
        toml.push_str(&format!(
            "[jobs.job-{i:02}]\nschedule = \"{} {} * * *\"\ncommand = \"true\"\n{tags}\n",
            i % 60,
            i % 24
        ));
    }
    toml.push_str("[jobs.boom]\nschedule = \"@reboot\"\ncommand = \"sleep 0.2; exit 3\"\n\n");
    toml.push_str("[jobs.fine]\nschedule = \"@reboot\"\ncommand = \"sleep 0.1\"\n\n");
    toml.push_str("[jobs.off]\nschedule = \"@daily\"\ncommand = \"true\"\nenabled = false\n");
    toml
}

fn ask(env: &Env, request: &str) -> Value {
    let answer = Conn::open(&env.socket())
        .ask(request)
        .unwrap_or_else(|| panic!("no answer to {request}"));
    assert_eq!(answer["ok"], true, "{request}: {answer}");
    answer["data"].clone()
}

/// `name`: exactly one job, found by name (not by a substring: `job-1`
/// is in ten names), combined with the other filters; an unknown name is
/// an empty page, not an error.
#[test]
fn an_exact_name_finds_one_job() {
    let env = Env::new();
    env.jobs(&many_jobs());
    let _d = env.daemon();
    env.wait_until("boom's failure", || !env.finals("boom").is_empty());
    let page = ask(&env, r#"{"v":1,"op":"jobs","name":"job-03"}"#);
    assert_eq!(names(&page), ["job-03"]);
    assert_eq!(page["matching"], 1);
    assert!(page.get("next").is_none());
    assert_eq!(page["jobs"][0]["tags"][0], "db");
    // The substring search finds more than that one.
    let page = ask(&env, r#"{"v":1,"op":"jobs","text":"job-0"}"#);
    assert_eq!(page["matching"], 10);
    // With other filters: they must hold too.
    let page = ask(&env, r#"{"v":1,"op":"jobs","name":"job-03","tag":"db"}"#);
    assert_eq!(names(&page), ["job-03"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","name":"job-04","tag":"db"}"#);
    assert_eq!(page["matching"], 0, "{page}");
    let page = ask(&env, r#"{"v":1,"op":"jobs","name":"boom","failing":true}"#);
    assert_eq!(names(&page), ["boom"]);
    assert_eq!(page["jobs"][0]["consecutive_failures"], 1);
    for missing in ["job-3", "JOB-03", "nope"] {
        let page = ask(
            &env,
            &format!(r#"{{"v":1,"op":"jobs","name":"{missing}"}}"#),
        );
        assert_eq!(page["matching"], 0, "{missing}: {page}");
        assert_eq!(names(&page).len(), 0);
    }
}

fn names(page: &Value) -> Vec<String> {
    page["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn pages_filters_and_cursors_through_the_daemon() {
    let env = Env::new();
    env.jobs(&many_jobs());
    let _d = env.daemon();
    env.wait_until("the start-up runs", || {
        !env.finals("boom").is_empty() && !env.finals("fine").is_empty()
    });

    // The default page: file order, everything.
    let page = ask(&env, r#"{"v":1,"op":"jobs"}"#);
    assert_eq!(page["matching"], 33);
    assert_eq!(names(&page).len(), 33);
    assert_eq!(names(&page)[0], "job-00");
    assert!(page.get("next").is_none());

    // Pages of 10 by name, followed through their cursors, cover every
    // job once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let request = match &cursor {
            None => r#"{"v":1,"op":"jobs","sort":"name","limit":10}"#.to_string(),
            Some(c) => format!(
                r#"{{"v":1,"op":"jobs","sort":"name","limit":10,"cursor":{}}}"#,
                serde_json::to_string(c).unwrap()
            ),
        };
        let page = ask(&env, &request);
        assert_eq!(page["matching"], 33);
        pages += 1;
        seen.extend(names(&page));
        match page.get("next").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "each job once, by name");
    assert_eq!(seen.len(), 33);

    // Pages of 7 in file order: the unfiltered walk (which reads only the
    // page) and a filter that keeps everything (the full walk) give the
    // same pages and cursors.
    let mut by_file = Vec::new();
    for filter in ["", r#","text":"""#] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let at = cursor
                .as_ref()
                .map(|c| format!(r#","cursor":{}"#, serde_json::to_string(c).unwrap()))
                .unwrap_or_default();
            let page = ask(
                &env,
                &format!(r#"{{"v":1,"op":"jobs","limit":7{filter}{at}}}"#),
            );
            assert_eq!(page["matching"], 33, "{filter}");
            seen.push((names(&page), page.get("next").cloned()));
            match page.get("next").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        by_file.push(seen);
    }
    assert_eq!(by_file[0], by_file[1]);
    assert_eq!(by_file[0].len(), 5);
    assert_eq!(by_file[0][0].0[0], "job-00");
    assert_eq!(by_file[0][4].0, ["job-28", "job-29", "boom", "fine", "off"]);

    // Descending.
    let page = ask(
        &env,
        r#"{"v":1,"op":"jobs","sort":"name","descending":true,"limit":2}"#,
    );
    assert_eq!(names(&page), ["off", "job-29"]);

    // Filters: text (case-insensitive), tag, state, failing.
    let page = ask(&env, r#"{"v":1,"op":"jobs","text":"JOB-1"}"#);
    assert_eq!(page["matching"], 10);
    let page = ask(&env, r#"{"v":1,"op":"jobs","tag":"db","text":"job-2"}"#);
    assert_eq!(names(&page), ["job-21", "job-24", "job-27"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","state":"disabled"}"#);
    assert_eq!(names(&page), ["off"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","failing":true}"#);
    assert_eq!(names(&page), ["boom"]);

    // The summaries: outcomes, durations, last success and failure.
    let boom = &page["jobs"][0];
    assert_eq!(boom["outcomes"], "f");
    assert_eq!(boom["consecutive_failures"], 1);
    // `sleep 0.2`, as the daemon measures a run (from its spawn).
    assert!(boom["last_duration_ms"].as_u64().unwrap() >= 150, "{boom}");
    assert!(boom["p95_ms"].as_u64().is_some());
    assert!(boom["last_failure"].is_string());
    assert!(boom.get("last_success").is_none_or(Value::is_null));
    let fine = ask(&env, r#"{"v":1,"op":"jobs","text":"fine"}"#)["jobs"][0].clone();
    assert_eq!(fine["outcomes"], "s");
    assert!(fine["last_success"].is_string());
    assert_eq!(fine["state"], "idle");
    assert_eq!(fine["schedule"], "@reboot");

    // Sorted by failures: the failing job first; by next fire: soonest.
    let page = ask(&env, r#"{"v":1,"op":"jobs","sort":"failures","limit":1}"#);
    assert_eq!(names(&page), ["boom"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","sort":"last_run","limit":2}"#);
    let mut two = names(&page);
    two.sort();
    assert_eq!(two, ["boom", "fine"]);
    let page = ask(
        &env,
        r#"{"v":1,"op":"jobs","sort":"next_fire","descending":true,"limit":3}"#,
    );
    // Jobs with no next fire come last, so first when descending.
    assert!(names(&page).contains(&"off".to_string()), "{page}");

    // Bad input is told clearly.
    let bad = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"jobs","state":"sleeping"}"#)
        .unwrap();
    assert_eq!(bad["ok"], false);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("unknown state \"sleeping\""),
        "{bad}"
    );
    let bad = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"jobs","sort":"failures","cursor":"name:0:job-03"}"#)
        .unwrap();
    assert!(
        bad["error"].as_str().unwrap().contains("sorted by name"),
        "{bad}"
    );
    let bad = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"jobs","limit":0}"#)
        .unwrap();
    assert!(bad["error"].as_str().unwrap().contains("limit"), "{bad}");
    // A limit past the maximum is cut to it, not refused.
    let page = ask(&env, r#"{"v":1,"op":"jobs","limit":100000}"#);
    assert_eq!(names(&page).len(), 33);
}

#[test]
fn the_overview_counts_and_lists_what_matters() {
    let env = Env::new();
    env.jobs(&format!(
        "{}\n[jobs.long]\nschedule = \"@reboot\"\ncommand = \"sleep 30\"\nkill_grace = \"1s\"\n",
        many_jobs()
    ));
    let _d = env.daemon();
    env.wait_until("the start-up runs", || {
        !env.finals("boom").is_empty() && !env.finals("fine").is_empty()
    });
    env.rea(&["pause", "job-05"]).ok();
    let o = ask(&env, r#"{"v":1,"op":"overview"}"#);
    assert_eq!(o["counts"]["jobs"], 34);
    assert_eq!(o["counts"]["running"], 1, "{o}");
    assert_eq!(o["counts"]["paused"], 1);
    assert_eq!(o["counts"]["disabled"], 1);
    assert_eq!(o["counts"]["failing"], 1);
    assert_eq!(o["running"][0]["job"], "long");
    assert!(o["running"][0]["pid"].is_u64());
    assert_eq!(o["failing"][0]["name"], "boom");
    assert_eq!(o["next_due"].as_array().unwrap().len(), 10);
    let firsts: Vec<&str> = o["next_due"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["at"].as_str().unwrap())
        .collect();
    let mut sorted = firsts.clone();
    sorted.sort();
    assert_eq!(firsts, sorted, "soonest first");
    assert_eq!(o["daemon"]["running"], true);
}

/// A subscription's lines, read on a thread of their own so a test can
/// wait for one with a deadline.
pub(crate) struct Subscriber {
    lines: std::sync::mpsc::Receiver<Value>,
    conn: std::os::unix::net::UnixStream,
}

impl Subscriber {
    /// Subscribes now and returns once the overview came.
    pub(crate) fn open(env: &Env, request: &str) -> (Subscriber, Value) {
        use std::io::{BufRead, BufReader, Write};
        let mut conn = std::os::unix::net::UnixStream::connect(env.socket()).expect("connect");
        conn.write_all(format!("{request}\n").as_bytes())
            .expect("subscribe");
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = BufReader::new(conn.try_clone().expect("clone"));
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    return;
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let sub = Subscriber { lines: rx, conn };
        let first = sub.next().expect("the overview");
        (sub, first)
    }

    fn next(&self) -> Option<Value> {
        self.lines
            .recv_timeout(std::time::Duration::from_secs(20))
            .ok()
    }

    /// Reads events until one for which `wanted` holds; panics after 20 s
    /// without one.
    pub(crate) fn until(&self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self
                .next()
                .unwrap_or_else(|| panic!("no {what} within 20 s"));
            assert_eq!(line["ok"], true, "{line}");
            if wanted(&line["data"]) {
                return line["data"].clone();
            }
        }
    }
}

impl Drop for Subscriber {
    /// Hangs up (the reading thread holds the socket too).
    fn drop(&mut self) {
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
    }
}

const QUICK: &str = "[jobs.quick]\nschedule = \"@yearly\"\ncommand = \"echo hello; sleep 0.2\"\n\n[jobs.other]\nschedule = \"@yearly\"\ncommand = \"true\"\n";

#[test]
fn a_subscriber_gets_the_overview_then_a_runs_start_and_end() {
    let env = Env::new();
    env.jobs(QUICK);
    let _d = env.daemon();
    let (sub, first) = Subscriber::open(&env, r#"{"v":1,"op":"subscribe"}"#);
    assert_eq!(first["ok"], true);
    assert_eq!(first["data"]["counts"]["jobs"], 2);
    env.rea(&["trigger", "quick"]).ok();
    let started = sub.until("run_started", |e| e["event"] == "run_started");
    assert_eq!(started["job"], "quick");
    let ended = sub.until("run_ended", |e| e["event"] == "run_ended");
    assert_eq!(ended["job"], "quick");
    assert_eq!(ended["status"], "succeeded");
    assert_eq!(ended["run"], started["run"]);
    assert!(ended["duration_ms"].as_u64().unwrap() >= 150, "{ended}");
    let summary = sub.until("the job's summary", |e| {
        e["event"] == "job" && e["summary"]["outcomes"] == "s"
    });
    assert_eq!(summary["summary"]["name"], "quick");
    env.rea(&["pause", "other"]).ok();
    let paused = sub.until("paused", |e| e["event"] == "paused");
    assert_eq!(paused["jobs"], serde_json::json!(["other"]));
    env.rea(&["reload"]).ok();
    // An unchanged file is not read again; a changed one is.
    env.jobs(&format!(
        "{QUICK}\n[jobs.third]\nschedule = \"@yearly\"\ncommand = \"true\"\n"
    ));
    env.rea(&["reload"]).ok();
    let reloaded = sub.until("reloaded", |e| e["event"] == "reloaded");
    assert_eq!(reloaded["jobs"], 3);
}

#[test]
fn a_subscriber_follows_a_runs_output() {
    let env = Env::new();
    env.jobs(
        "[jobs.talk]\nschedule = \"@yearly\"\ncommand = \"echo one; sleep 1; echo two; sleep 1\"\n",
    );
    let _d = env.daemon();
    let run = env.rea(&["trigger", "talk", "--json"]).json()["run"]
        .as_str()
        .unwrap()
        .to_string();
    let (sub, _) = Subscriber::open(
        &env,
        &format!(r#"{{"v":1,"op":"subscribe","follow":"{run}"}}"#),
    );
    let out = sub.until("the run's output", |e| {
        e["event"] == "output" && e["text"].as_str().unwrap_or("").contains("two")
    });
    assert_eq!(out["run"], run.as_str());
    sub.until("run_ended", |e| e["event"] == "run_ended");
    // A run that is not running cannot be followed.
    let answer = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"subscribe","follow":"nope"}"#)
        .unwrap();
    assert_eq!(answer["ok"], false);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("no run \"nope\" is running or waiting to start"));
}

/// A daemon with one slot (`max_concurrent = 1`), taken by `hold` until
/// the file it returns is made, and a job `talk` running `talk`; returns
/// once `hold` runs, so a trigger of `talk` waits for the slot.
pub(crate) fn one_slot_taken(env: &Env, talk: &str) -> (crate::support::Daemon, PathBuf) {
    let go = env.path("go");
    env.jobs(&format!(
        "[daemon]\nmax_concurrent = 1\n\n\
         [jobs.hold]\nschedule = \"@yearly\"\ncommand = \"while [ ! -e {go} ]; do sleep 0.05; done\"\n\n\
         [jobs.talk]\nschedule = \"@yearly\"\ncommand = \"{talk}\"\n",
        go = go.display()
    ));
    let d = env.daemon();
    env.rea(&["trigger", "hold"]).ok();
    env.wait_until("hold runs", || !env.runs("hold", "started").is_empty());
    (d, go)
}

#[test]
fn a_subscriber_follows_a_queued_run_from_its_first_byte() {
    let env = Env::new();
    let (_d, go) = one_slot_taken(&env, "echo first; sleep 0.3; echo second");
    let queued = env.rea(&["trigger", "talk", "--json"]).json();
    assert_eq!(queued["state"], "queued", "{queued}");
    let run = queued["run"].as_str().unwrap().to_string();
    // Subscribed while the run waits for the one slot: its output comes
    // whole once it starts, then its end.
    let (sub, first) = Subscriber::open(
        &env,
        &format!(r#"{{"v":1,"op":"subscribe","follow":"{run}"}}"#),
    );
    assert_eq!(first["ok"], true, "{first}");
    std::fs::write(&go, "").expect("release hold");
    let mut text = String::new();
    loop {
        let e = sub.until("talk's output or end", |e| {
            e["event"] == "output" || (e["event"] == "run_ended" && e["run"] == run.as_str())
        });
        if e["event"] == "run_ended" {
            assert_eq!(e["status"], "succeeded", "{e}");
            break;
        }
        assert_eq!(e["run"], run.as_str(), "{e}");
        assert!(e.get("skipped").is_none(), "nothing lost: {e}");
        text.push_str(e["text"].as_str().unwrap());
    }
    assert_eq!(text, "first\nsecond\n");
}

#[test]
fn a_subscriber_cannot_follow_a_run_that_is_over() {
    let env = Env::new();
    env.jobs(QUICK);
    let _d = env.daemon();
    let run = env.rea(&["trigger", "quick", "--json"]).json()["run"]
        .as_str()
        .unwrap()
        .to_string();
    env.wait_until("quick ended", || !env.finals("quick").is_empty());
    // Over: it neither runs nor waits.
    let answer = Conn::open(&env.socket())
        .ask(&format!(r#"{{"v":1,"op":"subscribe","follow":"{run}"}}"#))
        .unwrap();
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["code"], "unknown_run", "{answer}");
}

/// 300 jobs with long names: pausing or resuming them all is one event
/// of about 20 KB.
fn wide_jobs() -> String {
    let mut toml = QUICK.to_string();
    for i in 0..300 {
        toml.push_str(&format!(
            "[jobs.a-rather-long-job-name-for-a-big-event-{i:03}]\nschedule = \"@yearly\"\ncommand = \"true\"\n"
        ));
    }
    toml
}

#[test]
fn a_slow_subscriber_is_told_what_it_lost_and_goes_on() {
    let env = Env::new();
    env.jobs(&wide_jobs());
    let _d = env.daemon();
    let mut slow = Conn::open(&env.socket());
    assert!(slow.send(r#"{"v":1,"op":"subscribe"}"#));
    assert_eq!(slow.recv().expect("the overview")["ok"], true);
    // 100 events of ~15 KB while the slow client reads nothing: far more
    // than its queue (256 KiB), its connection's buffer and its socket
    // hold (and quick enough to stay within the 30 s a client may leave
    // lines unread).
    let mut flood = Conn::open(&env.socket());
    for i in 0..50 {
        for op in ["pause", "resume"] {
            let answer = flood
                .ask(&format!(r#"{{"v":1,"op":"{op}","all":true}}"#))
                .unwrap_or_else(|| panic!("pause {i}"));
            assert_eq!(answer["ok"], true);
        }
    }
    // The daemon answers others meanwhile.
    env.rea(&["status", "quick"]).ok();
    // Now it reads: what fitted, then how much it lost, then new events.
    let mut lost = 0;
    let mut seen = 0;
    while lost == 0 {
        let line = slow.recv().expect("a line");
        seen += 1;
        if line["data"]["event"] == "lost" {
            lost = line["data"]["events"].as_u64().unwrap();
        }
    }
    assert!(lost > 0 && seen < 100, "lost {lost} after {seen} lines");
    env.rea(&["trigger", "quick"]).ok();
    loop {
        let line = slow.recv().expect("events after the loss");
        if line["data"]["event"] == "run_ended" {
            assert_eq!(line["data"]["job"], "quick");
            break;
        }
    }
}

#[test]
fn a_subscriber_that_hangs_up_is_dropped_at_once() {
    let env = Env::new();
    env.jobs(QUICK);
    let _d = env.daemon();
    let (stays, _) = Subscriber::open(&env, r#"{"v":1,"op":"subscribe"}"#);
    // Root may hold every subscription (64); the next is refused.
    let mut held: Vec<Subscriber> = (0..63)
        .map(|_| Subscriber::open(&env, r#"{"v":1,"op":"subscribe"}"#).0)
        .collect();
    let refused = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"subscribe"}"#)
        .unwrap();
    assert_eq!(refused["ok"], false);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("too many subscribers"),
        "{refused}"
    );
    // One hangs up, while nothing happens: its slot is free at once.
    held.pop();
    let mut again = None;
    for _ in 0..100 {
        let answer = Conn::open(&env.socket()).ask(r#"{"v":1,"op":"subscribe"}"#);
        if answer.as_ref().is_some_and(|a| a["ok"] == true) {
            again = answer;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        again.is_some(),
        "the slot of the client that left was given back"
    );
    // Every other hangs up; the one that stays still gets events.
    held.clear();
    env.rea(&["trigger", "quick"]).ok();
    let ended = stays.until("run_ended", |e| e["event"] == "run_ended");
    assert_eq!(ended["job"], "quick");
    env.rea(&["status"]).ok();
}

/// Speaks to the socket as a user: sends its request line, then prints
/// every answer line as it comes.
const CLIENT: &str = r#"use IO::Socket::UNIX; $| = 1;
my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!";
print $s "$ARGV[1]\n";
while (my $l = <$s>) { print $l; }"#;

/// A client of the socket running as `user`, its answer lines on a
/// channel.
struct AsUser {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl AsUser {
    fn start(env: &Env, user: &str, request: &str) -> AsUser {
        use std::io::BufRead;
        let (uid, gid) = crate::support::throwaway_user(user).expect("root creates the test users");
        let mut child = std::process::Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .args(["perl", "-e", CLIENT])
            .arg(env.socket())
            .arg(request)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("setpriv perl");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        AsUser { child, lines: rx }
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("an answer line within 20 s")
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_user_sees_only_her_own_jobs_and_events() {
    use std::os::unix::fs::PermissionsExt;
    if crate::support::skip_unless_root("a_user_sees_only_her_own_jobs_and_events") {
        return;
    }
    const ALICE: &str = "rea-alice";
    const BOB: &str = "rea-bob";
    let quick = |name: &str| {
        format!("[jobs.{name}]\nschedule = \"@yearly\"\ncommand = \"sleep 0.1\"\ntags = [\"t\"]\n")
    };
    let env = crate::users::shared_env(&quick("sys"));
    for (user, jobs) in [(ALICE, ["hers", "backup"]), (BOB, ["his", "backup"])] {
        let text: String = jobs.iter().map(|j| quick(j)).collect();
        let f = env.write(&format!("users/{user}.toml"), &text);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        crate::support::throwaway_user(user).expect("user");
    }
    let _d = env.daemon();

    // Root sees five jobs; alice her two, named as she writes them.
    let all = ask(&env, r#"{"v":1,"op":"jobs","sort":"name"}"#);
    assert_eq!(all["matching"], 5, "{all}");
    let page = AsUser::start(&env, ALICE, r#"{"v":1,"op":"jobs","sort":"name"}"#).next();
    assert_eq!(page["ok"], true, "{page}");
    assert_eq!(names(&page["data"]), ["backup", "hers"]);
    assert_eq!(page["data"]["matching"], 2);
    assert_eq!(page["data"]["jobs"][0]["tenant"], ALICE);
    // Asking for bob's tenant, or searching his names, finds nothing.
    let page = AsUser::start(
        &env,
        ALICE,
        &format!(r#"{{"v":1,"op":"jobs","tenant":"{BOB}"}}"#),
    )
    .next();
    assert_eq!(page["data"]["matching"], 0, "{page}");
    let page = AsUser::start(&env, ALICE, r#"{"v":1,"op":"jobs","text":"his"}"#).next();
    assert_eq!(page["data"]["matching"], 0, "{page}");
    // Her exact name is her own job; bob's qualified name is nothing.
    let page = AsUser::start(&env, ALICE, r#"{"v":1,"op":"jobs","name":"backup"}"#).next();
    assert_eq!(names(&page["data"]), ["backup"], "{page}");
    assert_eq!(page["data"]["jobs"][0]["tenant"], ALICE);
    let page = AsUser::start(
        &env,
        ALICE,
        &format!(r#"{{"v":1,"op":"jobs","name":"{BOB}/backup"}}"#),
    )
    .next();
    assert_eq!(page["data"]["matching"], 0, "{page}");
    let o = AsUser::start(&env, ALICE, r#"{"v":1,"op":"overview"}"#).next();
    assert_eq!(o["data"]["counts"]["jobs"], 2, "{o}");
    assert_eq!(o["data"]["tenant"], ALICE);

    // Her subscription hears of her runs only.
    let sub = AsUser::start(&env, ALICE, r#"{"v":1,"op":"subscribe"}"#);
    assert_eq!(sub.next()["data"]["counts"]["jobs"], 2);
    env.rea(&["trigger", "sys"]).ok();
    env.rea(&["trigger", &format!("{BOB}/backup")]).ok();
    env.rea(&["pause", &format!("{BOB}/his"), "sys"]).ok();
    env.rea(&["trigger", &format!("{ALICE}/hers")]).ok();
    let mut hers_ended = false;
    while !hers_ended {
        let line = sub.next();
        let e = &line["data"];
        let text = e.to_string();
        assert!(!text.contains(BOB) && !text.contains("\"sys\""), "{text}");
        assert!(!text.contains(&format!("{ALICE}/")), "localized: {text}");
        hers_ended = e["event"] == "run_ended" && e["job"] == "hers";
    }
}

#[test]
fn a_user_follows_her_own_queued_run_and_not_anothers() {
    if crate::support::skip_unless_root("a_user_follows_her_own_queued_run_and_not_anothers") {
        return;
    }
    const ALICE: &str = "rea-alice";
    const BOB: &str = "rea-bob";
    let env = crate::users::shared_env("");
    crate::support::throwaway_user(ALICE).expect("user");
    crate::support::throwaway_user(BOB).expect("user");
    crate::users::user_file(
        &env,
        BOB,
        "[jobs.his]\nschedule = \"@yearly\"\ncommand = \"echo bob-secret\"\n",
    );
    let (_d, go) = one_slot_taken(&env, "true");
    let queued = env
        .rea(&["trigger", &format!("{BOB}/his"), "--json"])
        .json();
    assert_eq!(queued["state"], "queued", "{queued}");
    let run = queued["run"].as_str().unwrap().to_string();
    let follow = format!(r#"{{"v":1,"op":"subscribe","follow":"{run}"}}"#);
    // Alice may not follow it: as if there were no such run.
    let hers = AsUser::start(&env, ALICE, &follow).next();
    assert_eq!(hers["ok"], false, "{hers}");
    assert_eq!(hers["code"], "unknown_run", "{hers}");
    // Bob may, and gets its output once it starts.
    let his = AsUser::start(&env, BOB, &follow);
    let first = his.next();
    assert_eq!(first["ok"], true, "{first}");
    std::fs::write(&go, "").expect("release hold");
    loop {
        let e = his.next();
        if e["data"]["event"] == "output" {
            assert_eq!(e["data"]["text"], "bob-secret\n", "{e}");
            break;
        }
    }
}

#[test]
fn status_opens_with_the_overview_and_a_page_and_all_pages_through() {
    let env = Env::new();
    let mut toml = many_jobs();
    for i in 0..220 {
        toml.push_str(&format!(
            "[jobs.extra-{i:03}]\nschedule = \"@yearly\"\ncommand = \"true\"\n"
        ));
    }
    env.jobs(&toml);
    let _d = env.daemon();
    env.wait_until("the start-up runs", || {
        !env.finals("boom").is_empty() && !env.finals("fine").is_empty()
    });
    let out = env.rea(&["status"]);
    out.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("daemon: running (pid"),
        "{}",
        out.stdout
    );
    out.stdout_has("jobs: 253 (0 running, 0 queued, 0 paused, 1 disabled, 1 failing)")
        .stdout_has("failing: boom (1)")
        .stdout_has("next: ")
        .stdout_has("... and 153 more job(s): rea status --all");
    let header = lines
        .iter()
        .position(|l| l.starts_with("JOB "))
        .expect("the table's header");
    assert!(
        lines[header].contains(" NEXT ") && lines[header].ends_with(" RECENT"),
        "{}",
        lines[header]
    );
    assert_eq!(lines.len() - header - 2, 100, "a page of rows");
    let boom = lines.iter().find(|l| l.starts_with("boom ")).unwrap();
    assert!(boom.contains("failed") && boom.ends_with(" f"), "{boom}");

    let all = env.rea(&["status", "--all"]);
    all.ok();
    let rows: Vec<&str> = all
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("JOB "))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 253, "{}", all.stdout);
    assert!(rows.last().unwrap().starts_with("extra-219"));
    assert!(!all.stdout.contains("more job(s)"));
    // One job, --json and --check read the complete answer as before.
    env.rea(&["status", "boom"]).code(0).stdout_has("boom");
    assert_eq!(
        env.rea(&["status", "--json"]).json()["jobs"]
            .as_array()
            .unwrap()
            .len(),
        253
    );
    env.rea(&["status", "--all", "--json"])
        .code(2)
        .stderr_has("cannot be used with");
}
