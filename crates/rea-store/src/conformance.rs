//! The backend conformance kit: what every history backend must answer,
//! checked against naive oracles over the records that were appended. The
//! JSON-lines backend runs it in its own tests; a new backend (a shared
//! database) calls [`history_backend`] with a factory of fresh, empty
//! instances and must pass unchanged.
//!
//! Enabled by the `conformance` feature (it brings proptest).

use std::any::Any;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rea_core::record::{Event, Record, RunStatus, Trigger};

use crate::history::{HistoryReader, HistoryWriter, Query};

/// A fresh, empty backend for one test case.
pub struct Fresh {
    pub writer: Box<dyn HistoryWriter>,
    pub reader: Box<dyn HistoryReader>,
    /// Whatever must live as long as the case (a temporary directory, a
    /// database schema).
    pub keep: Box<dyn Any>,
}

/// Runs the kit: `cases` random histories, each appended to a fresh
/// backend from `fresh` and queried several ways. Panics with the failing
/// history and query, as a test should.
pub fn history_backend(cases: u32, fresh: impl Fn() -> Fresh) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (arb_history(), prop::collection::vec(arb_query(), 1..8));
    let result = runner.run(&strategy, |(records, queries)| {
        let mut backend = fresh();
        for r in &records {
            backend
                .writer
                .append(r)
                .map_err(|e| TestCaseError::fail(format!("append: {e}")))?;
        }
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
}

const JOBS: [&str; 4] = ["a", "b", "c", "a\"b"];

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
    ];
    prop::collection::vec((0usize..4, 0usize..6, 0usize..2, 0usize..200), 0..120).prop_map(
        move |items| {
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
                    } else {
                        Record::new(Event::DaemonStarted, at)
                    };
                    if extra == 1 {
                        // Another job's name inside the output must not
                        // confuse a backend's pre-filter.
                        r.output = Some(format!("\"job\":\"b\" {}", "o".repeat(out_len)));
                    }
                    r
                })
                .collect()
        },
    )
}

fn arb_query() -> impl Strategy<Value = Query> {
    (
        prop::option::of(prop::sample::select(vec!["a", "b", "c", "a\"b", "zz"])),
        prop::sample::subsequence(
            vec![
                RunStatus::Started,
                RunStatus::Succeeded,
                RunStatus::Failed,
                RunStatus::Skipped,
            ],
            0..3,
        ),
        prop::option::of(0i64..130),
        prop::option::of(0i64..130),
        prop::option::of(0usize..20),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(job, statuses, since, until, limit, runs_only, with_missed)| Query {
                job: job.map(str::to_string),
                statuses,
                since: since.map(ts),
                until: until.map(ts),
                limit,
                runs_only,
                with_missed,
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
            (q.with_missed && r.event == Event::Missed)
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
