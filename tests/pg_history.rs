//! The history conformance kit on the cluster database: the records of
//! `rea_store::conformance::run_store` are written by a real
//! `rea_pg::Node` (its claims, its lease, its backlog and the statements
//! it sends for every run's start and end) and read back by
//! `rea_pg::Reader`, the reader of `rea history` and `rea logs` in cluster
//! mode. On the private PostgreSQL of `support::pg`, one cluster per case.
//!
//! What lives here is only what the daemon's engine does between the two:
//! it claims a run before it writes the run's first line, and writes its
//! lines with the grant's run id and fence (`cluster_run`, `fence`).

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use rea_core::claim::{ClaimMode, ClaimOutcome, ClaimRequest, Grant};
use rea_core::job::Overlap;
use rea_core::record::{Event as Line, Record, RunStatus, Trigger};
use rea_pg::{ClusterNode, JobDef, Node, NodeEvent, Reader, Settings};
use rea_store::claims::{ClaimAnswer, OccurrenceClaims};
use rea_store::conformance::{run_store, Fresh};
use rea_store::history::{HistoryWriter, WriterHealth};
use tokio::sync::mpsc;

use crate::support::pg;
use crate::support::PATIENCE;

/// The jobs of the kit's histories (`rea_store::conformance`), `allow`
/// so that every claim of one starts a run.
const JOBS: [&str; 4] = ["a", "b", "c", "a\"b"];

/// A history writer made of a node: what the daemon's loop and engine do
/// with a record in cluster mode, one record at a time.
struct NodeWriter {
    rt: tokio::runtime::Runtime,
    node: Node,
    claims: Box<dyn OccurrenceClaims>,
    events: mpsc::UnboundedReceiver<NodeEvent>,
    /// The store's grant of each of the kit's runs.
    grants: HashMap<String, Grant>,
}

impl NodeWriter {
    /// A node registered in `settings.cluster`, its jobs published.
    fn start(settings: Settings) -> NodeWriter {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (tx, events) = mpsc::unbounded_channel();
        let node = rt.block_on(async { Node::start(settings, tx) });
        let claims = node.claims();
        let mut w = NodeWriter {
            rt,
            node,
            claims,
            events,
            grants: HashMap::new(),
        };
        w.next_event(|e| matches!(e, NodeEvent::LeaseBack { .. }))
            .expect("the node holds a lease");
        w.node.publish(
            "kit".into(),
            JOBS.iter()
                .map(|j| JobDef {
                    name: j.to_string(),
                    digest: "kit".into(),
                    overlap: Overlap::Allow,
                })
                .collect(),
        );
        // In before the first claim: a new job's mark is the instant its
        // row is made.
        w.settle().expect("the jobs published");
        w
    }

    /// Waits for the node's next event that `want` takes.
    fn next_event(&mut self, want: impl Fn(&NodeEvent) -> bool) -> io::Result<NodeEvent> {
        let events = &mut self.events;
        self.rt.block_on(async {
            tokio::time::timeout(PATIENCE, async {
                while let Some(e) = events.recv().await {
                    if want(&e) {
                        return Ok(e);
                    }
                }
                Err(io::Error::other("the node stopped"))
            })
            .await
            .map_err(|_| io::Error::other("no answer from the node"))?
        })
    }

    /// The store's grant for the run of `rec` (as the engine claims a run
    /// it decided on this node: `manual`).
    fn claim(&mut self, id: &str, rec: &Record) -> io::Result<Grant> {
        let req = ClaimRequest {
            run: id.to_string(),
            job: rec.job.clone().unwrap_or_default(),
            scheduled: rec.scheduled.unwrap_or(rec.ts),
            attempt: rec.attempt.unwrap_or(1),
            trigger: rec.trigger.unwrap_or(Trigger::Manual),
            overlap: Overlap::Allow,
            mode: ClaimMode::Run,
            retry: None,
            count: 1,
        };
        match self.ask(&req)? {
            ClaimOutcome::Started { grant, .. } | ClaimOutcome::AlreadyYours { grant } => Ok(grant),
            other => Err(io::Error::other(format!("claim of {id}: {other:?}"))),
        }
    }

    /// Passes over the next occurrence of `rec`'s job, as a node does for
    /// `catch_up = "none"`: the claim records it `missed`. The occurrence
    /// is now (the store refuses one in its future, and one at or before
    /// the job's mark is another node's).
    fn miss(&mut self, id: &str, rec: &Record) -> io::Result<()> {
        let req = ClaimRequest {
            run: id.to_string(),
            job: rec.job.clone().unwrap_or_default(),
            scheduled: chrono::Utc::now(),
            attempt: 1,
            trigger: Trigger::Schedule,
            overlap: Overlap::Allow,
            mode: ClaimMode::Missed,
            retry: None,
            count: 1,
        };
        match self.ask(&req)? {
            ClaimOutcome::Missed => Ok(()),
            other => Err(io::Error::other(format!("missed claim of {id}: {other:?}"))),
        }
    }

    /// A claim's answer, now or as the node's event.
    fn ask(&mut self, req: &ClaimRequest) -> io::Result<ClaimOutcome> {
        Ok(match self.claims.claim(req) {
            ClaimAnswer::Now(outcome) => outcome,
            ClaimAnswer::Later => match self
                .next_event(|e| matches!(e, NodeEvent::Claimed { run, .. } if *run == req.run))?
            {
                NodeEvent::Claimed { outcome, .. } => outcome,
                _ => unreachable!("only a claim's answer is taken"),
            },
        })
    }

    /// Returns once the node has handled every record sent so far (a
    /// pause of no job, answered in order after them), and says whether
    /// the database took them all.
    fn settle(&mut self) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.node.pause(
            Some(Vec::new()),
            false,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        self.rt
            .block_on(async { tokio::time::timeout(PATIENCE, rx).await })
            .map_err(|_| io::Error::other("no answer from the node"))?
            .map_err(|_| io::Error::other("the node stopped"))?
            .map_err(io::Error::other)?;
        let health = self.node.health();
        if health.backlog > 0 || health.dropped > 0 {
            return Err(io::Error::other(format!(
                "the database did not take every record: {health:?}"
            )));
        }
        Ok(())
    }
}

impl HistoryWriter for NodeWriter {
    fn append(&mut self, record: &Record) -> io::Result<()> {
        let mut rec = record.clone();
        if rec.event == Line::Missed {
            self.miss(rec.run.as_deref().unwrap_or_default(), &rec)?;
        }
        if rec.event == Line::Run {
            let id = rec.run.clone().unwrap_or_default();
            let grant = match self.grants.get(&id) {
                Some(g) => *g,
                None => {
                    let g = self.claim(&id, &rec)?;
                    self.grants.insert(id, g);
                    g
                }
            };
            rec.cluster_run = Some(grant.run_id);
            rec.fence = Some(grant.fence);
        }
        // Every record goes to the node, as the daemon sends it: the node
        // keeps the starts and ends of granted runs, and nothing else.
        self.node.record(&rec);
        self.settle()
    }

    fn health(&self) -> WriterHealth {
        let h = self.node.health();
        WriterHealth {
            backlog: h.backlog,
            dropped: h.dropped,
            last_error: None,
        }
    }
}

#[test]
fn cluster_database_history_conforms_to_the_kit() {
    let Some(server) = pg::shared("cluster_database_history_conforms_to_the_kit") else {
        return;
    };
    let n = std::cell::Cell::new(0usize);
    run_store(16, || {
        let i = n.get();
        n.set(i + 1);
        let settings = Settings {
            url: server.url.clone(),
            cluster: format!("kit-{i}"),
            node: "kit".into(),
            host_id: "kit".into(),
            lease: Duration::from_secs(10),
            heartbeat: Duration::from_secs(1),
            grace: Duration::from_secs(1),
        };
        let writer = NodeWriter::start(settings.clone());
        let reader = Reader::connect(&settings).expect("reader");
        Fresh {
            writer: Box::new(writer),
            reader: Box::new(reader),
            keep: Box::new(()),
        }
    });
}

/// The statuses of a run that ran, from rea-core (not rea-pg's list: the
/// oracle below must not share what it checks), as an SQL list.
fn ran_sql() -> String {
    RunStatus::FINAL
        .iter()
        .filter(|s| **s != RunStatus::Skipped)
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each job of `cluster` as `job=run id` (`-`: no last run), three ways:
/// the probe `rea status` ran before migration 9 (the job's runs that ran,
/// the largest id), what `rea.last_runs` holds, and what `rea status`
/// shows now. Panics unless all three agree; returns the first.
fn last_runs(psql: &dyn Fn(&str) -> String, reader: &Reader, cluster: &str) -> Vec<String> {
    let ran = ran_sql();
    let lines = |s: String| -> Vec<String> { s.lines().map(str::to_string).collect() };
    let probed = lines(psql(&format!(
        "select j.job || '=' || coalesce(r.id::text, '-') from rea.jobs j
         left join lateral (select x.id from rea.runs x where x.cluster = j.cluster and x.job = j.job
              and x.status in ({ran}) order by x.id desc limit 1) r on true
         where j.cluster = '{cluster}' order by j.job"
    )));
    let table = lines(psql(&format!(
        "select j.job || '=' || coalesce(l.run_id::text, '-') from rea.jobs j
         left join rea.last_runs l on l.cluster = j.cluster and l.job = j.job
         where j.cluster = '{cluster}' order by j.job"
    )));
    let shown: Vec<String> = reader
        .status(None)
        .expect("rea status")
        .jobs
        .iter()
        .map(|j| {
            let id = j.last.as_ref().and_then(|r| r.cluster_run);
            format!("{}={}", j.job, id.map_or("-".into(), |i| i.to_string()))
        })
        .collect();
    assert_eq!(table, probed, "rea.last_runs is not each job's last run");
    assert_eq!(shown, probed, "rea status shows another last run");
    probed
}

/// `rea.last_runs` (migration 9, what `rea status` reads) follows every
/// change to the runs: runs inserted and ended, a status changed to one
/// that did not run (an operator's), runs deleted (a trim of the
/// history), each checked against the per-job probe it replaced.
#[test]
fn each_jobs_last_run_follows_the_runs() {
    let Some(server) = pg::shared("each_jobs_last_run_follows_the_runs") else {
        return;
    };
    let c = "last-runs";
    let settings = Settings {
        url: server.url.clone(),
        cluster: c.into(),
        node: "kit".into(),
        host_id: "kit".into(),
        lease: Duration::from_secs(10),
        heartbeat: Duration::from_secs(1),
        grace: Duration::from_secs(1),
    };
    let _writer = NodeWriter::start(settings.clone());
    let reader = Reader::connect(&settings).expect("reader");
    let psql = |sql: &str| server.psql(sql);
    // A run of `job` with `status`; its id.
    let run = |job: &str, status: &str| -> String {
        psql(&format!(
            "insert into rea.runs (cluster, job, trigger, status) values ('{c}', '{job}', 'manual', '{status}') returning id"
        ))
    };
    let a1 = run("a", "succeeded");
    run("a", "skipped");
    let a3 = run("a", "started");
    let b1 = run("b", "failed");
    run("c", "skipped");
    run("c", "missed");
    let want = |a: &str, b: &str| {
        vec![
            format!("a={a}"),
            "a\"b=-".into(),
            format!("b={b}"),
            "c=-".into(),
        ]
    };
    assert_eq!(last_runs(&psql, &reader, c), want(&a1, &b1));
    // Ended: the started run is the last now.
    psql(&format!(
        "update rea.runs set status = 'killed', ended_at = clock_timestamp() where id = {a3}"
    ));
    let b2 = run("b", "oom_killed");
    run("b", "started");
    assert_eq!(last_runs(&psql, &reader, c), want(&a3, &b2));
    // Its status changed to one that did not run: the one before it.
    psql(&format!(
        "update rea.runs set status = 'cancelled' where id = {a3}"
    ));
    assert_eq!(last_runs(&psql, &reader, c), want(&a1, &b2));
    // Deleted: the one before it, or none (the table's row goes too).
    psql(&format!("delete from rea.runs where id in ({a1}, {b2})"));
    assert_eq!(last_runs(&psql, &reader, c), want("-", &b1));
    assert_eq!(
        psql(&format!(
            "select count(*) from rea.last_runs where cluster = '{c}' and job = 'a'"
        )),
        "0"
    );
}

/// A database of schema version 8 with runs in it gets each job's last
/// run filled by migration 9 (a private server: the migration is undone
/// and applied again, which no other test may see).
#[test]
fn migration_9_fills_each_jobs_last_run() {
    let Some(server) = pg::Pg::start("migration_9_fills_each_jobs_last_run") else {
        return;
    };
    let c = "last-runs-fill";
    let settings = Settings {
        url: server.url(),
        cluster: c.into(),
        node: "kit".into(),
        host_id: "kit".into(),
        lease: Duration::from_secs(10),
        heartbeat: Duration::from_secs(1),
        grace: Duration::from_secs(1),
    };
    drop(NodeWriter::start(settings.clone()));
    // Back to version 8: what migration 9 made, gone.
    server.psql(
        "drop trigger last_runs_ran on rea.runs; drop trigger last_runs_unran on rea.runs;
         drop trigger last_runs_gone on rea.runs; drop trigger last_runs_truncated on rea.runs;
         drop table rea.last_runs; delete from rea.schema_version where version >= 9",
    );
    let psql = |sql: &str| server.psql(sql);
    let run = |job: &str, status: &str| -> String {
        psql(&format!(
            "insert into rea.runs (cluster, job, trigger, status) values ('{c}', '{job}', 'manual', '{status}') returning id"
        ))
    };
    let a = run("a", "interrupted");
    run("a", "started");
    let b = run("b", "timed_out");
    run("b", "skipped");
    run("c", "queued");
    // The next node's start applies migration 9 again.
    let _writer = NodeWriter::start(settings.clone());
    let reader = Reader::connect(&settings).expect("reader");
    assert_eq!(
        last_runs(&psql, &reader, c),
        vec![
            format!("a={a}"),
            "a\"b=-".into(),
            format!("b={b}"),
            "c=-".into()
        ]
    );
}
