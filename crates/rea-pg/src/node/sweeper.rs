//! Each tick's housekeeping on the main connection: the sweeper (declares
//! silent nodes dead, records their runs interrupted, queues their
//! retries), then the work any node may take: retries of this node's jobs
//! and occurrences that waited for their job's run (`overlap = "queue"`).
//!
//! Not here: due one-shots (`oneshots.rs`, called at the end), and the
//! heartbeat (`heartbeat.rs`).

use chrono::{DateTime, Utc};
use rea_core::claim::Grant;
use rea_core::job::Overlap;
use rea_core::record::Trigger;
use rea_store::cluster::NodeEvent;
use tracing::warn;

use super::statements::within;
use super::task::Main;

impl Main {
    /// The sweeper, then work any node may take: due one-shots, retries,
    /// occurrences that waited for their job's run.
    pub(super) async fn pending_work(&mut self, epoch: i64) -> Result<(), String> {
        let jobs: Vec<(String, Overlap)> = self
            .config
            .as_ref()
            .map(|(_, j)| j.iter().map(|j| (j.name.clone(), j.overlap)).collect())
            .unwrap_or_default();
        self.sweep(epoch).await?;
        let mut adopted = self.claim_retries(epoch, &jobs).await?;
        adopted.extend(self.promote_queued(epoch, &jobs).await?);
        for e in adopted {
            if let NodeEvent::Adopted { grant, .. } = &e {
                self.run_epochs.insert(grant.run_id, epoch);
            }
            let _ = self.events.send(e);
        }
        self.claim_oneshots(epoch).await
    }

    /// Declares dead the nodes whose lease ended more than `grace` ago
    /// while this one stayed responsive (the statement records their runs
    /// interrupted and queues their retries), and says so in the log.
    async fn sweep(&mut self, epoch: i64) -> Result<(), String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let grace_ms = self.s.grace.as_millis().min(i32::MAX as u128) as i32;
        let (c, _) = self.conn().await?;
        let row = within(
            io,
            c.query_one(
                "select convicted, interrupted, retries from rea.sweep($1, $2, $3, $4)",
                &[&cluster, &node, &epoch, &grace_ms],
            ),
        )
        .await?;
        let convicted: Option<Vec<String>> = row.get(0);
        let interrupted: i32 = row.get(1);
        if let Some(nodes) = convicted {
            warn!(
                nodes = nodes.join(", "),
                interrupted,
                "cluster: declared dead (lease ended and not renewed); their runs are recorded as interrupted"
            );
        }
        Ok(())
    }

    /// Due retries of this node's jobs (`jobs`: name and overlap), up to
    /// 16 per overlap policy per tick, granted to this node.
    async fn claim_retries(
        &mut self,
        epoch: i64,
        jobs: &[(String, Overlap)],
    ) -> Result<Vec<NodeEvent>, String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let (c, st) = self.conn().await?;
        let mut adopted = Vec::new();
        for overlap in [
            Overlap::Skip,
            Overlap::Queue,
            Overlap::Allow,
            Overlap::Replace,
        ] {
            let names: Vec<String> = jobs
                .iter()
                .filter(|(_, o)| *o == overlap)
                .map(|(n, _)| n.clone())
                .collect();
            if names.is_empty() {
                continue;
            }
            let o = overlap.as_str();
            for _ in 0..16 {
                let Some(row) = within(
                    io,
                    c.query_opt(&st.claim_retry, &[&cluster, &node, &epoch, &names, &o]),
                )
                .await?
                else {
                    break;
                };
                let outcome: String = row.get(0);
                if outcome != "started" {
                    continue;
                }
                adopted.push(NodeEvent::Adopted {
                    job: row.get(2),
                    params: row
                        .get::<_, Option<serde_json::Value>>(6)
                        .and_then(|p| serde_json::from_value(p).ok()),
                    trigger: Trigger::Retry,
                    attempt: row.get::<_, i32>(5).max(1) as u32,
                    scheduled: row
                        .get::<_, Option<DateTime<Utc>>>(4)
                        .unwrap_or_else(Utc::now),
                    grant: Grant {
                        run_id: row.get(1),
                        fence: row.get(3),
                    },
                });
            }
        }
        Ok(adopted)
    }

    /// Occurrences of this node's jobs that waited for their job's run
    /// (`overlap = "queue"`) and may start now, granted to this node.
    async fn promote_queued(
        &mut self,
        epoch: i64,
        jobs: &[(String, Overlap)],
    ) -> Result<Vec<NodeEvent>, String> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let names: Vec<String> = jobs.iter().map(|(n, _)| n.clone()).collect();
        let (c, st) = self.conn().await?;
        let rows = within(
            io,
            c.query(&st.promote_queued, &[&cluster, &node, &epoch, &names]),
        )
        .await?;
        Ok(rows
            .iter()
            .map(|row| NodeEvent::Adopted {
                job: row.get(1),
                params: None,
                trigger: Trigger::Schedule,
                attempt: 1,
                scheduled: row
                    .get::<_, Option<DateTime<Utc>>>(3)
                    .unwrap_or_else(Utc::now),
                grant: Grant {
                    run_id: row.get(0),
                    fence: row.get(2),
                },
            })
            .collect())
    }
}
