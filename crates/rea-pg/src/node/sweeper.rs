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
use rea_store::cluster::Event;
use tracing::warn;

use super::statements::within;
use super::task::Main;

impl Main {
    /// The sweeper, then work any node may take: due one-shots, retries,
    /// occurrences that waited for their job's run.
    pub(super) async fn pending_work(&mut self, epoch: i64) -> Result<(), String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let grace_ms = self.s.grace.as_millis().min(i32::MAX as u128) as i32;
        let jobs: Vec<(String, Overlap)> = self
            .config
            .as_ref()
            .map(|(_, j)| j.iter().map(|j| (j.name.clone(), j.overlap)).collect())
            .unwrap_or_default();
        let mut granted = Vec::new();
        let mut events = Vec::new();
        {
            let (c, st) = self.conn().await?;
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
                    let run_id: i64 = row.get(1);
                    granted.push(run_id);
                    events.push(Event::Adopted {
                        job: row.get(2),
                        trigger: Trigger::Retry,
                        attempt: row.get::<_, i32>(5).max(1) as u32,
                        scheduled: row
                            .get::<_, Option<DateTime<Utc>>>(4)
                            .unwrap_or_else(Utc::now),
                        grant: Grant {
                            run_id,
                            fence: row.get(3),
                        },
                    });
                }
            }
            if !jobs.is_empty() {
                let names: Vec<String> = jobs.iter().map(|(n, _)| n.clone()).collect();
                let rows = within(
                    io,
                    c.query(&st.promote_queued, &[&cluster, &node, &epoch, &names]),
                )
                .await?;
                for row in rows {
                    let run_id: i64 = row.get(0);
                    granted.push(run_id);
                    events.push(Event::Adopted {
                        job: row.get(1),
                        trigger: Trigger::Schedule,
                        attempt: 1,
                        scheduled: row
                            .get::<_, Option<DateTime<Utc>>>(3)
                            .unwrap_or_else(Utc::now),
                        grant: Grant {
                            run_id,
                            fence: row.get(2),
                        },
                    });
                }
            }
        }
        for run_id in granted {
            self.run_epochs.insert(run_id, epoch);
        }
        for e in events {
            let _ = self.events.send(e);
        }
        self.claim_oneshots(epoch).await
    }
}
