//! Run starts and ends: a history record of a run the store granted
//! becomes a write ([`write_of`]), kept in order in the bounded backlog
//! and flushed while the database takes it — pipelined, then one at a
//! time for the first write whose answer is not the common one (the lease
//! not live yet, an end the cluster no longer takes: a late report).
//!
//! Not here: the backlog's bounds (`crate::backlog`), and runs' claims
//! (`claims.rs`).

use rea_core::record::{Record, RunStatus};
use serde_json::Value;
use tokio_postgres::Statement;
use tracing::{error, warn};

use super::lock;
use super::statements::{pipelined, run_status, within, Stmts, P};
use super::task::Main;
use crate::backlog::Weighed;

/// Run starts and ends sent together by one flush of the backlog.
pub(super) const FLUSH_BATCH: usize = 64;

/// A write of this node's, waiting in order.
pub(super) enum Write {
    Started {
        run_id: i64,
        pid: i32,
        detail: Value,
    },
    Ended {
        run_id: i64,
        /// As the statements take it (`RunStatus::as_str`).
        status: &'static str,
        exit_code: Option<i32>,
        signal: Option<i32>,
        reason: Option<String>,
        detail: Value,
        output: Option<(String, i64)>,
        retry_delay_ms: Option<i64>,
    },
}

impl Weighed for Write {
    fn weight(&self) -> usize {
        let detail = |d: &Value| d.to_string().len();
        match self {
            Write::Started { detail: d, .. } => std::mem::size_of::<Write>() + detail(d),
            Write::Ended {
                detail: d,
                output,
                reason,
                ..
            } => {
                std::mem::size_of::<Write>()
                    + detail(d)
                    + output.as_ref().map_or(0, |(o, _)| o.len())
                    + reason.as_ref().map_or(0, String::len)
            }
        }
    }
}

impl Write {
    pub(super) fn run_id(&self) -> i64 {
        match self {
            Write::Started { run_id, .. } | Write::Ended { run_id, .. } => *run_id,
        }
    }

    /// The statement that records it.
    pub(super) fn statement<'s>(&self, st: &'s Stmts) -> &'s Statement {
        match self {
            Write::Started { .. } => &st.run_started,
            Write::Ended { .. } => &st.run_ended,
        }
    }

    /// That statement's parameters, for the node `cluster`/`node` in `epoch`.
    pub(super) fn params<'a>(
        &'a self,
        cluster: &'a String,
        node: &'a String,
        epoch: &'a i64,
    ) -> Vec<P<'a>> {
        match self {
            Write::Started {
                run_id,
                pid,
                detail,
            } => vec![cluster, node, epoch, run_id, pid, detail],
            Write::Ended {
                run_id,
                status,
                exit_code,
                signal,
                reason,
                detail,
                retry_delay_ms,
                ..
            } => vec![
                cluster,
                node,
                epoch,
                run_id,
                status,
                exit_code,
                signal,
                reason,
                detail,
                retry_delay_ms,
            ],
        }
    }
}

/// The store's write for a history record of a granted run.
pub(super) fn write_of(rec: &Record) -> Option<Write> {
    let run_id = rec.cluster_run?;
    let status = rec.status?;
    let mut detail = serde_json::to_value(rec).ok()?;
    if let Some(o) = detail.as_object_mut() {
        o.remove("output");
    }
    if status == RunStatus::Started {
        return Some(Write::Started {
            run_id,
            pid: rec.pid.unwrap_or(0) as i32,
            detail,
        });
    }
    let retry_delay_ms = rec
        .retry_at()
        .map(|t| (t - rec.ts).num_milliseconds().max(0));
    Some(Write::Ended {
        run_id,
        status: status.as_str(),
        exit_code: rec.exit_code,
        signal: rec.signal,
        reason: rec.reason.clone(),
        detail,
        output: rec
            .output
            .clone()
            .map(|o| (o, rec.output_bytes.unwrap_or(0) as i64)),
        retry_delay_ms,
    })
}

impl Main {
    /// A run start or end into the backlog (false: not one of those).
    pub(super) fn enqueue(&mut self, rec: &Record) -> bool {
        let Some(w) = write_of(rec) else {
            return false;
        };
        let dropped = self.backlog.push(w);
        if dropped > 0 {
            lock(&self.shared).dropped += dropped;
        }
        true
    }

    /// Writes the backlog in order while the database takes it.
    pub(super) async fn flush(&mut self) {
        while let Some(w) = self.backlog.front() {
            let run_id = w.run_id();
            let Some(live) = self.live_epoch() else {
                break;
            };
            if self.backlog.len() > 1 && self.flush_pipelined(live).await > 0 {
                continue;
            }
            let epoch = self.run_epochs.get(&run_id).copied().unwrap_or(live);
            match self.write(epoch).await {
                Ok(true) => {
                    if let Some(Write::Ended { .. }) = self.backlog.pop_front() {
                        self.run_epochs.remove(&run_id);
                    }
                }
                Ok(false) => break,
                Err(m) => {
                    self.fail(&format!("run {run_id}: {m}"));
                    break;
                }
            }
        }
        lock(&self.shared).backlog = self.backlog.len();
    }

    /// The backlog's first writes (up to [`FLUSH_BATCH`]) sent together,
    /// their answers taken in order while each is the common one (the
    /// start or end recorded; an end's output is then written, pipelined
    /// too). Returns how many were done and removed from the front; the
    /// first that was not is left to [`Main::write`], which may send its
    /// statement again: every write is conditional on the run's state, so
    /// a second send changes nothing (an end already recorded is found
    /// ended, and its output written then).
    pub(super) async fn flush_pipelined(&mut self, live: i64) -> usize {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        // Without a connection, the one-at-a-time way connects (or says
        // why it cannot).
        let Some((c, st)) = &self.conn else {
            return 0;
        };
        let n = self.backlog.len().min(FLUSH_BATCH);
        let epochs: Vec<i64> = self
            .backlog
            .iter()
            .take(n)
            .map(|w| self.run_epochs.get(&w.run_id()).copied().unwrap_or(live))
            .collect();
        let params: Vec<(bool, Vec<P<'_>>)> = self
            .backlog
            .iter()
            .take(n)
            .zip(&epochs)
            .map(|(w, epoch)| {
                (
                    matches!(w, Write::Started { .. }),
                    w.params(&cluster, &node, epoch),
                )
            })
            .collect();
        let answers = pipelined(
            self.backlog
                .iter()
                .zip(&params)
                .map(|(w, (_, p))| within(io, c.query_opt(w.statement(st), p)))
                .collect(),
        )
        .await;
        // The common answers, in order, up to the first other one.
        let mut done = 0;
        for (a, (started, _)) in answers.iter().zip(&params) {
            let common = match a {
                Ok(Some(row)) => *started || row.get::<_, bool>(0),
                _ => false,
            };
            if !common {
                break;
            }
            done += 1;
        }
        let outputs: Vec<[P<'_>; 3]> = self
            .backlog
            .iter()
            .take(done)
            .filter_map(|w| match w {
                Write::Ended {
                    run_id,
                    output: Some((text, bytes)),
                    ..
                } => Some([run_id as P<'_>, text, bytes]),
                _ => None,
            })
            .collect();
        let written = pipelined(
            outputs
                .iter()
                .map(|p| within(io, c.execute(&st.run_output, p)))
                .collect(),
        )
        .await;
        if let Some(Err(m)) = written.into_iter().find(|r| r.is_err()) {
            // Their ends are recorded; sent again, each is found ended and
            // its output written then.
            self.fail(&format!("run output: {m}"));
            return 0;
        }
        for _ in 0..done {
            if let Some(Write::Ended { run_id, .. }) = self.backlog.pop_front() {
                self.run_epochs.remove(&run_id);
            }
        }
        lock(&self.shared).backlog = self.backlog.len();
        done
    }

    /// The backlog's first write. Ok(true): done with it; Ok(false): keep
    /// it (the lease is not live in the database yet).
    pub(super) async fn write(&mut self, epoch: i64) -> Result<bool, String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        self.conn().await?;
        let Some(w) = self.backlog.front() else {
            return Ok(true);
        };
        let Some((c, st)) = &self.conn else {
            return Err("no connection".into());
        };
        let answer = within(
            io,
            c.query_opt(w.statement(st), &w.params(&cluster, &node, &epoch)),
        )
        .await?;
        match w {
            Write::Started { run_id, .. } => {
                if answer.is_some() {
                    return Ok(true);
                }
                Ok(run_status(c, *run_id, io).await?.as_deref() != Some("started"))
            }
            Write::Ended {
                run_id,
                status,
                exit_code,
                output,
                ..
            } => {
                let ended = answer.is_some_and(|row| row.get::<_, bool>(0));
                if ended {
                    if let Some((text, bytes)) = output {
                        within(io, c.execute(&st.run_output, &[run_id, text, bytes])).await?;
                    }
                    return Ok(true);
                }
                match run_status(c, *run_id, io).await?.as_deref() {
                    Some("interrupted") => {
                        // The cluster declared this node dead while the run
                        // ran and acted on it: keep what really happened
                        // beside the status it acted on.
                        let code = *exit_code;
                        within(
                            io,
                            c.query_opt(
                                &st.late_report,
                                &[&cluster, &node, &epoch, run_id, status, &code],
                            ),
                        )
                        .await?;
                        warn!(
                            run = run_id,
                            status = *status,
                            "cluster: the run had been recorded as interrupted (this node was declared dead); its real end is kept as a late report"
                        );
                        Ok(true)
                    }
                    Some("started") => Ok(false),
                    Some(_) => {
                        // Ended already: by this very write, sent before
                        // (pipelined, or before a lost connection) — its
                        // output may not be in yet.
                        if let Some((text, bytes)) = output {
                            within(io, c.execute(&st.run_output, &[run_id, text, bytes])).await?;
                        }
                        Ok(true)
                    }
                    None => {
                        error!(
                            run = run_id,
                            "cluster: the database has no such run (lost in a failover?); its end is only in this node's history"
                        );
                        Ok(true)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use rea_core::record::{Event, Trigger};

    use super::*;

    fn granted(status: RunStatus) -> Record {
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
        let mut r = Record::new(Event::Run, at);
        r.job = Some("sync".into());
        r.run = Some("local-1".into());
        r.trigger = Some(Trigger::Schedule);
        r.status = Some(status);
        r.cluster_run = Some(7);
        r.fence = Some(99);
        r.pid = Some(4242);
        r
    }

    /// A start is the run's pid and the node's record, whose output (if
    /// any) is never sent with it.
    #[test]
    fn a_started_record_is_a_start_with_its_pid_and_without_output() {
        let mut r = granted(RunStatus::Started);
        r.output = Some("early".into());
        let Some(Write::Started {
            run_id,
            pid,
            detail,
        }) = write_of(&r)
        else {
            panic!("a start");
        };
        assert_eq!((run_id, pid), (7, 4242));
        assert_eq!(detail["job"], "sync");
        assert_eq!(detail["cluster_run"], 7);
        assert!(detail.get("output").is_none());
    }

    /// An end carries what the statement records in columns (status, exit,
    /// reason), the output apart (its own table), and the retry the engine
    /// decided as a delay from the record's instant.
    #[test]
    fn an_ended_record_is_an_end_with_its_output_apart_and_its_retry_as_a_delay() {
        let mut r = granted(RunStatus::Failed);
        r.exit_code = Some(3);
        r.reason = Some("exit 3".into());
        r.output = Some("boom".into());
        r.output_bytes = Some(70_000);
        r.set_retry_at(r.ts + chrono::Duration::milliseconds(1500));
        let Some(w @ Write::Ended { .. }) = write_of(&r) else {
            panic!("an end");
        };
        let Write::Ended {
            run_id,
            status,
            exit_code,
            signal,
            reason,
            detail,
            output,
            retry_delay_ms,
        } = &w
        else {
            unreachable!()
        };
        assert_eq!(*run_id, 7);
        assert_eq!(*status, "failed");
        assert_eq!((*exit_code, *signal), (Some(3), None));
        assert_eq!(reason.as_deref(), Some("exit 3"));
        assert!(detail.get("output").is_none());
        assert_eq!(detail["output_bytes"], 70_000);
        assert_eq!(output, &Some(("boom".to_string(), 70_000)));
        assert_eq!(*retry_delay_ms, Some(1500));
        assert!(w.weight() >= "boom".len() + "exit 3".len());
    }

    /// A retry due before the record's instant (a clock step) is due at
    /// once, never a negative delay; no retry, no delay.
    #[test]
    fn a_retry_in_the_past_is_due_at_once() {
        let mut r = granted(RunStatus::TimedOut);
        assert!(matches!(
            write_of(&r),
            Some(Write::Ended {
                retry_delay_ms: None,
                ..
            })
        ));
        r.set_retry_at(r.ts - chrono::Duration::seconds(5));
        assert!(matches!(
            write_of(&r),
            Some(Write::Ended {
                retry_delay_ms: Some(0),
                ..
            })
        ));
    }

    /// Only starts and ends of runs the store granted are the store's.
    #[test]
    fn records_of_runs_the_store_did_not_grant_are_not_written() {
        let mut r = granted(RunStatus::Succeeded);
        r.cluster_run = None;
        assert!(write_of(&r).is_none());
        let mut missed = granted(RunStatus::Succeeded);
        missed.status = None;
        assert!(write_of(&missed).is_none());
    }

    /// Each statement gets the parameters its SQL numbers: a start six,
    /// an end ten, both led by the node's (cluster, node, epoch).
    #[test]
    fn each_write_has_its_statements_parameters() {
        let (cluster, node, epoch) = ("c".to_string(), "n".to_string(), 5i64);
        let start = write_of(&granted(RunStatus::Started)).expect("start");
        let end = write_of(&granted(RunStatus::Succeeded)).expect("end");
        assert_eq!(start.params(&cluster, &node, &epoch).len(), 6);
        assert_eq!(end.params(&cluster, &node, &epoch).len(), 10);
        assert_eq!((start.run_id(), end.run_id()), (7, 7));
        let sql = |path: &str| {
            let text = match path {
                "started" => super::super::statements::RUN_STARTED,
                _ => super::super::statements::RUN_ENDED,
            };
            (1..=20)
                .filter(|i| text.contains(&format!("${i}::")))
                .count()
        };
        assert_eq!(sql("started"), 6);
        assert_eq!(sql("ended"), 10);
    }
}
