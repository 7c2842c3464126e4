//! The audit log in the cluster database (`rea.audit`, migration 2): the
//! daemon's audit writer hands each entry to [`Sink::record`], which never
//! blocks; a task of its own, on a connection of its own (an audit write
//! never queues behind a claim), inserts what arrived together in one
//! statement and keeps the table to the newest [`KEEP`] rows.
//!
//! The query commands that change the database themselves (`rea pause`,
//! `resume`, `cancel` in cluster mode) write their entry with the same
//! statement (`Reader::audit`).
//!
//! Bounded: the queue holds [`QUEUE`] entries; when it is full (the
//! database is slow or away) entries are dropped and counted, and the
//! count is logged when writing works again. The state directory's
//! `audit.jsonl` has every entry regardless.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rea_core::audit::Entry;
use rea_store::cluster::AuditSink;
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tracing::warn;

use crate::settings::{error_text, Settings};

/// Entries waiting for the database, at most.
pub(super) const QUEUE: usize = 4096;
/// Entries inserted per statement, at most.
const BATCH: usize = 256;
/// Rows the table keeps (per cluster, roughly: ids are drawn from one
/// sequence), trimmed every [`TRIM_EVERY`] inserts.
pub(crate) const KEEP: i64 = 1_000_000;
const TRIM_EVERY: u64 = 1024;

/// The daemon's side: a bounded queue to the task.
pub(super) struct Sink {
    pub(super) tx: mpsc::Sender<Entry>,
    pub(super) dropped: Arc<AtomicU64>,
}

impl AuditSink for Sink {
    fn record(&self, entry: &Entry) {
        if self.tx.try_send(entry.clone()).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) const INSERT: &str = "insert into rea.audit
      (cluster, ts, node, uid, \"user\", tenant, source, action, target, result, code, message, params)
    select $1, e.ts, $2, e.uid, e.usr, e.tenant, e.source, e.action,
      coalesce((select array_agg(t) from jsonb_array_elements_text(e.target) t), '{}'),
      e.result, e.code, e.message, e.params
    from jsonb_to_recordset($3::jsonb) as e(ts timestamptz, uid bigint, usr text, tenant text,
      source text, action text, target jsonb, result text, code text, message text, params jsonb)";

const TRIM: &str = "delete from rea.audit
    where cluster = $1 and id < (select max(id) from rea.audit where cluster = $1) - $2";

/// The task: connects when it has something to write (and again after an
/// error), inserts batches, trims.
pub(super) async fn audit_loop(
    settings: Settings,
    mut rx: mpsc::Receiver<Entry>,
    dropped: Arc<AtomicU64>,
) {
    let mut client: Option<Client> = None;
    let mut written: u64 = 0;
    let mut batch = Vec::with_capacity(BATCH);
    let mut failing = false;
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let result = write(&settings, &mut client, &batch, &mut written).await;
        match result {
            Ok(()) => {
                let lost = dropped.swap(0, Ordering::Relaxed);
                if failing || lost > 0 {
                    warn!(lost, "cluster: audit entries written to the database again");
                }
                failing = false;
            }
            Err(e) => {
                client = None;
                dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if !failing {
                    warn!("cluster: cannot write the audit log to the database: {e}; entries are dropped (audit.jsonl has them)");
                }
                failing = true;
            }
        }
        batch.clear();
    }
}

async fn write(
    settings: &Settings,
    client: &mut Option<Client>,
    batch: &[Entry],
    written: &mut u64,
) -> Result<(), String> {
    if client.as_ref().is_none_or(Client::is_closed) {
        *client = Some(settings.connect("rea audit").await?);
    }
    let Some(c) = client.as_ref() else {
        return Err("no connection".into());
    };
    let rows: Vec<serde_json::Value> = batch.iter().map(row).collect();
    let rows = serde_json::Value::Array(rows);
    c.execute(INSERT, &[&settings.cluster, &settings.node, &rows])
        .await
        .map_err(|e| error_text(&e))?;
    let before = *written / TRIM_EVERY;
    *written += batch.len() as u64;
    if *written / TRIM_EVERY != before {
        c.execute(TRIM, &[&settings.cluster, &KEEP])
            .await
            .map_err(|e| error_text(&e))?;
    }
    Ok(())
}

/// An entry as the insert's JSON row.
pub(crate) fn row(e: &Entry) -> serde_json::Value {
    serde_json::json!({
        "ts": rea_core::record::format_ts(e.ts),
        "uid": e.uid,
        "usr": e.user,
        "tenant": e.tenant,
        "source": e.source,
        "action": e.action.as_str(),
        "target": e.target,
        "result": match e.result {
            rea_core::audit::Outcome::Ok => "ok",
            rea_core::audit::Outcome::Refused => "refused",
        },
        "code": e.code,
        "message": e.message,
        "params": e.params,
    })
}
