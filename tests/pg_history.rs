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
use rea_core::record::{Event as Line, Record, Trigger};
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
