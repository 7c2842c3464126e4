//! Cluster mode: several real `rea run` daemons, one job file each, on a
//! private PostgreSQL the test starts itself (`support::pg`). What the
//! nodes did is read from a witness file the jobs append to (one line per
//! start: job, occurrence, attempt, node, fence, pid), not from rea's own
//! tables; the cluster-wide commands (`rea status`, `history`) are checked
//! beside it. Leases are short here (1s, heartbeat 250ms) so failures are
//! detected quickly; every wait polls with a generous deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::support::pg::{self, Pg};
use crate::support::{wait_until, Daemon, Env, PATIENCE};

/// Test timings where a dead node must be noticed quickly: lease 1s,
/// heartbeat 250ms, grace 250ms.
const FAST: &str = "lease = \"1s\"\nheartbeat = \"250ms\"\ngrace = \"250ms\"\n";
/// Where detection time does not matter: a node starved of CPU on a loaded
/// machine is not declared dead.
const CALM: &str = "lease = \"3s\"\nheartbeat = \"250ms\"\ngrace = \"1s\"\n";

/// One start, as the job wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    job: String,
    scheduled: String,
    attempt: u32,
    node: String,
    fence: i64,
    pid: i32,
}

/// The file the jobs append to.
struct Witness {
    dir: tempfile::TempDir,
}

impl Witness {
    fn new() -> Witness {
        Witness {
            dir: tempfile::Builder::new()
                .prefix("rea-witness-")
                .tempdir()
                .expect("tempdir"),
        }
    }

    fn path(&self) -> String {
        self.dir.path().join("starts").display().to_string()
    }

    /// The shell line a job runs first.
    fn line(&self) -> String {
        format!(
            "echo \\\"start $REA_JOB $REA_SCHEDULED_AT $REA_ATTEMPT $REA_NODE $REA_FENCE $$\\\" >> {}",
            self.path()
        )
    }

    fn starts(&self) -> Vec<Start> {
        std::fs::read_to_string(self.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 7 && f[0] == "start").then(|| Start {
                    job: f[1].to_string(),
                    scheduled: f[2].to_string(),
                    attempt: f[3].parse().unwrap_or(0),
                    node: f[4].to_string(),
                    fence: f[5].parse().unwrap_or(0),
                    pid: f[6].parse().unwrap_or(0),
                })
            })
            .collect()
    }

    fn of(&self, job: &str) -> Vec<Start> {
        self.starts().into_iter().filter(|s| s.job == job).collect()
    }

    /// Panics naming every (job, occurrence, attempt) started twice.
    fn assert_no_duplicates(&self) {
        let mut seen: BTreeMap<(String, String, u32), Vec<String>> = BTreeMap::new();
        for s in self.starts() {
            seen.entry((s.job.clone(), s.scheduled.clone(), s.attempt))
                .or_default()
                .push(s.node.clone());
        }
        let dups: Vec<_> = seen.iter().filter(|(_, n)| n.len() > 1).collect();
        assert!(dups.is_empty(), "started more than once: {dups:?}");
    }

    /// Kills what the jobs left running (a node killed outright leaves its
    /// runs' processes behind, as the design says): only processes whose
    /// command line names this witness file, so a reused pid is never hit.
    fn kill_leftovers(&self) {
        let me = self.path();
        for s in self.starts() {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", s.pid)).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&me) {
                // SAFETY: kill(2) with plain integers, on a process checked
                // to be one of this test's jobs.
                unsafe {
                    libc::kill(-s.pid, libc::SIGKILL);
                    libc::kill(s.pid, libc::SIGKILL);
                }
            }
        }
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        self.kill_leftovers();
    }
}

/// A job file of the cluster `name` on `url` (the node's name comes from
/// `REA_NODE`, so every node's file is the same).
fn cluster_file(url: &str, name: &str, timings: &str, jobs: &str) -> String {
    format!("[cluster]\nurl = \"{url}\"\nname = \"{name}\"\n{timings}\n{jobs}")
}

/// A node: its own sandbox (state directory, job file) and daemon.
struct Node {
    name: String,
    env: Env,
    daemon: Option<Daemon>,
}

impl Node {
    fn new(name: &str, file: &str) -> Node {
        let env = Env::new();
        env.jobs(file);
        Node {
            name: name.to_string(),
            env,
            daemon: None,
        }
    }

    fn start(&mut self) -> &mut Node {
        self.daemon = Some(
            self.env
                .daemon_with_env(&[], &[("REA_NODE", self.name.as_str())]),
        );
        self
    }

    fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("running")
    }

    /// `rea ARGS` on this node (its job file: cluster-wide answers).
    fn rea(&self, args: &[&str]) -> crate::support::Run {
        self.env.rea_env(
            args,
            &[
                ("REA_FILE", self.env.jobs_path().to_str().expect("path")),
                ("REA_NODE", self.name.as_str()),
            ],
        )
    }

    fn status(&self) -> serde_json::Value {
        self.rea(&["status", "--json"]).ok().json()
    }

    /// `rea status --json`, or Null while no node has created the schema.
    fn status_soon(&self) -> serde_json::Value {
        let out = self.rea(&["status", "--json"]);
        if out.code == 0 {
            out.json()
        } else {
            serde_json::Value::Null
        }
    }

    fn history(&self, job: &str) -> Vec<serde_json::Value> {
        let out = self.rea(&["history", job, "--json", "-n", "10000"]);
        out.ok();
        out.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn node_epoch(status: &serde_json::Value, node: &str) -> i64 {
    status["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == node))
        .and_then(|n| n["epoch"].as_i64())
        .unwrap_or_else(|| panic!("node {node} in {status}"))
}

/// Waits until the named nodes hold live leases (as the database says).
fn wait_live(asker: &Node, names: &[&str]) {
    wait_long("the nodes' leases", PATIENCE, || {
        let st = asker.status_soon();
        names.iter().all(|name| {
            st["nodes"].as_array().is_some_and(|n| {
                n.iter().any(|n| {
                    n["node"] == *name
                        && n["state"] == "live"
                        && n["lease_left_ms"].as_i64().is_some_and(|l| l > 0)
                })
            })
        })
    });
}

fn wait_long(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn cluster_each_occurrence_is_started_by_exactly_one_node() {
    let Some(pg) = pg::shared("cluster_each_occurrence_is_started_by_exactly_one_node") else {
        return;
    };
    let w = Witness::new();
    let file = cluster_file(
        &pg.url,
        "exactly-one",
        CALM,
        &format!(
            "[jobs.tick]\nschedule = \"@every 1s\"\ncommand = \"{line}\"\n\n\
             [jobs.slow]\nschedule = \"@every 1s\"\ncommand = \"{line}; sleep 1.5\"\noverlap = \"allow\"\n",
            line = w.line()
        ),
    );
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| Node::new(n, &file))
        .collect();
    for n in &mut nodes {
        n.start();
    }
    let distinct = |job: &str| {
        w.of(job)
            .iter()
            .map(|s| s.scheduled.clone())
            .collect::<BTreeSet<_>>()
            .len()
    };
    wait_long("8 occurrences of each job", PATIENCE * 2, || {
        distinct("tick") >= 8 && distinct("slow") >= 8
    });
    for n in &mut nodes {
        assert_eq!(n.daemon.take().expect("running").stop(), 0);
    }
    w.assert_no_duplicates();
    // Fences increase along each job's occurrences (claims are linearised
    // on the job's row).
    for job in ["tick", "slow"] {
        let mut starts = w.of(job);
        starts.sort_by(|a, b| a.scheduled.cmp(&b.scheduled));
        for pair in starts.windows(2) {
            assert!(pair[0].fence < pair[1].fence, "fences of {job}: {pair:?}");
        }
    }
    // The cluster-wide history, from any node, has each start once, with
    // its fence, and every run ended (the nodes left cleanly).
    let history = nodes[2].history("tick");
    for s in w.of("tick") {
        let rows: Vec<_> = history.iter().filter(|r| r["fence"] == s.fence).collect();
        assert_eq!(rows.len(), 1, "run with fence {} in {history:?}", s.fence);
        assert_eq!(rows[0]["status"], "succeeded", "{}", rows[0]);
        assert_eq!(rows[0]["detail"]["node"], s.node.as_str());
    }
    // A client with no daemon answers cluster-wide.
    let client = Node::new("client", &file);
    client.rea(&["logs", "tick"]).ok();
    let st = client.status();
    let states: Vec<(String, String)> = st["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap_or("").to_string(),
                n["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            ("a".into(), "left".into()),
            ("b".into(), "left".into()),
            ("c".into(), "left".into())
        ]
    );
}

/// Yearly: never due during a test (runs come from `rea trigger`).
const YEARLY: &str = "0 0 1 1 *";

fn history_where<'a>(
    h: &'a [serde_json::Value],
    f: impl Fn(&serde_json::Value) -> bool + 'a,
) -> Vec<&'a serde_json::Value> {
    h.iter().filter(|r| f(r)).collect()
}

#[test]
fn cluster_a_node_killed_mid_run_is_interrupted_and_retried_elsewhere_only_with_retry() {
    let Some(pg) = pg::shared("cluster_a_node_killed_mid_run") else {
        return;
    };
    let w = Witness::new();
    let file = cluster_file(
        &pg.url,
        "kill9",
        FAST,
        &format!(
            "[jobs.with-retry]\nschedule = \"{YEARLY}\"\ncommand = \"{line}; sleep 60\"\nretry = {{ attempts = 2, delay = \"100ms\" }}\n\n\
             [jobs.no-retry]\nschedule = \"{YEARLY}\"\ncommand = \"{line}; sleep 60\"\n",
            line = w.line()
        ),
    );
    let mut a = Node::new("a", &file);
    let mut b = Node::new("b", &file);
    a.start();
    b.start();
    wait_live(&a, &["a", "b"]);
    a.rea(&["trigger", "with-retry"]).ok();
    a.rea(&["trigger", "no-retry"]).ok();
    wait_until("both runs started on a", || {
        w.of("with-retry").len() == 1 && w.of("no-retry").len() == 1
    });
    assert!(w.starts().iter().all(|s| s.node == "a" && s.attempt == 1));
    a.daemon.take().expect("running").kill9();
    let killed = Instant::now();
    wait_long("a's runs recorded interrupted", PATIENCE, || {
        let h = b.history("with-retry");
        let h2 = b.history("no-retry");
        !history_where(&h, |r| r["status"] == "interrupted").is_empty()
            && !history_where(&h2, |r| r["status"] == "interrupted").is_empty()
    });
    eprintln!(
        "cluster: kill -9 -> both runs interrupted in {} ms (lease 1s, heartbeat 250ms, grace 250ms)",
        killed.elapsed().as_millis()
    );
    let retried = || w.of("with-retry").iter().any(|s| s.attempt == 2);
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("the retry started on b", retried)
    }))
    .is_err()
    {
        panic!(
            "no retry on b; b's log:\n{}\nhistory: {:?}\npending: {}",
            b.daemon().log_text(),
            b.history("with-retry"),
            pg.psql("select job, last_scheduled, prev_scheduled, active, first_seen from rea.jobs where cluster = 'kill9'")
        );
    }
    let retry: Vec<Start> = w
        .of("with-retry")
        .into_iter()
        .filter(|s| s.attempt == 2)
        .collect();
    assert_eq!(retry.len(), 1, "{retry:?}");
    assert_eq!(retry[0].node, "b", "the survivor retries it");
    assert!(retry[0].fence > w.of("with-retry")[0].fence, "a new fence");
    // The sweeper queued both jobs' retries (or not) in one transaction:
    // the one without `retry` has none.
    assert_eq!(w.of("no-retry").len(), 1, "{:?}", w.of("no-retry"));
    let h = b.history("no-retry");
    let interrupted = history_where(&h, |r| r["status"] == "interrupted");
    assert!(
        interrupted[0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("node a lost its lease"),
        "{}",
        interrupted[0]
    );
    w.assert_no_duplicates();
}

#[test]
fn cluster_a_frozen_node_is_declared_dead_and_its_late_writes_are_fenced() {
    let Some(pg) = pg::shared("cluster_a_frozen_node") else {
        return;
    };
    let w = Witness::new();
    let file = cluster_file(
        &pg.url,
        "frozen",
        FAST,
        &format!(
            "[jobs.tick]\nschedule = \"@every 1s\"\ncommand = \"{line}; sleep 2\"\noverlap = \"allow\"\n\n\
             [jobs.killer]\nschedule = \"{YEARLY}\"\ncommand = \"{line}; sleep 30\"\non_lease_lost = \"kill\"\n",
            line = w.line()
        ),
    );
    let mut a = Node::new("a", &file);
    let mut b = Node::new("b", &file);
    a.start();
    b.start();
    wait_live(&b, &["a", "b"]);
    a.rea(&["trigger", "killer"]).ok();
    wait_until("a started runs", || {
        w.of("tick").iter().any(|s| s.node == "a") && w.of("killer").len() == 1
    });
    let epoch = node_epoch(&b.status(), "a");
    a.daemon().signal(libc::SIGSTOP);
    // Frozen past its lease: b convicts it (its children go on running).
    wait_long("a declared dead", PATIENCE, || {
        let st = b.status();
        st["nodes"].as_array().is_some_and(|n| {
            n.iter()
                .any(|n| n["node"] == "a" && n["state"] == "convicted")
        })
    });
    let frozen_runs: Vec<Start> = w.of("tick").into_iter().filter(|s| s.node == "a").collect();
    a.daemon().signal(libc::SIGCONT);
    wait_long("a registered again", PATIENCE, || {
        let st = b.status();
        node_epoch(&st, "a") > epoch
            && st["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n["node"] == "a" && n["state"] == "live"))
    });
    let before = w.of("tick").len();
    wait_until("three more starts", || w.of("tick").len() >= before + 3);
    // a's runs of the old epoch were recorded interrupted by b; what they
    // really did arrived later and was kept aside (its writes are fenced).
    wait_long("a late report", PATIENCE, || {
        let h = b.history("tick");
        frozen_runs.iter().any(|s| {
            h.iter().any(|r| {
                r["fence"] == s.fence
                    && r["status"] == "interrupted"
                    && r["detail"]["late_report"]["status"] == "succeeded"
            })
        })
    });
    // on_lease_lost = "kill": a terminated its run when it found its lease
    // gone; the cluster had recorded it interrupted, the kill is the late
    // report.
    wait_long("the killer run's late report", PATIENCE, || {
        b.history("killer").iter().any(|r| {
            r["status"] == "interrupted" && r["detail"]["late_report"]["status"] == "killed"
        })
    });
    for n in [&mut a, &mut b] {
        assert_eq!(n.daemon.take().expect("running").stop(), 0);
    }
    w.assert_no_duplicates();
}

#[test]
fn cluster_a_database_restart_convicts_nobody_and_catches_up_once() {
    let Some(mut pg) = Pg::start("cluster_a_database_restart") else {
        return;
    };
    let w = Witness::new();
    let file = cluster_file(
        &pg.url(),
        "restart",
        CALM,
        &format!(
            "[jobs.once]\nschedule = \"@every 1s\"\ncommand = \"{line}\"\ncatch_up = \"once\"\n\n\
             [jobs.none]\nschedule = \"@every 1s\"\ncommand = \"{line}\"\n",
            line = w.line()
        ),
    );
    let mut a = Node::new("a", &file);
    let mut b = Node::new("b", &file);
    a.start();
    b.start();
    wait_until("a few starts", || {
        w.of("once").len() >= 3 && w.of("none").len() >= 3
    });
    let st = a.status();
    let epochs = (node_epoch(&st, "a"), node_epoch(&st, "b"));
    pg.crash();
    let lost = |n: &Node| n.daemon().log_text().contains("lease not renewed in time");
    wait_long("both nodes lost their lease", PATIENCE, || {
        lost(&a) && lost(&b)
    });
    let during = w.starts().len();
    // Still down: nothing can start without the database.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        w.starts().len(),
        during,
        "a run started without the database"
    );
    pg.launch();
    wait_until("runs again", || w.of("once").len() >= during / 2 + 4);
    let before = w.starts().len();
    wait_until("three more starts", || w.starts().len() >= before + 3);
    let st = a.status();
    assert_eq!(
        (node_epoch(&st, "a"), node_epoch(&st, "b")),
        epochs,
        "nobody was declared dead (no new registration): {st}"
    );
    assert_eq!(
        pg.psql("select count(*) from rea.events where kind = 'convicted'"),
        "0"
    );
    for n in [&mut a, &mut b] {
        assert_eq!(n.daemon.take().expect("running").stop(), 0);
    }
    w.assert_no_duplicates();
    let once = a.history("once");
    let catch_up = history_where(&once, |r| r["trigger"] == "catch_up");
    assert_eq!(catch_up.len(), 1, "caught up once: {catch_up:?}");
    let none = a.history("none");
    assert!(
        none.iter().any(|r| r["event"] == "missed"),
        "the missed occurrences of the job without catch_up are recorded"
    );
}

#[test]
fn cluster_a_node_whose_job_file_differs_is_flagged() {
    let Some(pg) = pg::shared("cluster_a_node_whose_job_file_differs") else {
        return;
    };
    let jobs = |cmd: &str| {
        cluster_file(
            &pg.url,
            "drift",
            CALM,
            &format!("[jobs.x]\nschedule = \"{YEARLY}\"\ncommand = \"{cmd}\"\n"),
        )
    };
    let mut nodes = vec![
        Node::new("a", &jobs("true")),
        Node::new("b", &jobs("true")),
        Node::new("c", &jobs("echo different")),
    ];
    for n in &mut nodes {
        n.start();
    }
    wait_long("three live nodes with definitions", PATIENCE, || {
        let st = nodes[0].status_soon();
        st["nodes"].as_array().is_some_and(|n| {
            n.len() == 3
                && n.iter()
                    .all(|n| n["state"] == "live" && n["digest"].is_string())
        })
    });
    let st = nodes[0].status();
    let differs: Vec<&str> = st["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["differs"] == true)
        .filter_map(|n| n["node"].as_str())
        .collect();
    assert_eq!(differs, vec!["c"]);
    assert!(st["jobs"][0]["drift"]["c"].is_string(), "{st}");
    nodes[1]
        .rea(&["status"])
        .ok()
        .stdout_has("DIFFERENT from the other nodes'")
        .stdout_has("DEFINITIONS DIFFER");
}

#[test]
fn cluster_one_shots_and_pauses_are_cluster_wide() {
    let Some(pg) = pg::shared("cluster_one_shots_and_pauses") else {
        return;
    };
    let w = Witness::new();
    let file = cluster_file(
        &pg.url,
        "shots",
        CALM,
        &format!(
            "[jobs.tick]\nschedule = \"@every 1s\"\ncommand = \"{line}\"\n",
            line = w.line()
        ),
    );
    let mut a = Node::new("a", &file);
    let mut b = Node::new("b", &file);
    a.start();
    b.start();
    wait_live(&a, &["a", "b"]);
    // One-shots submitted through a run once each, on either node.
    for i in 0..12 {
        a.rea(&[
            "submit",
            "--in",
            "1s",
            "--name",
            &format!("shot-{i}"),
            "--shell",
            "--",
            &w.line().replace("\\\"", "\""),
        ])
        .ok();
    }
    wait_until("every one-shot ran", || {
        (0..12).all(|i| !w.of(&format!("shot-{i}")).is_empty())
    });
    for i in 0..12 {
        assert_eq!(w.of(&format!("shot-{i}")).len(), 1, "shot-{i} ran once");
    }
    wait_until("no one-shot pending or running", || {
        b.rea(&["pending"])
            .ok()
            .stdout
            .contains("no pending one-shots")
    });
    let h = b.history("shot-0");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(
        (&h[0]["status"], &h[0]["trigger"]),
        (&"succeeded".into(), &"oneshot".into())
    );
    // A pause through b stops the job on every node.
    b.rea(&["pause", "tick"])
        .ok()
        .stdout_has("paused cluster-wide: tick");
    wait_long("a paused skip recorded", PATIENCE, || {
        b.history("tick").iter().any(|r| {
            r["status"] == "skipped" && r["reason"].as_str().is_some_and(|s| s.contains("paused"))
        })
    });
    let started = w.of("tick").len();
    let skipped = |n: &Node| {
        n.history("tick")
            .iter()
            .filter(|r| r["status"] == "skipped")
            .count()
    };
    let s0 = skipped(&b);
    wait_until("three more paused occurrences", || skipped(&b) >= s0 + 3);
    assert_eq!(w.of("tick").len(), started, "nothing started while paused");
    a.rea(&["resume", "tick"]).ok();
    wait_until("runs again", || w.of("tick").len() > started);
    for n in [&mut a, &mut b] {
        assert_eq!(n.daemon.take().expect("running").stop(), 0);
    }
    w.assert_no_duplicates();
}
