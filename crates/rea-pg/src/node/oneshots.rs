//! One-shots in the store: submissions made durable together (a group
//! commit, each answered alone), due ones claimed up to the daemon's free
//! slots, and when to look again (at once after a full batch, or when the
//! next one is due on the database's clock).
//!
//! Not here: a one-shot's retry after a failure, which its run's end
//! queues (`runs.rs`) by the policy submitted with it ([`oneshot_retry`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::claim::Grant;
use rea_core::oneshot::OneShot;
use rea_store::cluster::{Done, NodeEvent, SubmitError};
use serde_json::Value;
use tokio::time::Instant;
use tracing::error;

use super::lock;
use super::statements::{retry_json, within};
use super::task::Main;
use crate::settings::error_text;

/// Most one-shots taken by one poll (fewer when the daemon has fewer free
/// slots: what a node cannot start is left to the others).
pub(super) const ONESHOT_BATCH: usize = 256;

/// Submissions made durable by one statement (those that reached the node
/// together: a group commit).
pub(super) const SUBMIT_BATCH: usize = 4096;

/// A one-shot to queue and where to say whether it is durable.
pub(super) type Submission = (Box<OneShot>, Done<Result<(), SubmitError>>);

impl Main {
    /// Between ticks: due one-shots, if the lease is live.
    pub(super) async fn poll_oneshots(&mut self) {
        self.oneshot_poll = None;
        let Some(epoch) = self.live_epoch() else {
            return;
        };
        if let Err(m) = self.claim_oneshots(epoch).await {
            self.fail(&m);
        }
    }

    /// Claims due one-shots, as many as the daemon has free slots (up to
    /// [`ONESHOT_BATCH`]), and learns when the next one is due.
    pub(super) async fn claim_oneshots(&mut self, epoch: i64) -> Result<(), String> {
        self.oneshot_poll = None;
        let limit = lock(&self.shared).free_slots.min(ONESHOT_BATCH);
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let (shared, heartbeat) = (self.shared.clone(), self.s.heartbeat);
        let mut granted = Vec::new();
        let mut events = Vec::new();
        let mut poll = None;
        {
            let (c, st) = self.conn().await?;
            if limit > 0 {
                let rows = within(
                    io,
                    c.query(
                        &st.claim_oneshots,
                        &[&cluster, &node, &epoch, &(limit as i32)],
                    ),
                )
                .await?;
                let full = rows.len() >= limit;
                for row in rows {
                    let run_id: i64 = row.get(0);
                    let id: String = row.get(1);
                    let fence: i64 = row.get(2);
                    let spec: Option<Value> = row.get(3);
                    let attempt: i32 = row.get(4);
                    granted.push(run_id);
                    match spec.and_then(|v| serde_json::from_value::<OneShot>(v).ok()) {
                        Some(shot) => events.push(NodeEvent::OneShot {
                            shot: Box::new(shot),
                            attempt: attempt.max(1) as u32,
                            grant: Grant { run_id, fence },
                        }),
                        None => error!(
                            oneshot = id.as_str(),
                            "cluster: a one-shot without a readable definition"
                        ),
                    }
                }
                {
                    let mut sh = lock(&shared);
                    sh.free_slots = sh.free_slots.saturating_sub(granted.len());
                    sh.oneshots_granted += events.len() as u64;
                }
                if full {
                    // More may be due: ask again as soon as slots allow.
                    poll = Some(Instant::now());
                }
            }
            if poll.is_none() {
                // The next due one-shot, on the database's clock: polled
                // for then rather than at the next tick.
                let row = within(io, c.query_one(&st.next_oneshot_due, &[&cluster, &node])).await?;
                let in_ms: Option<i64> = row.get(0);
                // One due now that this poll did not get is being taken
                // by another node (its rows are locked): look again soon,
                // not at once.
                let floor = if granted.is_empty() { 50 } else { 0 };
                poll = in_ms
                    .filter(|ms| *ms < heartbeat.as_millis() as i64)
                    .map(|ms| {
                        Instant::now() + Duration::from_millis((ms.max(0) as u64 + 2).max(floor))
                    });
            }
        }
        self.oneshot_poll = poll;
        for run_id in granted {
            self.run_epochs.insert(run_id, epoch);
        }
        for e in events {
            let _ = self.events.send(e);
        }
        Ok(())
    }

    /// Queues one-shots in the store with one statement; each reply says
    /// whether its one-shot is durable (or why not). A name already
    /// pending (in the store, or earlier in the batch) is refused alone.
    pub(super) async fn submit(&mut self, batch: Vec<Submission>) {
        let duplicate = |id: &str| SubmitError::Duplicate { id: id.to_string() };
        let mut ids: Vec<String> = Vec::with_capacity(batch.len());
        let mut dues: Vec<DateTime<Utc>> = Vec::with_capacity(batch.len());
        let mut specs: Vec<Value> = Vec::with_capacity(batch.len());
        let mut retries: Vec<Option<Value>> = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        let mut seen = std::collections::HashSet::with_capacity(batch.len());
        for (shot, reply) in batch {
            if !seen.insert(shot.id.clone()) {
                reply(Err(duplicate(&shot.id)));
                continue;
            }
            let spec = match serde_json::to_value(&*shot) {
                Ok(v) => v,
                Err(e) => {
                    reply(Err(SubmitError::Refused(e.to_string())));
                    continue;
                }
            };
            retries.push(oneshot_retry(&shot));
            ids.push(shot.id.to_string());
            dues.push(shot.due);
            specs.push(spec);
            replies.push(reply);
        }
        if ids.is_empty() {
            return;
        }
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        // Without a connection nothing was sent: refused. Once sent, only
        // the server's own error means it was not queued; no answer in
        // time, or a connection that broke, leaves it unknown (the
        // statement may still commit).
        let r = match self.conn().await {
            Ok((c, st)) => {
                let params: [super::statements::P<'_>; 6] =
                    [&cluster, &node, &ids, &dues, &specs, &retries];
                let sent = c.query(&st.submit_oneshots, &params);
                match tokio::time::timeout(io, sent).await {
                    Ok(Ok(rows)) => Ok(rows),
                    Ok(Err(e)) if e.as_db_error().is_some() => {
                        Err((SubmitError::Refused(error_text(&e)), error_text(&e)))
                    }
                    Ok(Err(e)) => Err((SubmitError::Unconfirmed(error_text(&e)), error_text(&e))),
                    Err(_) => {
                        let m = format!(
                            "the cluster database did not answer within {} ms",
                            io.as_millis()
                        );
                        Err((SubmitError::Unconfirmed(m.clone()), m))
                    }
                }
            }
            Err(m) => Err((SubmitError::Refused(m.clone()), m)),
        };
        match r {
            Ok(rows) => {
                let queued: std::collections::HashSet<String> =
                    rows.iter().map(|r| r.get(0)).collect();
                for (id, reply) in ids.iter().zip(replies) {
                    reply(if queued.contains(id) {
                        Ok(())
                    } else {
                        Err(duplicate(id))
                    });
                }
            }
            Err((answer, m)) => {
                for reply in replies {
                    reply(Err(answer.clone()));
                }
                self.fail(&format!("one-shot submissions: {m}"));
            }
        }
    }
}

/// A one-shot's retries, with the defaults and rules local mode applies
/// ([`OneShot::retry_policy`]); none without retries.
pub(super) fn oneshot_retry(shot: &OneShot) -> Option<Value> {
    (shot.rare().retry.attempts > 0).then(|| retry_json(&shot.retry_policy()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A cluster one-shot retries as a local one would: a delay above the
    /// default maximum raises the maximum, and the jitter is the policy's.
    #[test]
    fn a_oneshots_retries_follow_local_modes_policy() {
        let now = chrono::Utc::now();
        let mut shot = OneShot {
            id: "s".into(),
            argv: vec!["true".to_string()].into(),
            shell: false,
            dir: std::path::Path::new("/").into(),
            due: now,
            submitted: now,
            rare: None,
        };
        assert_eq!(oneshot_retry(&shot), None);
        let mut rare = rea_core::oneshot::OneShotRare::default();
        rare.retry.attempts = 2;
        rare.retry.delay_ms = Some(900_000);
        shot.rare = Some(Box::new(rare));
        let policy = shot.retry_policy();
        assert_eq!(
            oneshot_retry(&shot),
            Some(json!({
                "attempts": 3,
                "delay_ms": 900_000,
                "max_delay_ms": 900_000,
                "factor": policy.factor,
                "jitter": policy.jitter,
            }))
        );
    }
}
