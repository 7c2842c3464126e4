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

/// Test timings: lease 1s, heartbeat 250ms, grace 250ms.
const FAST: &str = "lease = \"1s\"\nheartbeat = \"250ms\"\ngrace = \"250ms\"\n";

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
    /// runs' processes behind, as the design says).
    fn kill_leftovers(&self) {
        for s in self.starts() {
            // SAFETY: kill(2) with plain integers; a stale pid is an error
            // return.
            unsafe {
                libc::kill(-s.pid, libc::SIGKILL);
                libc::kill(s.pid, libc::SIGKILL);
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
        FAST,
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
