//! The audit log's daemon side: every state-changing control request
//! (trigger, pause, resume, cancel, submit, edit, reload, kill), refused
//! ones included, becomes one `rea_core::audit::Entry` once the daemon has
//! answered it, written to `audit.jsonl` in the state directory (and the
//! cluster database in cluster mode) by a thread of its own.
//!
//! What it costs is bounded. The loop does no I/O for it: it wraps the
//! request's reply channel ([`Audit::watch`]) in a small task that waits
//! for the answer, queues the entry and only then passes the answer on.
//! The queue to the writer holds [`QUEUE`] entries; when it is full the
//! answer waits until its entry fits, so a client sending requests in a
//! loop is slowed down (not the loop, not other clients' answers already
//! queued) and nothing is lost. Each entry is small whatever the request
//! held (`Entry::bounded`), and the file is rotated by size
//! (`rea_store::audit`). An entry the writer cannot write (a full disk) is
//! counted and said in the log, never retried from memory.
//!
//! What does not live here: the entry's fields and bounds (rea-core), the
//! file (rea-store), answering `rea audit` for users (`users.rs`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rea_core::audit::{Action, Entry, Outcome};
use rea_core::tenant::Tenant;
use rea_store::audit::AuditFile;
use rea_store::cluster::AuditSink;
use tokio::sync::{mpsc, oneshot};
use tracing::error;

use crate::control::{Peer, Reply, Request, Response};
use crate::users::Scope;

/// Entries waiting for the writer, at most.
pub(crate) const QUEUE: usize = 4096;

/// Entries the writer takes from the queue per write.
const BATCH: usize = 512;

/// The daemon's handle on its audit log: cheap to clone into the tasks
/// that wait for answers.
#[derive(Clone)]
pub(crate) struct Audit {
    tx: mpsc::Sender<Entry>,
    /// Entries answered and not yet written (queued, waiting for room in
    /// the queue, or in the writer's hands).
    unwritten: Arc<AtomicUsize>,
}

/// An entry being made: what was asked and by whom, before the answer.
pub(crate) struct Pending {
    entry: Entry,
}

impl Audit {
    /// Starts the writer thread on `state_dir`'s `audit.jsonl`; entries
    /// also go to `cluster` (the cluster database) when given.
    pub(crate) fn start(
        state_dir: &Path,
        cluster: Option<Box<dyn AuditSink>>,
    ) -> Result<Audit, String> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let file = AuditFile::new(state_dir);
        let unwritten = Arc::new(AtomicUsize::new(0));
        let count = unwritten.clone();
        std::thread::Builder::new()
            .name("rea-audit".into())
            .spawn(move || writer(rx, file, cluster, &count))
            .map_err(|e| format!("cannot start the audit log's writer: {e}"))?;
        Ok(Audit { tx, unwritten })
    }

    /// Waits (at most `patience`) until every entry queued so far is
    /// written: the daemon's last answers are audited before it exits.
    pub(crate) async fn drained(&self, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        while self.unwritten.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The reply channel to hand the loop for `pending`'s request: its
    /// answer is recorded, then passed on to `reply`.
    pub(crate) fn watch(
        &self,
        pending: Pending,
        reply: oneshot::Sender<Reply>,
    ) -> oneshot::Sender<Reply> {
        let (tx, rx) = oneshot::channel();
        let queue = self.tx.clone();
        let unwritten = self.unwritten.clone();
        tokio::spawn(async move {
            let answer = rx.await;
            let entry = pending.answered(answer.as_ref().ok());
            unwritten.fetch_add(1, Ordering::AcqRel);
            // Full: wait (this client's answer waits with it).
            if queue.send(entry).await.is_err() {
                unwritten.fetch_sub(1, Ordering::AcqRel);
            }
            if let Ok(answer) = answer {
                let _ = reply.send(answer);
            }
        });
        tx
    }
}

impl Pending {
    /// The entry for `request` from `peer`, if it changes anything;
    /// `source` as the client declared it.
    pub(crate) fn of(request: &Request, peer: Peer, source: Option<&str>) -> Option<Pending> {
        use rea_core::audit::source_name;
        let (action, target) = match request {
            Request::Trigger { job, .. } => (Action::Trigger, vec![job.clone()]),
            Request::Pause(sel) => (Action::Pause, selector(sel)),
            Request::Resume(sel) => (Action::Resume, selector(sel)),
            Request::Cancel { ids, .. } => (Action::Cancel, ids.clone()),
            Request::Submit(sub) => (Action::Submit, sub.name.iter().cloned().collect()),
            Request::EditPut { user, .. } => (Action::Edit, user.iter().cloned().collect()),
            Request::Reload => (Action::Reload, Vec::new()),
            Request::Kill { target } => (Action::Kill, vec![target.clone()]),
            Request::Ping
            | Request::Status { .. }
            | Request::Follow { .. }
            | Request::Pending { .. }
            | Request::History { .. }
            | Request::FindRun { .. }
            | Request::LatestFinalRun { .. }
            | Request::Days { .. }
            | Request::EditGet { .. }
            | Request::Audit { .. }
            | Request::Overview
            | Request::Jobs(_)
            | Request::Subscribe(_) => return None,
        };
        let user = (peer.uid == 0).then(|| "root".to_string());
        let params = match request {
            Request::Trigger { params, .. } if !params.is_empty() => Some(params.clone()),
            _ => None,
        };
        Some(Pending {
            entry: Entry {
                ts: rea_store::clock::now(),
                uid: peer.uid,
                user,
                tenant: None,
                source: source_name(source),
                action,
                target,
                result: Outcome::Refused,
                code: None,
                message: None,
                node: None,
                params,
            },
        })
    }

    /// Who asked, as the daemon authorized it: a user acts in her own
    /// tenant, under her own names (her jobs' names qualified, as they
    /// are stored); root or the daemon's user in the tenant of the jobs
    /// named when they are all one user's, else the system's.
    pub(crate) fn scoped(&mut self, scope: &Scope) {
        let e = &mut self.entry;
        match scope {
            Scope::User(me) => {
                e.user = Some(me.clone());
                e.tenant = Some(me.clone());
                if e.action == Action::Edit && e.target.is_empty() {
                    e.target.push(me.clone());
                }
            }
            Scope::Admin => e.tenant = rea_core::audit::admin_tenant(e.action, &e.target),
        }
    }

    /// The finished entry: when and how the daemon answered (None: it
    /// stopped before it did).
    fn answered(mut self, answer: Option<&Reply>) -> Entry {
        let e = &mut self.entry;
        e.ts = rea_store::clock::now();
        let first: Option<&Response> = match answer {
            Some(Reply::Done(r) | Reply::Wait(r, _) | Reply::Stream(r, _)) => Some(r),
            None => None,
        };
        match first {
            Some(r) if r.ok => {
                e.result = Outcome::Ok;
                // A submission without a name is known by the id it got.
                if e.action == Action::Submit && e.target.is_empty() {
                    if let Some(id) = r.data.as_ref().and_then(|d| d.get("id")) {
                        e.target.extend(id.as_str().map(str::to_string));
                    }
                }
            }
            Some(r) => {
                e.result = Outcome::Refused;
                e.code = r.code.clone();
                e.message = r.error.clone();
            }
            None => {
                e.result = Outcome::Refused;
                e.code = Some("refused".into());
                e.message = Some("the daemon stopped before it answered".into());
            }
        }
        self.entry.bounded()
    }
}

/// A pause/resume selector as targets: the names, `tag:NAME`, `*`.
fn selector(sel: &crate::control::Selector) -> Vec<String> {
    let mut t = sel.jobs.clone();
    t.extend(sel.tag.iter().map(|tag| format!("tag:{tag}")));
    if sel.all {
        t.push("*".into());
    }
    t
}

/// The writer thread: takes what is queued (up to [`BATCH`] at a time),
/// names the users the loop did not (a user database lookup may be slow:
/// here, not on the loop), appends them in one write and hands them to the
/// cluster. Ends when the daemon drops its last [`Audit`].
fn writer(
    mut rx: mpsc::Receiver<Entry>,
    mut file: AuditFile,
    cluster: Option<Box<dyn AuditSink>>,
    unwritten: &AtomicUsize,
) {
    let mut names: HashMap<u32, Option<String>> = HashMap::new();
    let mut lost: u64 = 0;
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        for e in &mut batch {
            if e.user.is_none() {
                if names.len() > 4096 {
                    names.clear();
                }
                e.user = names
                    .entry(e.uid)
                    .or_insert_with(|| rea_host::user::user_by_uid(e.uid).map(|u| u.name))
                    .clone();
                // Refused before the loop knew her name: a user acts in
                // her own tenant whatever she asked.
                if !(Peer { uid: e.uid }).is_admin() {
                    e.tenant.clone_from(&e.user);
                }
            }
        }
        match file.append(&batch) {
            Ok(()) => {
                if lost > 0 {
                    error!(
                        lost,
                        "audit log writable again; entries were lost meanwhile"
                    );
                    lost = 0;
                }
            }
            Err(e) => {
                if lost == 0 {
                    error!("cannot write the audit log: {e}; its entries are lost until it can");
                }
                lost += batch.len() as u64;
            }
        }
        if let Some(c) = &cluster {
            for e in &batch {
                c.record(e);
            }
        }
        unwritten.fetch_sub(batch.len(), Ordering::AcqRel);
        batch.clear();
    }
}

/// Whether `scope` may read `entry`, and how: root every entry as it is,
/// a user her own tenant's with her names unqualified.
pub(crate) fn seen(entry: Entry, scope: &Scope) -> Option<Entry> {
    match scope {
        Scope::Admin => Some(entry),
        Scope::User(me) => entry.seen_by(Tenant::User(me)),
    }
}

/// Entries a `rea audit` asked of the daemon gets at most in one answer,
/// and the bytes of log they may take: what an answer costs the daemon's
/// memory is bounded whatever the query.
pub(crate) const MAX_ANSWER: usize = 10_000;
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// `rea audit` asked of the daemon (a user's), answered from the state
/// directory's log.
pub(crate) fn answer(dir: &Path, query: &rea_core::audit::Query, scope: &Scope) -> Response {
    let reader = rea_store::audit::JsonlAuditReader::new(dir);
    let limit = query.limit.unwrap_or(MAX_ANSWER).min(MAX_ANSWER);
    match reader.scan(limit, MAX_ANSWER_BYTES, |e| {
        seen(e, scope).filter(|e| query.matches(e))
    }) {
        Ok(entries) => Response::with(&entries),
        Err(e) => Response::err("refused", format!("cannot read the audit log: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rea_proto::protocol::Selector;

    fn finished(request: &Request, uid: u32, scope: &Scope, answer: Option<Response>) -> Entry {
        let mut p = Pending::of(request, Peer { uid }, Some("cli")).expect("audited");
        p.scoped(scope);
        p.answered(answer.map(Reply::Done).as_ref())
    }

    #[test]
    fn an_entry_says_who_did_what_and_how_it_was_answered() {
        let pause = Request::Pause(Selector {
            jobs: vec!["alice/a".into()],
            tag: Some("nightly".into()),
            all: false,
        });
        let e = finished(
            &pause,
            0,
            &Scope::Admin,
            Some(Response::ok(serde_json::json!({}))),
        );
        assert_eq!(
            (e.user.as_deref(), e.tenant.as_deref(), e.result),
            (Some("root"), None, Outcome::Ok),
            "alice's job and a tag: not one tenant's"
        );
        assert_eq!(e.target, ["alice/a", "tag:nightly"]);

        let trigger = Request::Trigger {
            job: "alice/x".into(),
            force: false,
            wait: false,
            follow: false,
            params: [("DATE".to_string(), "2026-11-30".to_string())].into(),
        };
        let refusal = Response::err("unknown_job", "no job named \"alice/x\"");
        let e = finished(&trigger, 1001, &Scope::User("alice".into()), Some(refusal));
        assert_eq!(
            (e.tenant.as_deref(), e.result, e.code.as_deref()),
            (Some("alice"), Outcome::Refused, Some("unknown_job"))
        );
        assert_eq!(
            e.params,
            Some([("DATE".to_string(), "2026-11-30".to_string())].into()),
            "a trigger's parameters are kept, refused or not"
        );

        let reload = finished(&Request::Reload, 0, &Scope::Admin, None);
        assert_eq!(reload.result, Outcome::Refused, "the daemon stopped first");

        let submit = Request::Submit(crate::control::Submission::default());
        let ok = Response::ok(serde_json::json!({"id": "oneshot-1", "due": "x"}));
        let e = finished(&submit, 0, &Scope::Admin, Some(ok));
        assert_eq!(e.target, ["oneshot-1"], "known by the id it got");

        assert!(Pending::of(&Request::Ping, Peer { uid: 0 }, None).is_none());
    }
}
