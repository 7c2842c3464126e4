//! The cluster-wide answers of the query commands (`rea status`,
//! `history`, `logs`, `pending`) from any node, with or without a daemon:
//! one connection, blocking calls (each command asks a few questions and
//! exits). The history side implements `rea_store::history::HistoryReader`,
//! so `rea history` and `rea logs` print the database's runs exactly as
//! they print a local log's.

use std::collections::{HashMap, HashSet};
use std::io;

use chrono::{DateTime, Utc};
use rea_core::oneshot::OneShot;
use rea_core::record::{Event, Record, RunStatus, Trigger};
use rea_store::history::{HistoryReader, JobSummary, LastOccurrences, Query, RunSummary};
use serde::Serialize;
use serde_json::{json, Value};
use tokio_postgres::{Client, Row};

use crate::settings::{error_text, Settings};

/// What `rea cancel` did with one one-shot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// Taken out of the queue before any node claimed it.
    Cancelled,
    /// It runs; its node was asked to stop it (`--kill`).
    Killing,
    /// A node claimed it first: it is running (and `--kill` was not given).
    Running,
    /// A node claimed it first and it has already ended.
    AlreadyRan,
}

/// A connection for the query commands.
pub struct Reader {
    rt: tokio::runtime::Runtime,
    client: Client,
    cluster: String,
}

/// A node as `rea status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub node: String,
    /// live | convicted | left
    pub state: String,
    pub epoch: i64,
    /// Milliseconds of lease left on the database clock (negative: ended).
    pub lease_left_ms: i64,
    pub hostname: Option<String>,
    pub pid: Option<i32>,
    pub version: Option<String>,
    /// Digest of the node's job definitions.
    pub digest: Option<String>,
    /// Its definitions differ from those of most live nodes.
    pub differs: bool,
}

/// A job as the cluster sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    pub job: String,
    pub paused: bool,
    /// Runs started cluster-wide.
    pub active: i32,
    /// The newest occurrence claimed by any node.
    pub last_scheduled: Option<DateTime<Utc>>,
    pub last: Option<Record>,
    /// (run id, node, pid): the id `rea trigger` printed and every node's
    /// history shows (the database's own for rows of older binaries).
    pub running: Vec<(String, String, Option<i32>)>,
    /// Nodes whose definition of the job differs: node → digest.
    pub drift: Option<Value>,
    /// Some node defines the job, but no live one does (its nodes died or
    /// left): it will not run until one that defines it is back.
    pub orphaned: bool,
}

/// `rea status` in cluster mode.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    pub cluster: String,
    pub db_now: DateTime<Utc>,
    pub nodes: Vec<NodeRow>,
    pub jobs: Vec<JobRow>,
}

/// A one-shot waiting in the cluster (or running on a node).
#[derive(Debug, Clone, Serialize)]
pub struct PendingRow {
    pub id: String,
    pub due: DateTime<Utc>,
    pub attempt: i32,
    pub shot: Option<OneShot>,
    /// The node running it, if it runs.
    pub running_on: Option<String>,
}

fn other(m: String) -> io::Error {
    io::Error::other(m)
}

pub(crate) const RUN_COLUMNS: &str =
    "r.id, r.job, r.scheduled, r.attempt, r.trigger, r.status, r.reason, r.node, r.fence,
    r.claimed_at, r.started_at, r.ended_at, r.pid, r.exit_code, r.signal, r.detail, r.late_report,
    o.output, o.output_bytes";

/// The final statuses of a run that ran (`RunStatus::FINAL`, skipped
/// aside), as an SQL list: a job's last run, the ends peers tell. One
/// list, so a status added to rea-core cannot be left out of one query
/// (the peers' ends once lacked `oom_killed`); tested against rea-core,
/// and the database's `rea.ran()` (what keeps `rea.last_runs`) against it
/// (`migrate.rs`).
pub(crate) const RAN_SQL: &str =
    "'succeeded', 'failed', 'timed_out', 'killed', 'interrupted', 'oom_killed'";

/// The failures among them (`RunStatus::is_failure`), as an SQL list.
pub(crate) const FAILED_SQL: &str = "'failed', 'timed_out', 'oom_killed'";

impl Reader {
    pub fn connect(s: &Settings) -> Result<Reader, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let client = rt.block_on(s.connect("rea client"))?;
        Ok(Reader {
            rt,
            client,
            cluster: s.cluster.clone(),
        })
    }

    fn rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, String> {
        self.rt
            .block_on(self.client.query(sql, params))
            .map_err(|e| {
                let m = error_text(&e);
                if m.contains("does not exist") {
                    format!("the cluster database has no rea schema yet (no node has started): {m}")
                } else {
                    m
                }
            })
    }

    /// Nodes, jobs, drift. Each job's last run is read from
    /// `rea.last_runs` (migration 9, kept by triggers on `rea.runs`): a
    /// probe of each job's runs took 0.3 s at 10,000 jobs and a million
    /// runs. A recorded run that is gone, or did not run, reads as none.
    pub fn status(&self, only: Option<&str>) -> Result<ClusterStatus, String> {
        let c = &self.cluster;
        let now: DateTime<Utc> = self.rows("select clock_timestamp()", &[])?[0].get(0);
        let mut nodes: Vec<NodeRow> = self
            .rows(
                "select node, state, epoch, (extract(epoch from lease_until - clock_timestamp()) * 1000)::bigint,
                        hostname, pid, version, digest
                 from rea.nodes where cluster = $1 order by node",
                &[c],
            )?
            .iter()
            .map(|r| NodeRow {
                node: r.get(0),
                state: r.get(1),
                epoch: r.get(2),
                lease_left_ms: r.get(3),
                hostname: r.get(4),
                pid: r.get(5),
                version: r.get(6),
                digest: r.get(7),
                differs: false,
            })
            .collect();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for n in nodes.iter().filter(|n| n.state == "live") {
            if let Some(d) = &n.digest {
                *counts.entry(d.as_str()).or_default() += 1;
            }
        }
        let majority = counts
            .iter()
            .max_by_key(|(d, n)| (**n, std::cmp::Reverse(**d)))
            .map(|(d, _)| d.to_string());
        for n in &mut nodes {
            n.differs = n.state == "live" && n.digest.is_some() && n.digest != majority;
        }
        let drift: HashMap<String, Value> = self
            .rows(
                "select job, by_node from rea.definition_drift where cluster = $1",
                &[c],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let mut running: HashMap<String, Vec<(String, String, Option<i32>)>> = HashMap::new();
        for r in self.rows(
            "select coalesce(detail ->> 'run', id::text), job, node, pid from rea.runs
             where cluster = $1 and status = 'started' order by id",
            &[c],
        )? {
            running.entry(r.get(1)).or_default().push((
                r.get(0),
                r.get::<_, Option<String>>(2).unwrap_or_default(),
                r.get(3),
            ));
        }
        let job_filter = only.map(str::to_string);
        let sql = format!(
            "select j.job, j.paused, j.active, j.last_scheduled,
                    exists (select 1 from rea.node_jobs d where d.cluster = j.cluster and d.job = j.job)
                    and not exists (select 1 from rea.node_jobs d join rea.nodes n using (cluster, node)
                        where d.cluster = j.cluster and d.job = j.job and n.state = 'live'
                          and n.lease_until > clock_timestamp()),
                    {RUN_COLUMNS}
             from rea.jobs j
             left join rea.last_runs l on l.cluster = j.cluster and l.job = j.job
             left join rea.runs r on r.id = l.run_id and r.status in ({RAN_SQL})
             left join rea.run_output o on o.run_id = r.id
             where j.cluster = $1 and ($2::text is null or j.job = $2)
             order by j.job"
        );
        let jobs = self
            .rows(&sql, &[c, &job_filter])?
            .iter()
            .map(|r| {
                let job: String = r.get(0);
                let last = r.get::<_, Option<i64>>(5).map(|_| record_of(r, 5));
                JobRow {
                    paused: r.get(1),
                    active: r.get(2),
                    last_scheduled: r.get(3),
                    last,
                    running: running.remove(&job).unwrap_or_default(),
                    drift: drift.get(&job).cloned(),
                    orphaned: r.get(4),
                    job,
                }
            })
            .collect();
        Ok(ClusterStatus {
            cluster: c.clone(),
            db_now: now,
            nodes,
            jobs,
        })
    }

    /// One-shots waiting or running, by due time.
    pub fn pending(
        &self,
        tag: Option<&str>,
        limit: usize,
    ) -> Result<(usize, Vec<PendingRow>), String> {
        let c = &self.cluster;
        let mut out: Vec<PendingRow> = self
            .rows(
                "select job, due_at, attempt, spec, null::text from rea.pending
                   where cluster = $1 and kind = 'oneshot'
                 union all
                 select job, scheduled, attempt, detail -> 'spec', node from rea.runs
                   where cluster = $1 and trigger = 'oneshot' and status = 'started'
                 order by 2, 1",
                &[c],
            )?
            .iter()
            .map(|r| PendingRow {
                id: r.get(0),
                due: r.get(1),
                attempt: r.get(2),
                shot: r
                    .get::<_, Option<Value>>(3)
                    .and_then(|v| serde_json::from_value(v).ok()),
                running_on: r.get(4),
            })
            .filter(|p| {
                tag.is_none_or(|t| {
                    p.shot
                        .as_ref()
                        .is_some_and(|s| s.rare().tags.iter().any(|x| x == t))
                })
            })
            .collect();
        let total = out.len();
        out.truncate(limit);
        Ok((total, out))
    }

    /// Cancels pending one-shots (with `kill`, running ones too), each
    /// answered from the statement that cancels it: a one-shot a node
    /// claimed between the look-up and the delete is said to be running
    /// (or, with `kill`, stopped) or to have run, never "cancelled".
    pub fn cancel(&self, ids: &[String], kill: bool) -> Result<Vec<(String, Cancel)>, String> {
        let c = &self.cluster;
        let known: HashMap<String, bool> = self
            .rows(
                "select job, false from rea.pending where cluster = $1 and kind = 'oneshot' and job = any($2)
                 union all
                 select job, true from rea.runs where cluster = $1 and trigger = 'oneshot' and status = 'started' and job = any($2)",
                &[c, &ids],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let unknown: Vec<&String> = ids.iter().filter(|i| !known.contains_key(*i)).collect();
        if !unknown.is_empty() {
            let ran: std::collections::HashSet<String> = self
                .rows(
                    "select distinct job from rea.runs where cluster = $1 and trigger = 'oneshot' and job = any($2)",
                    &[c, &unknown],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let said: Vec<String> = unknown
                .iter()
                .map(|i| {
                    if ran.contains(*i) {
                        format!("one-shot {i:?} has already run")
                    } else {
                        format!("no pending one-shot {i:?}")
                    }
                })
                .collect();
            return Err(said.join("\n"));
        }
        if !kill {
            if let Some((id, _)) = known.iter().find(|(_, running)| **running) {
                return Err(format!(
                    "one-shot {id:?} is running; use --kill to terminate it"
                ));
            }
        }
        let cancelled: std::collections::HashSet<String> = self
            .rows(
                "with d as (delete from rea.pending p where p.cluster = $1 and p.kind = 'oneshot' and p.job = any($2) returning p.*)
                 insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, reason, ended_at, detail)
                 select d.cluster, d.job, d.due_at, d.attempt, 'oneshot', 'cancelled', 'cancelled by operator',
                        clock_timestamp(), jsonb_build_object('spec', d.spec)
                 from d returning job",
                &[c, &ids],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // Whatever the delete did not take has left the queue meanwhile:
        // where is it now?
        let rest: Vec<String> = ids
            .iter()
            .filter(|i| !cancelled.contains(*i))
            .cloned()
            .collect();
        let running: std::collections::HashSet<String> = if rest.is_empty() {
            Default::default()
        } else {
            self.rows(
                "select job from rea.runs where cluster = $1 and trigger = 'oneshot' and status = 'started' and job = any($2)",
                &[c, &rest],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect()
        };
        if kill && !running.is_empty() {
            let running: Vec<&String> = running.iter().collect();
            self.rows(
                "insert into rea.stop_requests (cluster, fence, reason)
                 select cluster, fence, 'killed by operator' from rea.runs
                 where cluster = $1 and trigger = 'oneshot' and status = 'started' and job = any($2)
                 on conflict do nothing returning fence",
                &[c, &running],
            )?;
        }
        Ok(ids
            .iter()
            .map(|i| {
                let how = if cancelled.contains(i) {
                    Cancel::Cancelled
                } else if running.contains(i) {
                    if kill {
                        Cancel::Killing
                    } else {
                        Cancel::Running
                    }
                } else {
                    Cancel::AlreadyRan
                };
                (i.clone(), how)
            })
            .collect())
    }

    /// Cluster-wide pause (`jobs` None: all, and jobs first seen later) or
    /// resume; the jobs that changed, and those paused now.
    pub fn pause(
        &self,
        jobs: Option<&[String]>,
        paused: bool,
        by: &str,
    ) -> Result<(Vec<String>, Vec<String>), String> {
        let c = &self.cluster;
        let changed: Vec<String> = match jobs {
            Some(jobs) => self
                .rows(
                    "select * from rea.pause($1, $2, $3, $4)",
                    &[c, &jobs, &by, &paused],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect(),
            None => {
                let before: Vec<String> = self
                    .rows(
                        "select job from rea.jobs where cluster = $1 and paused <> $2 order by job",
                        &[c, &paused],
                    )?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                self.rows("select rea.pause_all($1, $2, $3)", &[c, &by, &paused])?;
                before
            }
        };
        let now: Vec<String> = self
            .rows(
                "select job from rea.jobs where cluster = $1 and paused order by job",
                &[c],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok((changed, now))
    }

    fn runs(
        &self,
        where_: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        limit: Option<usize>,
    ) -> io::Result<Vec<Record>> {
        let limit = limit.map(|l| format!(" limit {l}")).unwrap_or_default();
        let sql = format!(
            "select {RUN_COLUMNS} from rea.runs r left join rea.run_output o on o.run_id = r.id
             where r.cluster = $1 and r.status <> 'queued' and {where_} order by r.id desc{limit}"
        );
        let rows = self.rows(&sql, params).map_err(other)?;
        Ok(rows.iter().map(|r| record_of(r, 0)).collect())
    }
}

fn trigger_of(s: &str) -> Option<Trigger> {
    serde_json::from_value(Value::String(s.to_string())).ok()
}

fn status_of(s: &str) -> Option<RunStatus> {
    serde_json::from_value(Value::String(s.to_string())).ok()
}

/// A run row (columns `RUN_COLUMNS` from `at`) as a history record: the
/// node's own record (kept in `detail`) under the database's columns,
/// which say what the cluster decided.
pub(crate) fn record_of(r: &Row, at: usize) -> Record {
    let g = |i: usize| at + i;
    let detail: Option<Value> = r.get(g(15));
    let mut rec = detail
        .clone()
        .and_then(|d| serde_json::from_value::<Record>(d).ok())
        .unwrap_or_else(|| Record::new(Event::Run, Utc::now()));
    let id: i64 = r.get(g(0));
    let status: String = r.get(g(5));
    let claimed: DateTime<Utc> = r.get(g(9));
    let started_at: Option<DateTime<Utc>> = r.get(g(10));
    let ended_at: Option<DateTime<Utc>> = r.get(g(11));
    rec.event = if status == "missed" {
        Event::Missed
    } else {
        Event::Run
    };
    rec.job = Some(r.get(g(1)));
    // One run id everywhere: the node's engine's (what `rea trigger`
    // printed, kept in the row from its claim on); the database's own
    // only for rows no node named (missed occurrences, cancelled
    // one-shots, a store-decided run whose node died before it started).
    let engine_run = detail
        .as_ref()
        .and_then(|d| d.get("run"))
        .and_then(Value::as_str)
        .map(str::to_string);
    rec.run = Some(engine_run.unwrap_or_else(|| id.to_string()));
    rec.cluster_run = Some(id);
    rec.fence = r.get(g(8));
    rec.scheduled = r.get(g(2));
    rec.attempt = Some(r.get::<_, i32>(g(3)).max(1) as u32);
    rec.trigger = trigger_of(&r.get::<_, String>(g(4)));
    rec.status = status_of(&status);
    if rec.status.is_some_and(RunStatus::is_final) && rec.status != Some(RunStatus::Skipped) {
        rec.ended = rec.ended.or(ended_at);
    }
    rec.started = rec.started.or(started_at);
    rec.ts = ended_at.or(started_at).unwrap_or(claimed);
    if let Some(reason) = r.get::<_, Option<String>>(g(6)) {
        rec.reason = Some(reason);
    }
    if rec.pid.is_none() {
        rec.pid = r.get::<_, Option<i32>>(g(12)).map(|p| p as u32);
    }
    if status == "interrupted" {
        rec.exit_code = None;
        rec.signal = None;
    }
    let node: Option<String> = r.get(g(7));
    let late: Option<Value> = r.get(g(16));
    let mut extra = rec.detail.take().unwrap_or_else(|| json!({}));
    if let Some(o) = extra.as_object_mut() {
        o.insert("node".into(), json!(node));
        if let Some(late) = late {
            o.insert("late_report".into(), late);
        }
    }
    rec.detail = Some(extra);
    if status == "missed" {
        rec.status = None;
        // The occurrences the claim stood for (rows of older binaries: 1).
        let count = detail
            .as_ref()
            .and_then(|d| d.get("count"))
            .and_then(Value::as_u64);
        rec.count = Some(count.unwrap_or(1).max(1));
    }
    if let Some(out) = r.get::<_, Option<String>>(g(17)) {
        rec.output = Some(out);
        rec.output_bytes = r.get::<_, Option<i64>>(g(18)).map(|b| b.max(0) as u64);
    }
    rec
}

impl HistoryReader for Reader {
    fn query(&self, q: &Query) -> io::Result<Vec<Record>> {
        let statuses: Vec<String> = q.statuses.iter().map(|s| s.as_str().to_string()).collect();
        let any_status = statuses.is_empty();
        let missed_ok = q.with_missed || (any_status && !q.runs_only);
        self.runs(
            "($2::text is null or r.job = $2)
             and (r.status <> 'missed' or $4::bool)
             and ($3::bool or r.status = any($5) or (r.status = 'missed' and $4::bool))
             and ($6::timestamptz is null or coalesce(r.ended_at, r.started_at, r.claimed_at) >= $6)
             and ($7::timestamptz is null or coalesce(r.ended_at, r.started_at, r.claimed_at) < $7)
             and ($8::text is null or split_part(r.job, '/', 1) = $8 and strpos(r.job, '/') > 1)",
            &[
                &self.cluster,
                &q.job,
                &any_status,
                &missed_ok,
                &statuses,
                &q.since,
                &q.until,
                &q.tenant,
            ],
            q.limit,
        )
    }

    /// A run by the id its node's engine gave it (what `rea trigger`
    /// prints and every node's history shows), or by the database's own
    /// (rows no node named, and what older binaries showed).
    fn find_run(&self, run_id: &str) -> io::Result<Option<Record>> {
        if let Some(found) = self
            .runs(
                "r.detail ->> 'run' = $2",
                &[&self.cluster, &run_id],
                Some(1),
            )?
            .pop()
        {
            return Ok(Some(found));
        }
        match run_id.parse::<i64>() {
            Ok(id) => Ok(self
                .runs("r.id = $2", &[&self.cluster, &id], Some(1))?
                .pop()),
            Err(_) => Ok(None),
        }
    }

    fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>> {
        Ok(self
            .runs(
                &format!("r.job = $2 and r.status in ({RAN_SQL}, 'cancelled')"),
                &[&self.cluster, &job],
                Some(1),
            )?
            .pop())
    }

    fn unfinished_runs(&self) -> io::Result<Vec<Record>> {
        self.runs("r.status = 'started'", &[&self.cluster], None)
    }

    fn last_occurrences(&self, jobs: &HashSet<String>) -> io::Result<LastOccurrences> {
        let rows = self
            .rows(
                "select job, last_scheduled from rea.jobs where cluster = $1",
                &[&self.cluster],
            )
            .map_err(other)?;
        let map = rows
            .iter()
            .filter_map(|r| {
                let job: String = r.get(0);
                let at: Option<DateTime<Utc>> = r.get(1);
                jobs.contains(&job).then_some((job, at?))
            })
            .collect();
        Ok((map, None))
    }

    /// From the roll-up table `rea.run_days` (migration 8: a trigger on
    /// `rea.runs` counts each final run in its UTC quarter hour), cut in
    /// `zone` here as the embedded roll-up is: the job's runs are not read.
    fn days(
        &self,
        job: &str,
        zone: chrono_tz::Tz,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    ) -> io::Result<Vec<rea_store::history::DayCount>> {
        if to < from {
            return Ok(Vec::new());
        }
        // A UTC day either side: no zone is further off.
        let rows = self
            .rows(
                "select day, slot, ok, bad, ms from rea.run_days
                 where cluster = $1 and job = $2 and day between $3 and $4",
                &[
                    &self.cluster,
                    &job,
                    &(from - chrono::Duration::days(1)),
                    &(to + chrono::Duration::days(1)),
                ],
            )
            .map_err(other)?;
        let mut days: std::collections::BTreeMap<chrono::NaiveDate, rea_store::history::DayCount> =
            std::collections::BTreeMap::new();
        for r in &rows {
            let day: chrono::NaiveDate = r.get(0);
            let slot: i16 = r.get(1);
            let at = day.and_time(chrono::NaiveTime::MIN).and_utc()
                + chrono::Duration::minutes(15 * i64::from(slot));
            let local = at.with_timezone(&zone).date_naive();
            if local < from || local > to {
                continue;
            }
            let d = days.entry(local).or_insert(rea_store::history::DayCount {
                day: local,
                succeeded: 0,
                failed: 0,
                duration_ms: 0,
            });
            d.succeeded += r.get::<_, i64>(2).max(0) as u64;
            d.failed += r.get::<_, i64>(3).max(0) as u64;
            d.duration_ms += r.get::<_, i64>(4).max(0) as u64;
        }
        Ok(days
            .into_values()
            .filter(|d| d.succeeded + d.failed > 0)
            .collect())
    }

    fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>> {
        let rows = self
            .rows(
                "select job,
                        count(*) filter (where status not in ('skipped', 'started', 'missed', 'queued')),
                        count(*) filter (where status = 'skipped'),
                        max(coalesce(started_at, claimed_at)) filter (where status = 'succeeded')
                 from rea.runs where cluster = $1 group by job",
                &[&self.cluster],
            )
            .map_err(other)?;
        let mut out = HashMap::new();
        for r in rows {
            let job: String = r.get(0);
            let last = self.latest_final_run(&job)?.map(|rec| RunSummary {
                run: rec.run.clone(),
                attempt: rec.attempt,
                trigger: rec.trigger,
                status: rec.status.unwrap_or(RunStatus::Interrupted),
                scheduled: rec.scheduled,
                started: rec.started,
                ended: rec.ended,
                duration_ms: rec.duration_ms,
                exit_code: rec.exit_code,
                signal: rec.signal,
            });
            out.insert(
                job,
                JobSummary {
                    last,
                    consecutive_failures: 0,
                    total_runs: r.get::<_, i64>(1).max(0) as u64,
                    skipped: r.get::<_, i64>(2).max(0) as u64,
                    last_success: r.get(3),
                },
            );
        }
        Ok(out)
    }
}

impl Reader {
    /// Records `entry` in the audit log, for a change this command made
    /// in the database itself (no daemon answered it): `node` is where
    /// the command ran.
    pub fn audit(&self, node: &str, entry: &rea_core::audit::Entry) -> Result<(), String> {
        let rows = Value::Array(vec![crate::node::audit::row(entry)]);
        self.rt
            .block_on(
                self.client
                    .execute(crate::node::audit::INSERT, &[&self.cluster, &node, &rows]),
            )
            .map(|_| ())
            .map_err(|e| error_text(&e))
    }
}

/// `rea audit` in cluster mode: every node's entries, newest first, each
/// filter in the statement so the limit counts only what is selected.
impl rea_store::audit::AuditReader for Reader {
    fn query(&self, q: &rea_core::audit::Query) -> io::Result<Vec<rea_core::audit::Entry>> {
        use rea_core::audit::{Entry, Outcome};
        let actions: Vec<String> = q.actions.iter().map(|a| a.as_str().to_string()).collect();
        let limit = q
            .limit
            .map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = self
            .rows(
                "select ts, uid, \"user\", tenant, source, action, target, result, code, message, node, params
                 from rea.audit
                 where cluster = $1
                   and ($2::timestamptz is null or ts >= $2)
                   and ($3::timestamptz is null or ts < $3)
                   and ($4::text is null or \"user\" = $4 or uid::text = $4)
                   and ($5::text is null or ($5 = 'system' and tenant is null) or tenant = $5)
                   and (cardinality($6::text[]) = 0 or action = any($6))
                   and ($7::text is null or $7 = any(target))
                   and (not $8 or result = 'refused')
                 order by id desc
                 limit $9",
                &[
                    &self.cluster,
                    &q.since,
                    &q.until,
                    &q.user,
                    &q.tenant,
                    &actions,
                    &q.job,
                    &q.refused,
                    &limit,
                ],
            )
            .map_err(other)?;
        rows.iter()
            .map(|r| {
                let action: String = r.get(5);
                let action =
                    serde_json::from_value(Value::String(action)).map_err(io::Error::other)?;
                let uid: i64 = r.get(1);
                let result: String = r.get(7);
                Ok(Entry {
                    ts: r.get(0),
                    uid: u32::try_from(uid).unwrap_or(u32::MAX),
                    user: r.get(2),
                    tenant: r.get(3),
                    source: r.get(4),
                    action,
                    target: r.get(6),
                    result: if result == "ok" {
                        Outcome::Ok
                    } else {
                        Outcome::Refused
                    },
                    code: r.get(8),
                    message: r.get(9),
                    node: r.get(10),
                    params: r
                        .get::<_, Option<Value>>(11)
                        .and_then(|p| serde_json::from_value(p).ok()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use rea_core::record::RunStatus;

    fn listed(sql: &str) -> Vec<String> {
        sql.split(',')
            .map(|s| s.trim().trim_matches('\'').to_string())
            .collect()
    }

    /// The SQL lists are rea-core's statuses: a new final status or
    /// failure cannot be left out of the cluster's queries.
    #[test]
    fn the_sql_status_lists_are_rea_cores() {
        let ran: Vec<String> = RunStatus::FINAL
            .iter()
            .filter(|s| **s != RunStatus::Skipped)
            .map(|s| s.as_str().to_string())
            .collect();
        assert_eq!(listed(super::RAN_SQL), ran);
        let failed: Vec<String> = RunStatus::FINAL
            .iter()
            .filter(|s| s.is_failure())
            .map(|s| s.as_str().to_string())
            .collect();
        assert_eq!(listed(super::FAILED_SQL), failed);
    }
}
