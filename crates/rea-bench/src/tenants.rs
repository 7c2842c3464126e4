//! Fair share between tenants: while one user (rea-alice) floods the
//! daemon — 3,000 forced triggers pipelined on one connection, 2,000
//! per-second jobs, long jobs holding slots, failing jobs that mail — another
//! user's (rea-bob) and the system's per-second jobs must miss no occurrence
//! and start on time. Both are measured beside the same jobs with no flood,
//! in the same run. Needs root (a root daemon runs users' jobs as them);
//! creates the two throwaway users as the integration tests do.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::report::Figure;
use super::util::{self, Client, Daemon, TempDir};
use super::Settings;

const ALICE: &str = "rea-alice";
const BOB: &str = "rea-bob";
/// The hidden mode in which rea-bench, run as the flooding user, pipelines
/// the forced triggers (see [`client`]).
pub(crate) const CLIENT_FLAG: &str = "--tenants-trigger-client";

const TRIGGERS: usize = 3_000;
const PER_SECOND_JOBS: usize = 2_000;
/// Of the per-second jobs, those that fail and mail their output.
const MAILING_JOBS: usize = 20;
const LONG_JOBS: usize = 8;
const LATENESS_P99_MS: f64 = 50.0;

pub(crate) fn tenants(s: &Settings) -> Vec<Figure> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("tenants: SKIPPED: needs root (users' jobs run as their users)");
        return vec![Figure::info(
            "tenants",
            "fair share between tenants",
            "not measured: needs root",
        )];
    }
    let (Some(alice), Some(_)) = (util::throwaway_user(ALICE), util::throwaway_user(BOB)) else {
        return vec![Figure::info(
            "tenants",
            "fair share between tenants",
            "not measured: cannot create the users rea-alice and rea-bob",
        )];
    };
    let secs = s.precision_secs.max(10);
    eprintln!("tenants: {secs} s without a flood, then {secs} s with rea-alice flooding");
    let calm = phase(secs, None);
    let flood = phase(secs, Some(alice));
    let mut out = Vec::new();
    for (who, job) in [("rea-bob's", "rea-bob/tick"), ("the system's", "sys-tick")] {
        let (f, c) = (&flood.victims[job], &calm.victims[job]);
        let p99 = util::percentile(&f.late, 99.0);
        out.push(Figure::check(
            "tenants",
            format!(
                "{who} per-second job while rea-alice floods ({TRIGGERS} pipelined forced triggers, \
                 {PER_SECOND_JOBS} per-second jobs of which {MAILING_JOBS} fail and mail, \
                 {LONG_JOBS} long jobs; max_concurrent = 8): missed occurrences, start lateness \
                 (recorded start − scheduled) over {secs} s"
            ),
            format!(
                "{} missed of {}, {} skipped; p99 {p99:.1} ms, p50 {:.1} ms (latest: {})",
                f.missed,
                f.expected,
                f.skipped,
                util::percentile(&f.late, 50.0),
                f.latest
            ),
            format!("0 missed, p99 ≤ {LATENESS_P99_MS} ms"),
            f.missed == 0 && f.skipped == 0 && !f.late.is_empty() && p99 <= LATENESS_P99_MS,
        ));
        out.push(Figure::info(
            "tenants",
            "  same job, same length, no flood",
            format!(
                "{} missed of {}, {} skipped; p99 {:.1} ms, p50 {:.1} ms (latest: {})",
                c.missed,
                c.expected,
                c.skipped,
                util::percentile(&c.late, 99.0),
                util::percentile(&c.late, 50.0),
                c.latest
            ),
        ));
    }
    out.push(Figure::info(
        "tenants",
        "  the flood, as the daemon took it",
        format!(
            "{} of {TRIGGERS} triggers accepted, {} refused (max_queued_per_user = 100); \
             {} of her runs started, {} of her occurrences skipped waiting for a slot, {} mails",
            flood.accepted, flood.refused, flood.flood_runs, flood.flood_waits, flood.mails
        ),
    ));
    out
}

/// A victim job's occurrences over the measured window.
#[derive(Debug, Default)]
struct Victim {
    /// Whole seconds in the window.
    expected: usize,
    /// Of those, occurrences with no run.
    missed: usize,
    /// Its `skipped` records (any time).
    skipped: usize,
    /// Recorded start − scheduled, ms, of the runs in the window.
    late: Vec<f64>,
    /// The same with each run's scheduled instant, to say when the latest
    /// were.
    worst: Vec<(DateTime<Utc>, f64)>,
    /// The three latest starts and when, after the daemon was ready.
    latest: String,
}

#[derive(Debug, Default)]
struct Phase {
    victims: std::collections::HashMap<&'static str, Victim>,
    accepted: usize,
    refused: usize,
    flood_runs: usize,
    flood_waits: usize,
    mails: usize,
}

/// One daemon for `secs` seconds: the victims' jobs, and with `flood` (the
/// flooding user's ids) her file and her triggers.
fn phase(secs: u64, flood: Option<(u32, u32)>) -> Phase {
    let dir = TempDir::new("tenants");
    // The users reach the socket and the fake sendmail; nothing else here.
    let _ = fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711));
    let mail = dir.path().join("mail");
    fs::create_dir_all(&mail).unwrap_or_else(|e| util::die(e));
    let _ = fs::set_permissions(&mail, fs::Permissions::from_mode(0o1777));
    let sendmail = dir.path().join("sendmail");
    util::write_file(
        &sendmail,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho . >> {}/sent\n",
            mail.display()
        )
        .as_bytes(),
    );
    let _ = fs::set_permissions(&sendmail, fs::Permissions::from_mode(0o755));
    dir.write_jobs(&format!(
        "[daemon]\nmax_concurrent = 8\nshutdown_grace = \"1s\"\nsendmail = {:?}\n\n\
         [jobs.sys-tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        sendmail.display().to_string()
    ));
    let users = dir.path().join("users");
    fs::create_dir_all(&users).unwrap_or_else(|e| util::die(e));
    let user_file = |user: &str, body: &str| {
        let f = users.join(format!("{user}.toml"));
        util::write_file(&f, body.as_bytes());
        let _ = fs::set_permissions(&f, fs::Permissions::from_mode(0o600));
    };
    user_file(
        BOB,
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    );
    if flood.is_some() {
        user_file(ALICE, &flood_file());
    }
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(60));
    let began = Utc::now();
    let mut phase = Phase::default();
    if let Some(ids) = flood {
        let (accepted, refused) = pipelined_triggers(&dir, ids);
        phase.accepted = accepted;
        phase.refused = refused;
    }
    let left = Duration::from_secs(secs)
        .saturating_sub((Utc::now() - began).to_std().unwrap_or(Duration::ZERO));
    std::thread::sleep(left);
    let ended = Utc::now();
    d.stop();
    let history = history(&dir.state());
    // From the first whole second after start-up settled to the last whole
    // second before the stop.
    let from = whole_second_after(began + chrono::Duration::seconds(1));
    let until = whole_second_after(ended - chrono::Duration::seconds(2));
    for job in ["sys-tick", "rea-bob/tick"] {
        let mut v = victim(&history, job, from, until);
        v.worst.sort_by(|a, b| b.1.total_cmp(&a.1));
        v.worst.truncate(3);
        v.latest = v
            .worst
            .iter()
            .map(|(t, ms)| format!("{ms:.0} ms at +{} s", (*t - began).num_seconds()))
            .collect::<Vec<_>>()
            .join(", ");
        phase.victims.insert(job, v);
    }
    let of_alice = |v: &&Value| {
        v["job"]
            .as_str()
            .is_some_and(|j| j.starts_with("rea-alice/"))
    };
    phase.flood_runs = history
        .iter()
        .filter(of_alice)
        .filter(|v| v["status"] == "started")
        .count();
    phase.flood_waits = history
        .iter()
        .filter(of_alice)
        .filter(|v| {
            v["status"] == "skipped"
                && v["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("waiting for a free slot"))
        })
        .count();
    phase.mails = fs::read_to_string(mail.join("sent"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    phase
}

/// The flooding user's file: per-second jobs (some failing with mail),
/// long jobs, and the job she triggers.
fn flood_file() -> String {
    let mut s = String::new();
    for i in 0..PER_SECOND_JOBS {
        if i < MAILING_JOBS {
            s.push_str(&format!(
                "[jobs.mail{i}]\nschedule = \"* * * * * *\"\ncommand = \"echo oops; exit 1\"\nmailto = \"rea-alice@example.com\"\n\n"
            ));
        } else {
            s.push_str(&format!(
                "[jobs.flood{i}]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\n"
            ));
        }
    }
    for i in 0..LONG_JOBS {
        s.push_str(&format!(
            "[jobs.long{i}]\nschedule = \"* * * * * *\"\ncommand = \"sleep 600\"\nkill_grace = \"1s\"\n\n"
        ));
    }
    s.push_str("[jobs.burst]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n");
    s
}

/// The forced triggers, sent by this binary run as the flooding user
/// (the daemon authorizes by the peer's uid): (accepted, refused).
fn pipelined_triggers(dir: &TempDir, (uid, gid): (u32, u32)) -> (usize, usize) {
    let exe = std::env::current_exe().unwrap_or_else(|e| util::die(e));
    let out = Command::new(exe)
        .arg(CLIENT_FLAG)
        .arg(dir.state())
        .arg(TRIGGERS.to_string())
        .uid(uid)
        .gid(gid)
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| util::die(format!("the trigger client: {e}")));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = text.split_whitespace().map(|w| w.parse().unwrap_or(0));
    let accepted = counts.next().unwrap_or(0);
    let refused = counts.next().unwrap_or(0);
    if accepted + refused != TRIGGERS {
        eprintln!(
            "tenants: the trigger client: {}{}",
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    (accepted, refused)
}

/// The trigger client (hidden mode, run as the flooding user): `N` forced
/// triggers of `burst` pipelined on one connection to `STATE`'s socket;
/// prints how many were accepted and how many refused, and the first
/// refusal's reason on stderr.
pub(crate) fn client() -> ! {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let (Some(state), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse().ok())) else {
        util::die(format!("usage: rea-bench {CLIENT_FLAG} STATE N"));
    };
    let n: usize = n;
    let mut c = Client::connect(Path::new(state)).unwrap_or_else(|e| util::die(e));
    let mut writer = c.try_clone_writer();
    let sender = std::thread::spawn(move || {
        let line =
            b"{\"v\":1,\"op\":\"trigger\",\"job\":\"burst\",\"force\":true,\"wait\":false}\n";
        let mut buf = Vec::with_capacity(line.len() * n);
        for _ in 0..n {
            buf.extend_from_slice(line);
        }
        let _ = writer.write_all(&buf);
    });
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..n {
        match c.recv() {
            Some(r) if r["ok"] == true => accepted += 1,
            Some(r) => {
                if refused == 0 {
                    eprintln!("first refusal: {r}");
                }
                refused += 1;
            }
            None => break,
        }
    }
    let _ = sender.join();
    println!("{accepted} {refused}");
    std::process::exit(0)
}

/// Every history line of the state directory: the system's log and each
/// user's (`tenants/NAME/`), rotated files first.
fn history(state: &Path) -> Vec<Value> {
    let mut roots = vec![state.to_path_buf()];
    if let Ok(tenants) = fs::read_dir(state.join("tenants")) {
        roots.extend(tenants.flatten().map(|e| e.path()));
    }
    let mut lines = Vec::new();
    for root in roots {
        let mut files: Vec<_> = (1..=20)
            .rev()
            .map(|n| root.join(format!("history.jsonl.{n}")))
            .filter(|p| p.exists())
            .collect();
        files.push(root.join("history.jsonl"));
        for f in files {
            let text = fs::read_to_string(&f).unwrap_or_default();
            lines.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok()),
            );
        }
    }
    lines
}

fn whole_second_after(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp() + 1, 0).unwrap_or(t)
}

/// `job`'s occurrences from `from` to `until` (whole seconds, inclusive).
fn victim(history: &[Value], job: &str, from: DateTime<Utc>, until: DateTime<Utc>) -> Victim {
    let time = |v: &Value, k: &str| v[k].as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok());
    let mine: Vec<&Value> = history
        .iter()
        .filter(|v| v["event"] == "run" && v["job"] == job)
        .collect();
    let mut served = std::collections::BTreeSet::new();
    let mut late = Vec::new();
    let mut worst = Vec::new();
    for v in mine.iter().filter(|v| v["status"] == "started") {
        let (Some(sched), Some(started)) = (time(v, "scheduled"), time(v, "started")) else {
            continue;
        };
        if sched >= from && sched <= until {
            served.insert(sched);
            let ms = (started - sched).num_microseconds().unwrap_or(0) as f64 / 1e3;
            late.push(ms);
            worst.push((sched, ms));
        }
    }
    let expected = ((until - from).num_seconds() + 1).max(0) as usize;
    Victim {
        expected,
        missed: expected.saturating_sub(served.len()),
        skipped: mine.iter().filter(|v| v["status"] == "skipped").count(),
        late,
        worst,
        latest: String::new(),
    }
}
