//! The backend conformance kit: what every history backend must answer,
//! checked against naive oracles over the records that were appended.
//! A backend passes a factory of fresh, empty instances to one of two
//! entry points, by what it keeps:
//!
//! - [`history_backend`]: a log of lines, every record as appended (the
//!   JSON-lines backend, in its own tests). Any sequence of records.
//! - [`run_store`]: a store of runs (the cluster database, from the root
//!   crate's `tests/pg_history.rs`): one record per run the store granted,
//!   its newest line, in the order the runs were granted; the run's id,
//!   fence, occurrence and times are the store's (the properties
//!   [`crate::history::HistoryReader`] documents for such a store). The
//!   histories are those a node can write: a run's lines belong to one job,
//!   a `started` line before at most one final line.
//!
//! Both check every query against the same naive oracle ([`naive_query`]);
//! a store of runs is checked against it over the runs as the store keeps
//! them, once its listing of everything has shown that those are the
//! records appended, folded by run, with only the store's own fields
//! changed.
//!
//! The audit log's readers have their own entry point, [`audit_backend`],
//! against `rea_core::audit::Query::matches`.
//!
//! Enabled by the `conformance` feature (it brings proptest).

use std::any::Any;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rea_core::record::{Event, Record, RunStatus, Trigger};

use rea_core::audit::{Action, Entry, Outcome, Query as AuditQuery};

use crate::audit::AuditReader;
use crate::history::{HistoryReader, HistoryWriter, Query};

/// A fresh, empty backend for one test case.
pub struct Fresh {
    pub writer: Box<dyn HistoryWriter>,
    pub reader: Box<dyn HistoryReader>,
    /// Whatever must live as long as the case (a temporary directory, a
    /// database schema).
    pub keep: Box<dyn Any>,
}

/// A runner of `cases` cases that keeps no failure files (a backend's
/// tests run anywhere, read-only trees included).
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// A fresh backend with `records` appended, in order.
fn appended(fresh: &impl Fn() -> Fresh, records: &[Record]) -> Result<Fresh, TestCaseError> {
    let mut backend = fresh();
    for r in records {
        backend
            .writer
            .append(r)
            .map_err(|e| TestCaseError::fail(format!("append: {e}")))?;
    }
    Ok(backend)
}

/// Runs the kit: `cases` random histories, each appended to a fresh
/// backend from `fresh` and queried several ways. Panics with the failing
/// history and query, as a test should.
pub fn history_backend(cases: u32, fresh: impl Fn() -> Fresh) {
    let mut runner = runner(cases);
    let strategy = (arb_history(), prop::collection::vec(arb_query(), 1..8));
    let result = runner.run(&strategy, |(records, queries)| {
        let backend = appended(&fresh, &records)?;
        let reader = &backend.reader;
        for q in &queries {
            let got = reader
                .query(q)
                .map_err(|e| TestCaseError::fail(format!("query: {e}")))?;
            prop_assert_eq!(got, naive_query(&records, q), "{:?}", q);
        }
        for id in ["r0", "r3", "r7", "nope"] {
            let got = reader
                .find_run(id)
                .map_err(|e| TestCaseError::fail(format!("find_run: {e}")))?;
            let want = records
                .iter()
                .rev()
                .find(|r| r.event == Event::Run && r.run.as_deref() == Some(id));
            prop_assert_eq!(got.as_ref(), want, "find_run({})", id);
        }
        for job in JOBS {
            let got = reader
                .latest_final_run(job)
                .map_err(|e| TestCaseError::fail(format!("latest_final_run: {e}")))?;
            let want = records.iter().rev().find(|r| {
                r.event == Event::Run
                    && r.job.as_deref() == Some(job)
                    && r.status
                        .is_some_and(|s| s.is_final() && s != RunStatus::Skipped)
            });
            prop_assert_eq!(got.as_ref(), want, "latest_final_run({})", job);
        }
        let got = reader
            .unfinished_runs()
            .map_err(|e| TestCaseError::fail(format!("unfinished_runs: {e}")))?;
        prop_assert_eq!(got, naive_unfinished(&records), "unfinished_runs");
        Ok(())
    });
    if let Err(e) = result {
        panic!("history backend does not conform: {e}");
    }
    let mut runner = self::runner(cases);
    let result = runner.run(&arb_days(), |records| {
        let backend = appended(&fresh, &records)?;
        check_days(&*backend.reader, &records)
    });
    if let Err(e) = result {
        panic!("history backend's daily counts do not conform: {e}");
    }
}

/// Zones the daily counts are asked in: UTC, one with DST, one a quarter
/// hour off the hour.
const ZONES: [chrono_tz::Tz; 3] = [
    chrono_tz::UTC,
    chrono_tz::America::New_York,
    chrono_tz::Asia::Kathmandu,
];

/// Every job's days, in each of [`ZONES`], over the whole span of
/// `records` and over a part of it, against [`crate::history::naive_days`].
fn check_days(reader: &dyn HistoryReader, records: &[Record]) -> Result<(), TestCaseError> {
    let (Some(first), Some(last)) = (
        records.iter().map(|r| r.ts).min(),
        records.iter().map(|r| r.ts).max(),
    ) else {
        return Ok(());
    };
    for zone in ZONES {
        let from = first.with_timezone(&zone).date_naive() - chrono::Duration::days(1);
        let to = last.with_timezone(&zone).date_naive() + chrono::Duration::days(1);
        let middle = from + (to - from) / 2;
        for (from, to) in [(from, to), (middle, to), (from, middle)] {
            for job in JOBS.iter().chain(&["zz"]) {
                let got = reader
                    .days(job, zone, from, to)
                    .map_err(|e| TestCaseError::fail(format!("days: {e}")))?;
                let want = crate::history::naive_days(records, job, zone, from, to);
                prop_assert_eq!(got, want, "days({}, {}, {}..={})", job, zone, from, to);
            }
        }
    }
    Ok(())
}

/// Runs of the jobs of [`JOBS`] spread over the last 40 days (at minutes
/// that cross midnights in every zone of [`ZONES`]), in `ts` order, with
/// durations.
fn arb_days() -> impl Strategy<Value = Vec<Record>> {
    let statuses = [
        RunStatus::Started,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Skipped,
        RunStatus::Killed,
    ];
    prop::collection::vec(
        (
            0usize..JOBS.len(),
            0usize..statuses.len(),
            0i64..40 * 24 * 60,
            0u64..5000,
        ),
        0..60,
    )
    .prop_map(move |mut items| {
        items.sort_by_key(|i| i.2);
        let start = (Utc::now() - chrono::Duration::days(41))
            .date_naive()
            .and_time(chrono::NaiveTime::MIN)
            .and_utc();
        items
            .into_iter()
            .enumerate()
            .map(|(i, (job, status, minute, ms))| {
                let at = start + chrono::Duration::minutes(minute);
                let mut r = Record::new(Event::Run, at);
                r.job = Some(JOBS[job].to_string());
                r.run = Some(format!("d{i}"));
                r.status = Some(statuses[status]);
                r.trigger = Some(Trigger::Schedule);
                r.duration_ms = Some(ms);
                r
            })
            .collect()
    })
}

/// Jobs of the system and of two users (`u/a`: a user's job that shares
/// its own name with the system's `a`).
const JOBS: [&str; 6] = ["a", "b", "c", "a\"b", "u/a", "v/a"];

fn ts(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap_or_default()
}

/// Records with increasing `ts`: runs of a few jobs (one whose name needs
/// escaping) in every status, with and without output that mentions other
/// jobs, and daemon starts.
fn arb_history() -> impl Strategy<Value = Vec<Record>> {
    let statuses = [
        RunStatus::Started,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Skipped,
        RunStatus::OomKilled,
    ];
    prop::collection::vec(
        (0usize..JOBS.len(), 0usize..8, 0usize..2, 0usize..200),
        0..120,
    )
    .prop_map(move |items| {
        items
            .into_iter()
            .enumerate()
            .map(|(i, (job, kind, extra, out_len))| {
                let at = ts(i as i64);
                let mut r = if kind < statuses.len() {
                    let mut r = Record::new(Event::Run, at);
                    r.job = Some(JOBS[job].to_string());
                    // Every other run id repeats, so a started line and
                    // its final line belong together.
                    r.run = Some(format!("r{}", i / 2));
                    r.attempt = Some(1);
                    r.status = Some(statuses[kind]);
                    r.trigger = Some(Trigger::Schedule);
                    r.scheduled = Some(at);
                    r.started = Some(at);
                    r
                } else if kind == statuses.len() {
                    Record::new(Event::DaemonStarted, at)
                } else {
                    // An alert raised or resolved (no status, a reason).
                    let mut r = rea_core::alert::AlertEvent {
                        job: JOBS[job].to_string(),
                        kind: rea_core::alert::AlertKind::Late,
                        state: if i % 2 == 0 {
                            rea_core::alert::AlertState::Raised
                        } else {
                            rea_core::alert::AlertState::Resolved
                        },
                        reason: "not started within 5m".into(),
                        at,
                        due: Some(at),
                        run: None,
                    }
                    .record();
                    r.scheduled = Some(at);
                    r
                };
                if extra == 1 {
                    // Another job's name inside the output must not
                    // confuse a backend's pre-filter.
                    r.output = Some(format!("\"job\":\"b\" {}", "o".repeat(out_len)));
                }
                r
            })
            .collect()
    })
}

fn arb_query() -> impl Strategy<Value = Query> {
    (
        prop::option::of(prop::sample::select(vec![
            "a", "b", "c", "a\"b", "zz", "u/a", "u/b", "v/a",
        ])),
        prop::sample::subsequence(
            vec![
                RunStatus::Started,
                RunStatus::Succeeded,
                RunStatus::Failed,
                RunStatus::Skipped,
                RunStatus::OomKilled,
            ],
            0..3,
        ),
        prop::option::of(0i64..130),
        prop::option::of(0i64..130),
        prop::option::of(0usize..20),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop::option::of(prop::sample::select(vec!["u", "v", "a"])),
    )
        .prop_map(
            |(
                job,
                statuses,
                since,
                until,
                limit,
                (runs_only, with_missed, with_alerts),
                tenant,
            )| {
                Query {
                    job: job.map(str::to_string),
                    statuses,
                    since: since.map(ts),
                    until: until.map(ts),
                    limit,
                    runs_only,
                    with_missed,
                    with_alerts,
                    tenant: tenant.map(str::to_string),
                }
            },
        )
}

/// The query semantics written out naively (not through `Query::matches`,
/// which backends may use): newest first, every filter.
pub fn naive_query(records: &[Record], q: &Query) -> Vec<Record> {
    let mut out: Vec<Record> = records
        .iter()
        .rev()
        .filter(|r| q.job.is_none() || r.job == q.job)
        .filter(|r| {
            q.tenant.as_ref().is_none_or(|t| {
                r.job
                    .as_deref()
                    .and_then(|j| j.split_once('/'))
                    .is_some_and(|(owner, _)| owner == t)
            })
        })
        .filter(|r| {
            (q.with_missed && r.event == Event::Missed)
                || (q.with_alerts && r.event == Event::Alert)
                || ((q.statuses.is_empty() || r.status.is_some_and(|s| q.statuses.contains(&s)))
                    && (!q.runs_only || r.event == Event::Run))
        })
        .filter(|r| q.since.is_none_or(|since| r.ts >= since))
        .filter(|r| q.until.is_none_or(|until| r.ts < until))
        .cloned()
        .collect();
    if let Some(limit) = q.limit {
        out.truncate(limit);
    }
    out
}

/// `started` lines after the newest `daemon_started` without a final line
/// of the same run and attempt after them; newest first.
fn naive_unfinished(records: &[Record]) -> Vec<Record> {
    let since = records
        .iter()
        .rposition(|r| r.event == Event::DaemonStarted)
        .map_or(0, |i| i + 1);
    let tail = &records[since..];
    let mut out: Vec<Record> = tail
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            r.event == Event::Run
                && r.status == Some(RunStatus::Started)
                && !tail[i + 1..].iter().any(|f| {
                    f.event == Event::Run
                        && f.run == r.run
                        && f.attempt == r.attempt
                        && f.status.is_some_and(RunStatus::is_final)
                })
        })
        .map(|(_, r)| r.clone())
        .collect();
    out.reverse();
    out
}

/// Runs the kit on a store of runs (see the module doc): `cases` random
/// histories a node could write, each appended to a fresh store from
/// `fresh` and queried several ways. Panics with the failing history and
/// query.
pub fn run_store(cases: u32, fresh: impl Fn() -> Fresh) {
    let mut runner = runner(cases);
    let strategy = (arb_runs(), prop::collection::vec(arb_query(), 1..8));
    let result = runner.run(&strategy, |(records, queries)| {
        let backend = appended(&fresh, &records)?;
        let reader = &backend.reader;
        let fail = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| TestCaseError::fail(format!("{what}: {e}"))
        };
        // Everything, newest first: the appended runs as the store keeps
        // them, which gives the store's own fields of each.
        let listed = reader.query(&Query::default()).map_err(fail("query"))?;
        let kept = runs_of(&records);
        prop_assert_eq!(listed.len(), kept.len(), "one record per run");
        let mut stored: Vec<Record> = kept
            .iter()
            .rev()
            .zip(&listed)
            .map(|(k, l)| as_stored(k, l))
            .collect();
        prop_assert_eq!(&listed, &stored, "the runs as appended");
        for pair in listed.windows(2) {
            prop_assert!(
                pair[0].cluster_run > pair[1].cluster_run,
                "newest first: runs in the order the store granted them"
            );
        }
        stored.reverse();
        let mut times: Vec<DateTime<Utc>> = stored.iter().map(|r| r.ts).collect();
        times.sort();
        for q in &queries {
            let q = on_store_clock(q, &times);
            let got = reader.query(&q).map_err(fail("query"))?;
            prop_assert_eq!(got, naive_query(&stored, &q), "{:?}", q);
        }
        for want in &stored {
            let id = want.run.clone().unwrap_or_default();
            let got = reader.find_run(&id).map_err(fail("find_run"))?;
            prop_assert_eq!(got.as_ref(), Some(want), "find_run({})", id);
        }
        for id in ["nope", "0", "-1"] {
            let got = reader.find_run(id).map_err(fail("find_run"))?;
            prop_assert_eq!(got, None, "find_run({})", id);
        }
        for job in JOBS {
            let got = reader
                .latest_final_run(job)
                .map_err(fail("latest_final_run"))?;
            let want = stored.iter().rev().find(|r| {
                r.job.as_deref() == Some(job)
                    && r.status
                        .is_some_and(|s| s.is_final() && s != RunStatus::Skipped)
            });
            prop_assert_eq!(got.as_ref(), want, "latest_final_run({})", job);
        }
        // A store of runs keeps no daemon starts: a run is unfinished
        // while its newest line is `started`.
        let got = reader.unfinished_runs().map_err(fail("unfinished_runs"))?;
        let want: Vec<Record> = stored
            .iter()
            .rev()
            .filter(|r| r.status == Some(RunStatus::Started))
            .cloned()
            .collect();
        prop_assert_eq!(got, want, "unfinished_runs");
        // The daily counts of the runs as the store keeps them (on its
        // clock: today and yesterday).
        check_days(&**reader, &stored)?;
        Ok(())
    });
    if let Err(e) = result {
        panic!("run store does not conform: {e}");
    }
}

/// What a store of runs says on its own: which node ran a run, and what a
/// node declared dead reported too late (`detail` keys it adds).
const STORE_DETAIL: [&str; 2] = ["node", "late_report"];

/// `kept` (a run's newest line as appended) with the fields a store of
/// runs assigns taken from `listed` (the store's record of it): its id
/// (`run`, `cluster_run`), `fence`, `scheduled` (the store's instant for
/// a run it granted), `ts` (the store's clock), and what it adds to
/// `detail`. Equal to `listed` if the store kept everything else.
fn as_stored(kept: &Record, listed: &Record) -> Record {
    let mut r = kept.clone();
    r.run.clone_from(&listed.run);
    r.cluster_run = listed.cluster_run;
    r.fence = listed.fence;
    r.scheduled = listed.scheduled;
    r.ts = listed.ts;
    let own = listed
        .detail
        .as_ref()
        .and_then(|d| d.as_object())
        .is_some_and(|o| o.keys().all(|k| STORE_DETAIL.contains(&k.as_str())));
    if kept.detail.is_none() && own {
        r.detail.clone_from(&listed.detail);
    }
    r
}

/// The runs of a history, in the order they began (granted), each as its
/// newest line; nothing else (daemon starts are the node's own).
fn runs_of(records: &[Record]) -> Vec<Record> {
    let mut order: Vec<&str> = Vec::new();
    let mut newest: std::collections::HashMap<&str, &Record> = Default::default();
    for r in records
        .iter()
        .filter(|r| matches!(r.event, Event::Run | Event::Missed))
    {
        let Some(id) = r.run.as_deref() else { continue };
        if newest.insert(id, r).is_none() {
            order.push(id);
        }
    }
    order.iter().map(|id| newest[id].clone()).collect()
}

/// `q` with its bounds moved onto the store's clock: the kit's instant
/// `ts(k)` (k in 0..130) becomes the k-th of the store's times spread over
/// that range, so bounds fall on, between and beyond the records.
fn on_store_clock(q: &Query, times: &[DateTime<Utc>]) -> Query {
    let moved = |t: DateTime<Utc>| {
        let k = (t - ts(0)).num_seconds().clamp(0, 129) as usize;
        let i = k * (times.len() + 1) / 130;
        match (times.get(i), times.last()) {
            (Some(t), _) => *t,
            (None, Some(last)) => *last + chrono::Duration::milliseconds(1),
            (None, None) => t,
        }
    };
    Query {
        since: q.since.map(moved),
        until: q.until.map(moved),
        ..q.clone()
    }
}

/// Histories a node writes to a store of runs: runs of a few jobs (one
/// whose name needs escaping), each a `started` line (with its pid) and
/// later at most one final line (with output that mentions other jobs,
/// sometimes), or a run granted and skipped at once; occurrences passed
/// over (`missed`: the claim that passed over one records it, as the store
/// keeps it); and daemon starts, which the store does not keep. `ts`
/// increases.
fn arb_runs() -> impl Strategy<Value = Vec<Record>> {
    let ends = [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Killed,
        RunStatus::OomKilled,
    ];
    prop::collection::vec((0usize..8, 0usize..4, 0usize..8, 0usize..200), 0..48).prop_map(
        move |items| {
            let mut out = Vec::new();
            // Runs started and not yet ended: (their started line).
            let mut open: Vec<Record> = Vec::new();
            let mut runs = 0;
            for (i, (action, job, pick, out_len)) in items.into_iter().enumerate() {
                let at = ts(i as i64);
                match action {
                    0 => out.push(Record::new(Event::DaemonStarted, at)),
                    1..=3 => {
                        let mut r = Record::new(Event::Run, at);
                        r.job = Some(JOBS[job].to_string());
                        r.run = Some(format!("r{runs}"));
                        runs += 1;
                        r.attempt = Some(1);
                        r.trigger = Some(Trigger::Manual);
                        r.scheduled = Some(at);
                        if action == 3 && pick == 0 {
                            // Granted, then not run (the daemon stopping).
                            r.status = Some(RunStatus::Skipped);
                            r.reason = Some("the daemon is shutting down".into());
                            out.push(r);
                        } else {
                            r.status = Some(RunStatus::Started);
                            r.started = Some(at);
                            r.pid = Some(1000 + runs);
                            out.push(r.clone());
                            open.push(r);
                        }
                    }
                    7 => {
                        let mut r = Record::new(Event::Missed, at);
                        r.job = Some(JOBS[job].to_string());
                        r.run = Some(format!("r{runs}"));
                        runs += 1;
                        r.attempt = Some(1);
                        r.trigger = Some(Trigger::Schedule);
                        r.scheduled = Some(at);
                        r.count = Some(1);
                        out.push(r);
                    }
                    _ if open.is_empty() => {}
                    _ => {
                        let mut r = open.remove(pick % open.len());
                        let status = ends[pick % ends.len()];
                        r.ts = at;
                        r.status = Some(status);
                        r.ended = Some(at);
                        r.duration_ms = r.started.map(|s| (at - s).num_milliseconds() as u64);
                        r.exit_code = match status {
                            RunStatus::Succeeded => Some(0),
                            RunStatus::Failed => Some(1),
                            _ => None,
                        };
                        // An out-of-memory end as this build writes it, and
                        // (every other time) a failure from before it was
                        // a status: both must read back as written.
                        if status == RunStatus::OomKilled
                            || (status == RunStatus::Failed && out_len % 3 == 0)
                        {
                            r.signal = Some(9);
                            r.oom_killed = Some(true);
                        }
                        if out_len % 2 == 1 {
                            let text = format!("\"job\":\"b\" {}", "o".repeat(out_len));
                            r.output_bytes = Some(text.len() as u64);
                            r.output = Some(text);
                        }
                        out.push(r);
                    }
                }
            }
            out
        },
    )
}

/// Appends entries to an audit backend, in order (the daemon's writer, or
/// a node's statement).
pub type AuditWrite = Box<dyn FnMut(&[Entry])>;

/// A fresh, empty audit log for one case of [`audit_backend`].
pub struct FreshAudit {
    pub write: AuditWrite,
    pub reader: Box<dyn AuditReader>,
    /// Whatever must live as long as the case.
    pub keep: Box<dyn Any>,
}

/// The audit log's kit: `cases` random logs, each written to a fresh
/// backend and queried several ways; every answer must be the entries
/// `Query::matches` selects, newest (last written) first, cut at the
/// limit. A store may name the node that wrote an entry (`node`): answers
/// are compared without it.
pub fn audit_backend(cases: u32, fresh: impl Fn() -> FreshAudit) {
    let mut runner = runner(cases);
    let strategy = (
        prop::collection::vec(arb_entry(), 0..24),
        prop::collection::vec(arb_audit_query(), 1..8),
    );
    let result = runner.run(&strategy, |(mut entries, queries)| {
        // Written in the order they were answered.
        let base = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        for (i, e) in entries.iter_mut().enumerate() {
            e.ts = base + chrono::Duration::milliseconds(250 * i as i64);
        }
        let mut backend = fresh();
        (backend.write)(&entries);
        for q in &queries {
            let mut got = backend
                .reader
                .query(q)
                .map_err(|e| TestCaseError::fail(format!("query: {e}")))?;
            for e in &mut got {
                e.node = None;
            }
            let want: Vec<Entry> = entries
                .iter()
                .rev()
                .filter(|e| q.matches(e))
                .take(q.limit.unwrap_or(usize::MAX))
                .cloned()
                .collect();
            prop_assert_eq!(got, want, "{:?}", q);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("audit backend does not conform: {e}");
    }
}

const AUDIT_USERS: [&str; 3] = ["root", "alice", "bob"];
const AUDIT_TARGETS: [&str; 5] = ["backup", "alice/backup", "bob/x", "tag:nightly", "a\"b"];

fn arb_entry() -> impl Strategy<Value = Entry> {
    (
        0..AUDIT_USERS.len(),
        prop::sample::select(Action::ALL.to_vec()),
        prop::collection::vec(prop::sample::select(AUDIT_TARGETS.to_vec()), 0..3),
        any::<bool>(),
        prop::sample::select(vec!["cli", "socket", "top"]),
    )
        .prop_map(|(u, action, target, refused, source)| Entry {
            ts: DateTime::from_timestamp(0, 0).unwrap_or_default(),
            uid: if u == 0 { 0 } else { 1000 + u as u32 },
            user: (u != 2 || refused).then(|| AUDIT_USERS[u].to_string()),
            tenant: (u != 0).then(|| AUDIT_USERS[u].to_string()),
            source: source.to_string(),
            action,
            target: target.into_iter().map(str::to_string).collect(),
            result: if refused {
                Outcome::Refused
            } else {
                Outcome::Ok
            },
            code: refused.then(|| "unknown_job".to_string()),
            message: refused.then(|| "no job named \"x\"".to_string()),
            node: None,
            // A trigger's parameters are kept, refused or not.
            params: (action == Action::Trigger).then(|| {
                [("DATE".to_string(), "2026-11-30".to_string())]
                    .into_iter()
                    .collect()
            }),
        })
}

fn arb_audit_query() -> impl Strategy<Value = AuditQuery> {
    let base = 1_800_000_000i64;
    (
        prop::option::of(0i64..6),
        prop::option::of(0i64..6),
        prop::option::of(prop::sample::select(vec![
            "root", "alice", "bob", "1002", "nobody",
        ])),
        prop::option::of(prop::sample::select(vec!["system", "alice", "bob"])),
        prop::collection::vec(prop::sample::select(Action::ALL.to_vec()), 0..3),
        prop::option::of(prop::sample::select(AUDIT_TARGETS.to_vec())),
        any::<bool>(),
        prop::option::of(0usize..6),
    )
        .prop_map(
            move |(since, until, user, tenant, actions, job, refused, limit)| AuditQuery {
                since: since.and_then(|s| DateTime::from_timestamp(base + s, 0)),
                until: until.and_then(|u| DateTime::from_timestamp(base + u, 0)),
                user: user.map(str::to_string),
                tenant: tenant.map(str::to_string),
                actions,
                job: job.map(str::to_string),
                refused,
                limit,
            },
        )
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::history::{JobSummary, LastOccurrences, WriterHealth};

    /// The simplest store of runs: a row per run, updated in place, its
    /// id, occurrence and times the store's (a clock of its own that
    /// advances a millisecond a write).
    #[derive(Default)]
    struct Rows {
        rows: Vec<Record>,
        ids: HashMap<String, usize>,
        clock: i64,
    }

    struct Runs(Arc<Mutex<Rows>>);

    impl HistoryWriter for Runs {
        fn append(&mut self, r: &Record) -> io::Result<()> {
            let mut s = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            s.clock += 1;
            let now = ts(1_000_000) + chrono::Duration::milliseconds(s.clock);
            let (Some(id), Event::Run | Event::Missed) = (r.run.clone(), r.event) else {
                return Ok(());
            };
            let mut row = r.clone();
            row.ts = now;
            match s.ids.get(&id).copied() {
                Some(i) => {
                    let old = &s.rows[i];
                    row.run.clone_from(&old.run);
                    row.cluster_run = old.cluster_run;
                    row.scheduled = old.scheduled;
                    s.rows[i] = row;
                }
                None => {
                    let n = s.rows.len();
                    row.run = Some((n + 1).to_string());
                    row.cluster_run = Some(n as i64 + 1);
                    row.scheduled = Some(now);
                    s.rows.push(row);
                    s.ids.insert(id, n);
                }
            }
            Ok(())
        }

        fn health(&self) -> WriterHealth {
            WriterHealth::default()
        }
    }

    impl HistoryReader for Runs {
        fn query(&self, q: &Query) -> io::Result<Vec<Record>> {
            let s = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            let hits = s.rows.iter().rev().filter(|r| q.matches(r)).cloned();
            Ok(hits.take(q.limit.unwrap_or(usize::MAX)).collect())
        }
        fn find_run(&self, run_id: &str) -> io::Result<Option<Record>> {
            let s = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            Ok(s.rows
                .iter()
                .find(|r| r.run.as_deref() == Some(run_id))
                .cloned())
        }
        fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>> {
            let s = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            Ok(s.rows
                .iter()
                .rev()
                .find(|r| {
                    r.job.as_deref() == Some(job)
                        && r.status
                            .is_some_and(|s| s.is_final() && s != RunStatus::Skipped)
                })
                .cloned())
        }
        fn unfinished_runs(&self) -> io::Result<Vec<Record>> {
            let s = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            let started = s.rows.iter().rev();
            Ok(started
                .filter(|r| r.status == Some(RunStatus::Started))
                .cloned()
                .collect())
        }
        fn last_occurrences(&self, _: &HashSet<String>) -> io::Result<LastOccurrences> {
            Ok((HashMap::new(), None))
        }
        fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>> {
            Ok(HashMap::new())
        }
    }

    /// The kit for stores of runs passes on a store that does what
    /// `HistoryReader` documents and nothing more, so it runs without a
    /// database too (the database runs it in `tests/pg_history.rs`).
    #[test]
    fn a_store_of_runs_as_documented_conforms() {
        run_store(200, || {
            let rows = Arc::new(Mutex::new(Rows::default()));
            Fresh {
                writer: Box::new(Runs(rows.clone())),
                reader: Box::new(Runs(rows)),
                keep: Box::new(()),
            }
        });
    }
}
