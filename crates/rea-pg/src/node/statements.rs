//! The statements: the SQL text (`sql/raw/`), prepared once per
//! connection of the main task; a statement's time limit; sending several
//! on one connection at once; the parameters more than one statement
//! takes (a retry policy).
//!
//! Not here: what an answer means (each concern reads its own).

use std::time::Duration;

use rea_core::backoff::RetryPolicy;
use serde_json::{json, Value};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use crate::settings::error_text;

pub(super) const CLAIM: &str = include_str!("../../sql/raw/claim.sql");
pub(super) const ADOPT: &str = include_str!("../../sql/raw/adopt.sql");
pub(super) const HEARTBEAT: &str = include_str!("../../sql/raw/heartbeat.sql");
pub(super) const RUN_STARTED: &str = include_str!("../../sql/raw/run_started.sql");
pub(super) const RUN_ENDED: &str = include_str!("../../sql/raw/run_ended.sql");
pub(super) const LATE_REPORT: &str = include_str!("../../sql/raw/late_report.sql");
pub(super) const LEAVE: &str = include_str!("../../sql/raw/leave.sql");
pub(super) const CLAIM_ONESHOTS: &str = include_str!("../../sql/raw/claim_oneshots.sql");
pub(super) const CLAIM_RETRY: &str = include_str!("../../sql/raw/claim_retry.sql");
pub(super) const PROMOTE_QUEUED: &str = include_str!("../../sql/raw/promote_queued.sql");
pub(super) const SUBMIT_ONESHOTS: &str = include_str!("../../sql/raw/submit_oneshots.sql");

pub(super) const RUN_OUTPUT: &str = include_str!("../../sql/raw/run_output.sql");
pub(super) const NEXT_ONESHOT_DUE: &str = include_str!("../../sql/raw/next_oneshot_due.sql");

/// The main task's prepared statements.
pub(super) struct Stmts {
    pub(super) claim: Statement,
    pub(super) adopt: Statement,
    pub(super) run_started: Statement,
    pub(super) run_ended: Statement,
    pub(super) late_report: Statement,
    pub(super) claim_oneshots: Statement,
    pub(super) claim_retry: Statement,
    pub(super) promote_queued: Statement,
    pub(super) submit_oneshots: Statement,
    pub(super) run_output: Statement,
    pub(super) next_oneshot_due: Statement,
}

impl Stmts {
    /// Prepares every statement on `c`.
    pub(super) async fn prepare(c: &Client) -> Result<Stmts, String> {
        let p = |sql: &'static str| async move { c.prepare(sql).await.map_err(db) };
        Ok(Stmts {
            claim: p(CLAIM).await?,
            adopt: p(ADOPT).await?,
            run_started: p(RUN_STARTED).await?,
            run_ended: p(RUN_ENDED).await?,
            late_report: p(LATE_REPORT).await?,
            claim_oneshots: p(CLAIM_ONESHOTS).await?,
            claim_retry: p(CLAIM_RETRY).await?,
            promote_queued: p(PROMOTE_QUEUED).await?,
            submit_oneshots: p(SUBMIT_ONESHOTS).await?,
            run_output: p(RUN_OUTPUT).await?,
            next_oneshot_due: p(NEXT_ONESHOT_DUE).await?,
        })
    }
}

/// A statement parameter.
pub(super) type P<'a> = &'a (dyn ToSql + Sync);

/// `e` on the way out of a statement: the text for the log.
pub(super) fn db(e: tokio_postgres::Error) -> String {
    error_text(&e)
}

pub(super) async fn within<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.map_err(db),
        Err(_) => Err(format!(
            "the cluster database did not answer within {} ms",
            limit.as_millis()
        )),
    }
}

pub(super) async fn run_status(
    c: &Client,
    run_id: i64,
    io: Duration,
) -> Result<Option<String>, String> {
    Ok(within(
        io,
        c.query_opt("select status from rea.runs where id = $1", &[&run_id]),
    )
    .await?
    .map(|r| r.get(0)))
}

/// A retry policy as the cluster's statements take it.
pub(super) fn retry_json(p: &RetryPolicy) -> Value {
    json!({
        // the store's rule is attempt < attempts: rea's
        // `attempts` counts retries, the store's counts runs
        "attempts": p.attempts + 1,
        "delay_ms": p.delay.as_millis() as u64,
        "max_delay_ms": p.max_delay.as_millis() as u64,
        "factor": p.factor,
        "jitter": p.jitter,
    })
}

/// Polls every future until all are ready, answers in order (tokio-postgres
/// sends a query when its future is first polled, so queries given here go
/// out pipelined on one connection).
pub async fn pipelined<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
