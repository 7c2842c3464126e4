//! Claims: of a scheduled occurrence (the high-water mark on the job's
//! row) or of a run this node decided (manual, dependency, reboot: the
//! overlap decision and a fence only), answered to the daemon as events;
//! claims that arrived together are sent pipelined.
//!
//! Not here: runs the store hands out (retries, queued occurrences:
//! `sweeper.rs`; one-shots: `oneshots.rs`).

use chrono::{DateTime, Utc};
use rea_core::claim::{ClaimMode, ClaimOutcome, ClaimRequest, Grant};
use rea_core::record::Trigger;
use rea_store::cluster::NodeEvent;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::statements::{pipelined, retry_json, within, P};
use super::task::Main;

/// A claim more than this in the database clock's future is refused
/// (`early`): the daemon re-queues the occurrence for its instant.
pub(super) const MAX_EARLY_MS: i32 = rea_store::clock::TOLERANCE_MS as i32;

impl Main {
    /// Claims of scheduled occurrences that arrived together (8 jobs due
    /// in the same second): sent pipelined on the one connection, so the
    /// last waits one round trip, not eight. Anything unusual (an error)
    /// goes through [`Main::claim`] alone.
    pub(super) async fn claims(&mut self, batch: Vec<ClaimRequest>) {
        self.flush_before_claiming().await;
        let together = batch.len() > 1
            && batch
                .iter()
                .all(|r| matches!(r.trigger, Trigger::Schedule | Trigger::CatchUp));
        let epoch = self.live_epoch();
        if !together || epoch.is_none() || self.conn.is_none() {
            for req in batch {
                let outcome = self.claim(&req).await;
                let _ = self.events.send(NodeEvent::Claimed {
                    run: req.run,
                    outcome,
                });
            }
            return;
        }
        let epoch = epoch.unwrap_or_default();
        if self.published != Some(epoch) {
            self.publish(epoch).await;
        }
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let params: Vec<ClaimParams> = batch.iter().map(ClaimParams::of).collect();
        let results = match &self.conn {
            Some((c, st)) => {
                let arrays: Vec<[P<'_>; 12]> = batch
                    .iter()
                    .zip(&params)
                    .map(|(req, p)| -> [P<'_>; 12] {
                        [
                            &cluster,
                            &node,
                            &epoch,
                            &req.job,
                            &req.scheduled,
                            &p.trigger,
                            &p.overlap,
                            &p.retry,
                            &p.mode,
                            &MAX_EARLY_MS,
                            &p.count,
                            &req.run,
                        ]
                    })
                    .collect();
                let futs: Vec<_> = arrays
                    .iter()
                    .map(|a| within(io, c.query_one(&st.claim, a)))
                    .collect();
                pipelined(futs).await
            }
            None => Vec::new(),
        };
        let mut again = Vec::new();
        for (req, result) in batch.into_iter().zip(results) {
            let outcome = match result {
                Ok(row) => {
                    let outcome: String = row.get(0);
                    self.outcome(
                        epoch,
                        &outcome,
                        row.get(1),
                        row.get(2),
                        row.get(3),
                        row.get(5),
                    )
                }
                Err(_) => None,
            };
            match outcome {
                Some(outcome) => {
                    let _ = self.events.send(NodeEvent::Claimed {
                        run: req.run,
                        outcome,
                    });
                }
                None => again.push(req),
            }
        }
        for req in again {
            let outcome = self.claim(&req).await;
            let _ = self.events.send(NodeEvent::Claimed {
                run: req.run,
                outcome,
            });
        }
    }

    /// A claim's answer; None for unknown answers (asked again alone).
    pub(super) fn outcome(
        &mut self,
        epoch: i64,
        outcome: &str,
        run_id: Option<i64>,
        fence: Option<i64>,
        prev: Option<DateTime<Utc>>,
        reason: Option<String>,
    ) -> Option<ClaimOutcome> {
        let grant = run_id
            .zip(fence)
            .map(|(run_id, fence)| Grant { run_id, fence });
        Some(match (outcome, grant) {
            ("started", Some(grant)) => {
                self.run_epochs.insert(grant.run_id, epoch);
                ClaimOutcome::Started {
                    grant,
                    prev_scheduled: prev,
                }
            }
            ("already_yours", Some(grant)) => {
                self.run_epochs.insert(grant.run_id, epoch);
                ClaimOutcome::AlreadyYours { grant }
            }
            ("skipped", _) => ClaimOutcome::Skipped {
                reason: reason.unwrap_or_else(|| "skipped by the cluster".into()),
            },
            ("queued", _) => ClaimOutcome::Queued,
            ("missed", _) => ClaimOutcome::Missed,
            ("lost", _) => ClaimOutcome::Lost,
            ("no_lease", _) => ClaimOutcome::NoLease,
            ("early", _) => ClaimOutcome::Early,
            _ => return None,
        })
    }

    /// This node's starts and ends still waiting (the database was away)
    /// are written before a claim: the claim decides a job's overlap on
    /// the runs the database counts as active, and a run of this node's
    /// that ended during an outage is active there until its end is
    /// written. Without this, the catch-up right after an outage found
    /// the job "still running" and skipped what it was to catch up.
    async fn flush_before_claiming(&mut self) {
        if !self.backlog.is_empty() && self.live_epoch().is_some() {
            self.flush().await;
        }
    }

    pub(super) async fn claim(&mut self, req: &ClaimRequest) -> ClaimOutcome {
        let Some(epoch) = self.live_epoch() else {
            return ClaimOutcome::NoLease;
        };
        self.flush_before_claiming().await;
        if self.published != Some(epoch) {
            self.publish(epoch).await;
        }
        let adopt = matches!(
            req.trigger,
            Trigger::Manual | Trigger::Dependency | Trigger::Reboot
        );
        let ClaimParams {
            count,
            trigger,
            overlap,
            retry,
            mode,
        } = ClaimParams::of(req);
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        // A connection that broke while idle (the server restarted) fails
        // its next statement at once: one more try on a fresh one.
        let mut fresh = self.conn.is_none();
        loop {
            let result = match self.conn().await {
                Err(m) => Err(m),
                Ok((c, st)) => {
                    // Adopting takes the claim's first eight parameters and
                    // the run id, and answers (outcome, run, fence, reason);
                    // a claim also says which occurrence it superseded,
                    // before its reason.
                    let params: [&(dyn ToSql + Sync); 12] = [
                        &cluster,
                        &node,
                        &epoch,
                        &req.job,
                        &req.scheduled,
                        &trigger,
                        &overlap,
                        &retry,
                        &mode,
                        &MAX_EARLY_MS,
                        &count,
                        &req.run,
                    ];
                    let adopt_params: [&(dyn ToSql + Sync); 9] = [
                        params[0], params[1], params[2], params[3], params[4], params[5],
                        params[6], params[7], &req.run,
                    ];
                    let (statement, params, prev_col, reason_col) = if adopt {
                        (&st.adopt, &adopt_params[..], None, 3)
                    } else {
                        (&st.claim, &params[..], Some(3), 5)
                    };
                    within(io, c.query_one(statement, params)).await.map(|row| {
                        (
                            row.get::<_, String>(0),
                            row.get::<_, Option<i64>>(1),
                            row.get::<_, Option<i64>>(2),
                            prev_col.and_then(|i| row.get::<_, Option<DateTime<Utc>>>(i)),
                            row.get::<_, Option<String>>(reason_col),
                        )
                    })
                }
            };
            let (outcome, run_id, fence, prev, reason) = match result {
                Ok(r) => r,
                Err(m) if !fresh && self.live_epoch().is_some() => {
                    self.conn = None;
                    fresh = true;
                    let _ = m;
                    continue;
                }
                Err(m) => {
                    self.fail(&format!("claim of {} at {}: {m}", req.job, req.scheduled));
                    return ClaimOutcome::Unavailable(m);
                }
            };
            return self
                .outcome(epoch, &outcome, run_id, fence, prev, reason)
                .unwrap_or_else(|| {
                    ClaimOutcome::Unavailable(format!("the claim answered {outcome:?}"))
                });
        }
    }
}

/// A claim's parameters as the statement takes them.
pub(super) struct ClaimParams {
    /// Occurrences a missed claim stands for.
    pub(super) count: i64,
    pub(super) trigger: &'static str,
    pub(super) overlap: &'static str,
    pub(super) retry: Option<Value>,
    pub(super) mode: &'static str,
}

impl ClaimParams {
    fn of(req: &ClaimRequest) -> ClaimParams {
        ClaimParams {
            count: i64::try_from(req.count.max(1)).unwrap_or(i64::MAX),
            trigger: req.trigger.as_str(),
            overlap: req.overlap.as_str(),
            retry: req.retry.as_ref().map(retry_json),
            mode: match req.mode {
                ClaimMode::Run => "run",
                ClaimMode::Missed => "missed",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rea_core::backoff::RetryPolicy;
    use rea_core::job::Overlap;

    use super::*;

    /// A claim's parameters are the words the SQL compares with, and a
    /// retry policy counts runs, not retries.
    #[test]
    fn a_claims_parameters_are_the_statements_words() {
        let req = ClaimRequest {
            run: "r".into(),
            job: "j".into(),
            scheduled: chrono::Utc::now(),
            attempt: 1,
            trigger: Trigger::CatchUp,
            overlap: Overlap::Queue,
            mode: ClaimMode::Missed,
            count: 4,
            retry: Some(RetryPolicy {
                attempts: 2,
                delay: Duration::from_secs(3),
                max_delay: Duration::from_secs(60),
                factor: 2.0,
                jitter: 0.0,
            }),
        };
        let p = ClaimParams::of(&req);
        assert_eq!(
            (p.trigger, p.overlap, p.mode),
            ("catch_up", "queue", "missed")
        );
        let retry = p.retry.expect("a retry policy");
        assert_eq!(retry["attempts"], 3);
        assert_eq!(retry["delay_ms"], 3000);
        assert_eq!(retry["max_delay_ms"], 60_000);
        let run = ClaimParams::of(&ClaimRequest {
            mode: ClaimMode::Run,
            retry: None,
            ..req
        });
        assert_eq!(run.mode, "run");
        assert!(run.retry.is_none());
    }
}
