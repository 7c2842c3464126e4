//! The main task: its state, its loop over the daemon's commands (claims
//! above all, then the tick's housekeeping and the one-shots' poll),
//! commands of one kind that arrived together taken as one batch, its
//! connection, and what each command leads to.
//!
//! Not here: the statements each command sends (`claims.rs`, `runs.rs`,
//! `oneshots.rs`, `jobs.rs`, `sweeper.rs`), but for the one that frees the
//! node's name when it leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rea_store::cluster::{JobDef, NodeEvent};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::Client;
use tracing::{info, warn};

use super::oneshots::SUBMIT_BATCH;
use super::runs::{Write, FLUSH_BATCH};
use super::statements::{within, Stmts, LEAVE};
use super::{lock, note_error, Cmd, Shared};
use crate::backlog::Backlog;
use crate::settings::Settings;

pub(super) struct Main {
    pub(super) s: Settings,
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) events: mpsc::UnboundedSender<NodeEvent>,
    pub(super) conn: Option<(Client, Stmts)>,
    pub(super) io: Duration,
    pub(super) backlog: Backlog<Write>,
    /// The epoch under which each granted run was claimed (its writes must
    /// name it: a later epoch does not own it).
    pub(super) run_epochs: HashMap<i64, i64>,
    pub(super) config: Option<(String, Vec<JobDef>)>,
    pub(super) published: Option<i64>,
    /// When to poll for due one-shots before the next tick: at once (the
    /// last poll took a full batch), or at the earliest due one-shot.
    pub(super) oneshot_poll: Option<Instant>,
}

pub(super) async fn main_loop(
    s: Settings,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<NodeEvent>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    mut submits: mpsc::UnboundedReceiver<Cmd>,
    slots: Arc<tokio::sync::Notify>,
) {
    let io = s.lease.max(Duration::from_millis(500));
    let mut tick = tokio::time::interval(s.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut m = Main {
        s,
        shared,
        events,
        conn: None,
        io,
        backlog: Backlog::new(),
        run_epochs: HashMap::new(),
        config: None,
        published: None,
        oneshot_poll: None,
    };
    loop {
        // Due one-shots are polled between ticks only while this node has
        // free slots.
        let poll = m.oneshot_poll.filter(|_| lock(&m.shared).free_slots > 0);
        tokio::select! {
            // Submissions first (a submitter waits for its answer; claims
            // waiting behind it are at most one statement later), then
            // commands (claims above all) before the tick's housekeeping.
            biased;
            Some(Cmd::Submit { shot, reply }) = submits.recv() => {
                // Submissions that arrived together are made durable by
                // one statement (one commit, one WAL flush).
                let (batch, _) = gather(&mut submits, (shot, reply), SUBMIT_BATCH, |c| match c {
                    Cmd::Submit { shot, reply } => Ok((shot, reply)),
                    other => Err(Box::new(other)),
                });
                m.submit(batch).await;
                // Then one command's batch, if any waits: a stream of
                // submissions never starves claims.
                if let Ok(cmd) = rx.try_recv() {
                    m.command(cmd, &mut rx).await;
                }
            }
            cmd = rx.recv() => match cmd {
                None => return,
                Some(cmd) => m.command(cmd, &mut rx).await,
            },
            _ = tick.tick() => m.tick().await,
            () = sleep_until_opt(poll), if poll.is_some() => m.poll_oneshots().await,
            // Slots free again: the next turn arms the due one-shots' poll
            // (if any are due: nothing to ask otherwise).
            () = slots.notified() => {}
        }
    }
}

impl Main {
    /// A command from the daemon, with those of its kind already waiting
    /// behind it taken as one batch.
    async fn command(&mut self, cmd: Cmd, rx: &mut mpsc::UnboundedReceiver<Cmd>) {
        match cmd {
            Cmd::Claim(req) => {
                // Claims that arrived together go out pipelined.
                let (batch, next) = gather(rx, req, 64, |c| match c {
                    Cmd::Claim(r) => Ok(r),
                    other => Err(Box::new(other)),
                });
                self.claims(batch).await;
                if let Some(cmd) = next {
                    self.handle(cmd).await;
                }
            }
            Cmd::Record(rec) => {
                // Starts and ends that arrived together are written
                // pipelined (in order: a run's start before its end).
                let (batch, next) = gather(rx, rec, FLUSH_BATCH, |c| match c {
                    Cmd::Record(rec) => Ok(rec),
                    other => Err(Box::new(other)),
                });
                let mut any = false;
                for rec in &batch {
                    any |= self.enqueue(rec);
                }
                if any {
                    self.flush().await;
                }
                if let Some(cmd) = next {
                    self.handle(cmd).await;
                }
            }
            cmd => self.handle(cmd).await,
        }
    }
}

/// `first` and the commands of its kind already waiting behind it (at most
/// `max` in all), to be sent together; and the first command of another
/// kind, which ends the batch and is handled after it.
pub(super) fn gather<T>(
    rx: &mut mpsc::UnboundedReceiver<Cmd>,
    first: T,
    max: usize,
    same: impl Fn(Cmd) -> Result<T, Box<Cmd>>,
) -> (Vec<T>, Option<Cmd>) {
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv().map(&same) {
            Ok(Ok(t)) => batch.push(t),
            Ok(Err(other)) => return (batch, Some(*other)),
            Err(_) => break,
        }
    }
    (batch, None)
}

impl Main {
    pub(super) fn live_epoch(&self) -> Option<i64> {
        lock(&self.shared).live_epoch()
    }

    pub(super) fn fail(&mut self, m: &str) {
        warn!("cluster: {m}");
        note_error(&self.shared, m);
        self.conn = None;
    }

    pub(super) async fn conn(&mut self) -> Result<&(Client, Stmts), String> {
        if self.conn.is_none() {
            let c = self.s.connect("rea node").await?;
            let stmts = Stmts::prepare(&c).await?;
            self.conn = Some((c, stmts));
        }
        self.conn
            .as_ref()
            .ok_or_else(|| "no connection".to_string())
    }

    pub(super) async fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Claim(req) => {
                let outcome = self.claim(&req).await;
                let _ = self.events.send(NodeEvent::Claimed {
                    run: req.run,
                    outcome,
                });
            }
            Cmd::Record(rec) => {
                if self.enqueue(&rec) {
                    self.flush().await;
                }
            }
            Cmd::Publish { digest, jobs } => {
                self.config = Some((digest, jobs));
                self.published = None;
                if let Some(epoch) = self.live_epoch() {
                    self.publish(epoch).await;
                }
            }
            Cmd::Submit { shot, reply } => self.submit(vec![(shot, reply)]).await,
            Cmd::Pause {
                jobs,
                paused,
                reply,
            } => {
                let r = self.pause(jobs, paused).await;
                reply(r);
            }
            Cmd::Alert {
                job,
                kind,
                raised,
                no_success_ms,
                reply,
            } => {
                let r = self.alert(&job, &kind, raised, no_success_ms).await;
                reply(r);
            }
            Cmd::Leave { reply } => {
                self.flush().await;
                let left = match (self.live_epoch(), self.backlog.is_empty()) {
                    (Some(epoch), true) => {
                        let (cluster, node) = (self.s.cluster.clone(), self.s.node.clone());
                        let io = self.io;
                        match self.conn().await {
                            Ok((c, _)) => {
                                within(io, c.query_opt(LEAVE, &[&cluster, &node, &epoch]))
                                    .await
                                    .map(|r| r.is_some())
                                    .unwrap_or(false)
                            }
                            Err(_) => false,
                        }
                    }
                    _ => false,
                };
                if left {
                    info!(node = self.s.node.as_str(), "cluster: left the cluster");
                } else if !self.backlog.is_empty() {
                    warn!(
                        records = self.backlog.len(),
                        "cluster: stopping with run records the database has not taken; the runs will be recorded as interrupted"
                    );
                }
                let _ = reply.send(left);
            }
        }
    }

    pub(super) async fn tick(&mut self) {
        let Some(epoch) = self.live_epoch() else {
            return;
        };
        if self.published != Some(epoch) {
            self.publish(epoch).await;
        }
        self.flush().await;
        if let Err(m) = self.pending_work(epoch).await {
            self.fail(&m);
        }
    }
}

/// Sleeps until `at` (never, without one).
pub(super) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use rea_core::record::{Event, Record};

    use super::*;

    fn record(job: &str) -> Cmd {
        let mut r = Record::new(Event::Run, chrono::Utc::now());
        r.job = Some(job.into());
        Cmd::Record(Box::new(r))
    }

    fn job_of(rec: &Record) -> &str {
        rec.job.as_deref().unwrap_or_default()
    }

    fn records(cmd: Cmd) -> Result<Box<Record>, Box<Cmd>> {
        match cmd {
            Cmd::Record(r) => Ok(r),
            other => Err(Box::new(other)),
        }
    }

    /// Commands of one kind waiting behind the first go together; the
    /// first of another kind ends the batch and is handed back, and what
    /// is behind it stays queued, in order.
    #[test]
    fn a_batch_ends_at_the_first_command_of_another_kind() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for cmd in [record("b"), record("c")] {
            tx.send(cmd).expect("send");
        }
        tx.send(Cmd::Publish {
            digest: "d".into(),
            jobs: Vec::new(),
        })
        .expect("send");
        tx.send(record("d")).expect("send");
        let Ok(first) = records(record("a")) else {
            unreachable!()
        };
        let (batch, next) = gather(&mut rx, first, 64, records);
        let jobs: Vec<&str> = batch.iter().map(|r| job_of(r)).collect();
        assert_eq!(jobs, ["a", "b", "c"]);
        assert!(matches!(next, Some(Cmd::Publish { .. })));
        let Ok(Cmd::Record(rest)) = rx.try_recv() else {
            panic!("the record behind stays queued");
        };
        assert_eq!(job_of(&rest), "d");
    }

    /// At most `max` go together; the rest wait for the next batch.
    #[test]
    fn a_batch_holds_at_most_max() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for job in ["b", "c", "d"] {
            tx.send(record(job)).expect("send");
        }
        let Ok(first) = records(record("a")) else {
            unreachable!()
        };
        let (batch, next) = gather(&mut rx, first, 2, records);
        assert_eq!(batch.len(), 2);
        assert!(next.is_none());
        let Ok(first) = records(record("x")) else {
            unreachable!()
        };
        let (batch, next) = gather(&mut rx, first, 64, records);
        let jobs: Vec<&str> = batch.iter().map(|r| job_of(r)).collect();
        assert_eq!(jobs, ["x", "c", "d"]);
        assert!(next.is_none());
    }
}
