//! The watch of the other nodes: the live views' cluster-wide side. Once
//! a heartbeat, on a connection of its own (never in front of claims or
//! the lease), one look of three indexed statements sent together: the
//! runs other nodes have in progress (`runs_started`), the runs that ended
//! since the last look (`runs_ended`, migration 6) and every node's state.
//! The daemon hears of it as [`NodeEvent::Peers`] only when something
//! changed, so an idle cluster wakes no loop.
//!
//! Ends are read from a watermark on the database's clock less an overlap
//! (a run's end is stamped before its transaction commits), each run told
//! once (the ids told within the overlap are kept).
//!
//! Before its first look, once, the watch reads each job's last final run
//! ended elsewhere and, where it failed, the cluster's failure streak, a
//! page of jobs at a time ([`NodeEvent::Seeded`] each): what ended before
//! the node started is not news, but which jobs are failing is.
//!
//! Not here: what the daemon makes of a view (`rea_daemon`'s `peers`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::record::Record;
use rea_store::cluster::{NodeEvent, PeerRun, PeerView, SeedRun};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::Client;

use super::statements::{within, P};
use super::{lock, Shared};
use crate::reader::{record_of, FAILED_SQL, RAN_SQL, RUN_COLUMNS};
use crate::settings::Settings;

/// Other nodes' runs in progress, oldest first.
const RUNNING: &str = "select coalesce(detail ->> 'run', id::text), job, node,
        coalesce(started_at, claimed_at), pid
   from rea.runs
  where cluster = $1 and status = 'started' and node is distinct from $2
  order by id limit $3";

/// Every node's state, a live node whose lease ran out `silent`.
const NODES: &str = "select node, case when state = 'live' and lease_until <= clock_timestamp()
        then 'silent' else state end
   from rea.nodes where cluster = $1 order by node";

/// How far before the watermark ends are read again.
const OVERLAP: Duration = Duration::from_secs(2);

pub(super) async fn peers_loop(
    s: Settings,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<NodeEvent>,
) {
    let io = s.lease.max(Duration::from_millis(500));
    let overlap = OVERLAP.max(2 * s.heartbeat);
    let ended_sql = ended_sql();
    let mut conn: Option<Client> = None;
    let mut watch = Watch::default();
    // Each job's last run ended elsewhere, read at start a page of jobs at
    // a time (in name order, from `after`), each page told as it comes;
    // errors left before giving up (the schema may not be there yet on
    // the first try; a query that cannot finish is not sent for ever).
    let mut seeding = Some(String::new());
    let mut seed_errors = 3u32;
    loop {
        if lock(&shared).stopping {
            return;
        }
        let t0 = Instant::now();
        if conn.is_none() {
            conn = s.connect("rea peers").await.ok();
        }
        while let (Some(c), Some(after)) = (&conn, seeding.clone()) {
            match seed(c, &s.cluster, &s.node, &after).await {
                Ok((page, last)) => {
                    seeding = last;
                    if !page.is_empty() && events.send(NodeEvent::Seeded(page)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    seed_errors -= 1;
                    if seed_errors == 0 {
                        seeding = None;
                        tracing::warn!(
                            "cluster: cannot read the last runs other nodes ended ({e}); the live views know those ended from now on"
                        );
                    }
                    break;
                }
            }
        }
        if let Some(c) = &conn {
            match look(c, &s, &ended_sql, io, overlap, &mut watch).await {
                Ok(Some(view)) => {
                    if events.send(NodeEvent::Peers(Box::new(view))).is_err() {
                        return;
                    }
                }
                Ok(None) => {}
                // The schema may not be there yet, or the database is
                // away: the lease's task says so; this one looks again.
                Err(_) => conn = None,
            }
        }
        tokio::time::sleep_until(t0 + s.heartbeat).await;
    }
}

/// What the last looks saw.
#[derive(Default)]
struct Watch {
    /// Ends are read from here (the database's clock); None before the
    /// first look, which tells no ends (the history is not news).
    since: Option<DateTime<Utc>>,
    /// Run ids told as ended, with their ends, kept for the overlap.
    told: HashMap<i64, DateTime<Utc>>,
    /// The last view told (its running runs and nodes).
    last: Option<PeerView>,
}

/// One look; Some(view) when it differs from the last one told.
async fn look(
    c: &Client,
    s: &Settings,
    ended_sql: &str,
    io: Duration,
    overlap: Duration,
    w: &mut Watch,
) -> Result<Option<PeerView>, String> {
    let ended_max = PeerView::ENDED_MAX as i64;
    let overlap_c = chrono::Duration::from_std(overlap).unwrap_or_default();
    // The first look reads no ends (from far in the future).
    let from = w.since.map_or_else(
        || DateTime::<Utc>::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC),
        |t| t - overlap_c,
    );
    let (now, running, ended, nodes) =
        statements(c, &s.cluster, &s.node, ended_sql, from, io).await?;
    let mut view = PeerView {
        running: running
            .iter()
            .take(PeerView::RUNNING_MAX)
            .map(|r| PeerRun {
                run: r.get(0),
                job: r.get(1),
                node: r.get::<_, Option<String>>(2).unwrap_or_default(),
                since: r.get(3),
                pid: r.get::<_, Option<i32>>(4).map(|p| p.max(0) as u32),
            })
            .collect(),
        running_cut: running.len() > PeerView::RUNNING_MAX,
        ended: Vec::new(),
        nodes: nodes.iter().map(|r| (r.get(0), r.get(1))).collect(),
    };
    let mut newest = None;
    for r in &ended {
        let id: i64 = r.get(0);
        let at: Option<DateTime<Utc>> = r.get(11);
        let Some(at) = at else { continue };
        newest = Some(at);
        if w.told.insert(id, at).is_none() {
            view.ended.push(record_of(r, 0));
        }
    }
    // A full batch: go on from its last end next time; else from now.
    w.since = Some(match (ended.len() as i64 >= ended_max, newest) {
        (true, Some(at)) => at,
        _ => now,
    });
    let keep_from = w.since.unwrap_or(now) - overlap_c * 2;
    w.told.retain(|_, at| *at >= keep_from);
    let same = w.last.as_ref().is_some_and(|l| {
        l.running == view.running && l.nodes == view.nodes && l.running_cut == view.running_cut
    });
    if same && view.ended.is_empty() {
        return Ok(None);
    }
    w.last = Some(PeerView {
        ended: Vec::new(),
        ..view.clone()
    });
    Ok(Some(view))
}

/// How long a page of the start's read of each job's last run may take
/// (an index probe per job, on this task's own connection).
const SEED_TIMEOUT: Duration = Duration::from_secs(60);

/// Jobs a page of the start's read covers.
const SEED_PAGE: i64 = 1000;

/// A page of jobs after `after` (in name order): each one's last final
/// run (skipped aside) where another node ended it, without output (the
/// live views keep none); and, where it failed, the job's failures since
/// its last success on every node, over its last 1,000 runs. With the
/// name to read the next page after, None after the last page.
async fn seed(
    c: &Client,
    cluster: &String,
    node: &String,
    after: &str,
) -> Result<(Vec<SeedRun>, Option<String>), String> {
    let sql = format!(
        "select j.job, r.id is not null and r.node is distinct from $2 and r.ended_at is not null,
                {RUN_COLUMNS},
                case when r.status in ({FAILED_SQL}) then
                  (select count(*) from (
                     select t.status, bool_or(t.status = 'succeeded') over (order by t.id desc) as ok_after
                       from (select y.id, y.status from rea.runs y
                              where y.cluster = j.cluster and y.job = j.job
                                and y.status in ({RAN_SQL})
                              order by y.id desc limit 1000) t) w
                    where not w.ok_after and w.status in ({FAILED_SQL}))
                else 0 end
           from (select null::text as output, null::bigint as output_bytes) o,
                rea.jobs j
                left join lateral (select * from rea.runs x
                   where x.cluster = j.cluster and x.job = j.job
                     and x.status in ({RAN_SQL})
                   order by x.id desc limit 1) r on true
          where j.cluster = $1 and j.job > $3
          order by j.job limit $4"
    );
    let after = after.to_string();
    let p: [P<'_>; 4] = [cluster, node, &after, &SEED_PAGE];
    let rows = within(SEED_TIMEOUT, c.query(&sql, &p)).await?;
    let next = (rows.len() as i64 == SEED_PAGE)
        .then(|| rows.last().map(|r| r.get::<_, String>(0)))
        .flatten();
    let page = rows
        .iter()
        .filter(|r| r.get::<_, bool>(1))
        .map(|r| SeedRun {
            last: record_of(r, 2),
            streak: u32::try_from(r.get::<_, i64>(21).max(0)).unwrap_or(u32::MAX),
        })
        .collect();
    Ok((page, next))
}

/// Runs other nodes ended after `$2`, oldest end first.
fn ended_sql() -> String {
    format!(
        "select {RUN_COLUMNS} from (select null::text as output, null::bigint as output_bytes) o,
                rea.runs r
          where r.cluster = $1 and r.ended_at > $2 and r.node is distinct from $3
            and r.status in ({RAN_SQL}, 'cancelled')
          order by r.ended_at limit $4"
    )
}

type Look = (
    DateTime<Utc>,
    Vec<tokio_postgres::Row>,
    Vec<tokio_postgres::Row>,
    Vec<tokio_postgres::Row>,
);

/// A look's statements, sent together (one round trip): the database's
/// clock, other nodes' runs in progress, the runs they ended after
/// `from`, every node's state.
async fn statements(
    c: &Client,
    cluster: &String,
    node: &String,
    ended_sql: &str,
    from: DateTime<Utc>,
    io: Duration,
) -> Result<Look, String> {
    let running_max = (PeerView::RUNNING_MAX + 1) as i64;
    let ended_max = PeerView::ENDED_MAX as i64;
    let running_p: [P<'_>; 3] = [cluster, node, &running_max];
    let ended_p: [P<'_>; 4] = [cluster, &from, node, &ended_max];
    let nodes_p: [P<'_>; 1] = [cluster];
    let (now, running, ended, nodes) = within(io, async {
        tokio::try_join!(
            c.query_one("select clock_timestamp()", &[]),
            c.query(RUNNING, &running_p),
            c.query(ended_sql, &ended_p),
            c.query(NODES, &nodes_p),
        )
    })
    .await?;
    Ok((now.get(0), running, ended, nodes))
}

/// One look of node `node` of `cluster` at its peers, reading ends after
/// `from`, as the watch makes it (for `rea-bench cluster`): the runs in
/// progress, the ended runs and the nodes it read.
pub async fn bench_look(
    c: &Client,
    cluster: &str,
    node: &str,
    from: DateTime<Utc>,
) -> Result<(usize, usize, usize), String> {
    let (_, running, ended, nodes) = statements(
        c,
        &cluster.to_string(),
        &node.to_string(),
        &ended_sql(),
        from,
        Duration::from_secs(60),
    )
    .await?;
    let ended: Vec<Record> = ended.iter().map(|r| record_of(r, 0)).collect();
    Ok((running.len(), ended.len(), nodes.len()))
}

/// The read a node starting makes of each job's last run ended elsewhere
/// (for `rea-bench cluster`), every page: how many jobs it told.
pub async fn bench_seed(c: &Client, cluster: &str, node: &str) -> Result<usize, String> {
    let (cluster, node) = (cluster.to_string(), node.to_string());
    let mut after = Some(String::new());
    let mut told = 0;
    while let Some(from) = after {
        let (page, next) = seed(c, &cluster, &node, &from).await?;
        told += page.len();
        after = next;
    }
    Ok(told)
}
