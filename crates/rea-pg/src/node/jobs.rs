//! The jobs' shared rows as this node sees them: the job definitions it
//! publishes (at start, after each reload and after each new epoch, so the
//! store has a row for every job and `rea status` can flag definitions
//! that differ), and cluster-wide pauses.
//!
//! Not here: claims on the jobs' rows (`claims.rs`).

use super::statements::within;
use super::task::Main;

impl Main {
    pub(super) async fn publish(&mut self, epoch: i64) {
        let Some((digest, jobs)) = self.config.clone() else {
            return;
        };
        let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
        let digests: Vec<String> = jobs.iter().map(|j| j.digest.clone()).collect();
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let r = match self.conn().await {
            Ok((c, _)) => {
                within(
                    io,
                    c.query_one(
                        "select rea.publish_config($1, $2, $3, $4, $5, $6)",
                        &[&cluster, &node, &epoch, &digest, &names, &digests],
                    ),
                )
                .await
            }
            Err(m) => Err(m),
        };
        match r {
            Ok(_) => self.published = Some(epoch),
            Err(m) => self.fail(&format!("cannot publish the job definitions: {m}")),
        }
    }

    pub(super) async fn pause(
        &mut self,
        jobs: Option<Vec<String>>,
        paused: bool,
    ) -> Result<Vec<String>, String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let (c, _) = self.conn().await?;
        match jobs {
            Some(jobs) => {
                let rows = within(
                    io,
                    c.query(
                        "select * from rea.pause($1, $2, $3, $4)",
                        &[&cluster, &jobs, &node, &paused],
                    ),
                )
                .await?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
            None => {
                within(
                    io,
                    c.query_one(
                        "select rea.pause_all($1, $2, $3)",
                        &[&cluster, &node, &paused],
                    ),
                )
                .await?;
                Ok(Vec::new())
            }
        }
    }
}
