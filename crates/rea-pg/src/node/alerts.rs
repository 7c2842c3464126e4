//! Who tells an alert (`rea.alerts`, migration 5): every node's engine
//! watches every job, and each raise and resolve is told by one node. The
//! node whose insert creates the row (cluster, job, kind) tells the raise;
//! the one whose delete removes it tells the resolve. Neither statement
//! depends on the lease: a node cut off from the others but not from the
//! database still tells what it sees, and a database that does not answer
//! leaves the telling to the node (`AlertClaim::Unavailable`). A node's
//! engine judges `no_success_within` from the runs it saw; the raise is
//! told only if no node's run of the job succeeded within the limit
//! (`rea.runs`).

use rea_store::cluster::AlertClaim;

use super::statements::within;
use super::task::Main;

impl Main {
    pub(super) async fn alert(
        &mut self,
        job: &str,
        kind: &str,
        raised: bool,
        no_success_ms: Option<i64>,
    ) -> AlertClaim {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let c = match self.conn().await {
            Ok((c, _)) => c,
            Err(m) => return AlertClaim::Unavailable(m),
        };
        let r = if raised {
            within(
                io,
                c.query_opt(
                    "with mine as (
                       insert into rea.alerts (cluster, job, kind, node)
                       select $1, $2, $3, $4
                       where $5::bigint is null or not exists (
                         select 1 from rea.runs r
                         where r.cluster = $1 and r.job = $2 and r.status = 'succeeded'
                           and r.ended_at > clock_timestamp() - $5::bigint * interval '1 millisecond')
                       on conflict (cluster, job, kind) do nothing
                       returning node)
                     select (select node from mine),
                            (select node from rea.alerts where cluster = $1 and job = $2 and kind = $3)",
                    &[&cluster, &job, &kind, &node, &no_success_ms],
                ),
            )
            .await
            .map(|row| match row {
                Some(row) if row.get::<_, Option<String>>(0).is_some() => AlertClaim::Mine,
                Some(row) => AlertClaim::Elsewhere(row.get::<_, Option<String>>(1)),
                None => AlertClaim::Elsewhere(None),
            })
        } else {
            within(
                io,
                c.query_opt(
                    "delete from rea.alerts where cluster = $1 and job = $2 and kind = $3 returning node",
                    &[&cluster, &job, &kind],
                ),
            )
            .await
            .map(|row| match row {
                Some(_) => AlertClaim::Mine,
                None => AlertClaim::Elsewhere(None),
            })
        };
        r.unwrap_or_else(|m| {
            self.fail(&format!("cannot decide who tells an alert: {m}"));
            AlertClaim::Unavailable(m)
        })
    }
}
