//! Users and their own jobs. A root daemon that reads users' job files
//! (`users/NAME.toml`, cron's user crontabs) lets every local user connect
//! to its socket, and authorizes each request by who sent it (SO_PEERCRED):
//! root and the daemon's own user may do everything; any other user sees,
//! triggers, pauses and edits only the jobs of their own file, and nothing
//! else (no one-shots, which would run as root; no reload).

use std::path::PathBuf;

use rea_core::job::Job;
use rea_core::tenant::Tenant;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::Loop;
use crate::control::protocol::{EditGetReply, EditPutReply};
use crate::control::{Peer, Reply, Request, Response, Selector};

/// Whose request this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scope {
    /// Root or the daemon's user: every job.
    Admin,
    /// Another user: the jobs of their own file only.
    User(String),
}

impl Scope {
    /// Whether `job` is visible (and may be acted on) in this scope.
    pub(super) fn sees(&self, job: &Job) -> bool {
        self.owns(&job.name)
    }

    /// Whether the job, record, pause or run named `name` (qualified) is
    /// this scope's: a user's are those of her tenant, whatever names her
    /// file holds now.
    pub(super) fn owns(&self, name: &str) -> bool {
        match self {
            Scope::Admin => true,
            Scope::User(me) => Tenant::User(me).owns(name),
        }
    }

    /// The user's tenant; None for root, who sees every tenant.
    pub(super) fn tenant(&self) -> Option<Tenant<'_>> {
        match self {
            Scope::Admin => None,
            Scope::User(me) => Some(Tenant::User(me)),
        }
    }
}

/// `name` as typed by `me`, qualified: her own names are bare (`backup`),
/// and her own qualified spelling (`alice/backup`) is accepted too. Anyone
/// else's qualified name becomes a name of hers that does not exist.
fn qualified(me: &str, name: &mut String) {
    let mine = Tenant::User(me);
    if !mine.owns(name) {
        *name = mine.qualify(name);
    }
}

/// Qualifies the job names of a user's request with her tenant. A run id
/// (`rea kill RUN`) is left as it is: `kill` tries both.
fn qualify_request(me: &str, request: &mut Request) {
    match request {
        Request::Status { job: Some(job) }
        | Request::Trigger { job, .. }
        | Request::Follow { job }
        | Request::LatestFinalRun { job } => qualified(me, job),
        Request::Pause(sel) | Request::Resume(sel) => {
            sel.jobs.iter_mut().for_each(|j| qualified(me, j));
        }
        Request::History { query } => {
            if let Some(job) = &mut query.job {
                qualified(me, job);
            }
            // Her history is her tenant's records, whether or not her file
            // still has the job.
            query.tenant = Some(me.to_string());
        }
        _ => {}
    }
}

/// Fields of an answer that hold job names, shown to their tenant
/// unqualified.
const NAME_FIELDS: &[&str] = &["name", "job", "jobs", "after", "changed", "paused"];

/// `response` as the user `me` sees it: her jobs' names unqualified, in
/// the data and in messages (where names are always quoted).
fn localize(mut response: Response, me: &str) -> Response {
    let prefix = format!("{me}{}", rea_core::tenant::SEPARATOR);
    if let Some(data) = &mut response.data {
        localize_value(data, &prefix, false);
    }
    let quoted = format!("\"{prefix}");
    if let Some(error) = &mut response.error {
        *error = error.replace(&quoted, "\"");
    }
    for s in &mut response.suggestions {
        *s = match s.strip_prefix(&prefix) {
            Some(local) => local.to_string(),
            None => s.replace(&quoted, "\""),
        };
    }
    response
}

fn localize_value(value: &mut Value, prefix: &str, names: bool) {
    match value {
        Value::String(s) if names => {
            if let Some(local) = s.strip_prefix(prefix) {
                *s = local.to_string();
            }
        }
        Value::Array(items) => {
            for item in items {
                localize_value(item, prefix, names);
            }
        }
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                localize_value(v, prefix, NAME_FIELDS.contains(&key.as_str()));
            }
        }
        _ => {}
    }
}

/// A way back to a user's connection that localizes what goes through it
/// (every answer, whichever part of the daemon makes it, and each line of
/// a stream). It closes when the client's side does, so work given up for
/// a gone client is still given up.
pub(super) fn localizing(mut reply: oneshot::Sender<Reply>, me: String) -> oneshot::Sender<Reply> {
    let (tx, rx) = oneshot::channel::<Reply>();
    tokio::spawn(async move {
        let answer = tokio::select! {
            answer = rx => answer,
            () = reply.closed() => return,
        };
        let Ok(answer) = answer else { return };
        let localized = match answer {
            Reply::Done(r) => Reply::Done(localize(r, &me)),
            Reply::Wait(first, rest) => {
                let (tx2, rx2) = oneshot::channel();
                let me2 = me.clone();
                tokio::spawn(async move {
                    if let Ok(mut v) = rest.await {
                        let prefix = format!("{me2}{}", rea_core::tenant::SEPARATOR);
                        localize_value(&mut v, &prefix, false);
                        let _ = tx2.send(v);
                    }
                });
                Reply::Wait(localize(first, &me), rx2)
            }
            Reply::Stream(first, mut lines) => {
                let (tx2, rx2) = mpsc::channel(1);
                let me2 = me.clone();
                tokio::spawn(async move {
                    while let Some(line) = lines.recv().await {
                        if tx2.send(localize(line, &me2)).await.is_err() {
                            return;
                        }
                    }
                });
                Reply::Stream(localize(first, &me), rx2)
            }
        };
        let _ = reply.send(localized);
    });
    tx
}

impl Loop {
    /// Who `peer` is, and whether `request` is theirs to make. The refusal
    /// is the answer to send.
    pub(super) fn authorize(&self, peer: Peer, request: &mut Request) -> Result<Scope, Response> {
        if peer.is_admin() {
            return Ok(Scope::Admin);
        }
        let Some(user) = rea_host::user::user_by_uid(peer.uid).map(|u| u.name) else {
            return Err(Response::err(
                "refused",
                format!("uid {} is not in this machine's user database", peer.uid),
            ));
        };
        let root_only = |what: &str| {
            Err(Response::err(
                "refused",
                format!("{what} is for root (the daemon runs as root); your own jobs are in your job file: rea edit"),
            ))
        };
        // A monitoring user reads every tenant's status, and acts on none.
        if matches!(request, Request::Status { .. }) && self.is_monitor(peer.uid) {
            return Ok(Scope::Admin);
        }
        match request {
            Request::Submit(_) | Request::Cancel { .. } | Request::Pending { .. } => {
                root_only("a one-shot")
            }
            Request::Reload => root_only("reloading the job files"),
            Request::EditGet { user: who } | Request::EditPut { user: who, .. } => {
                match who.as_deref() {
                    Some(other) if other != user => Err(Response::err(
                        "refused",
                        format!("only root may edit {other}'s jobs"),
                    )),
                    _ => {
                        *who = Some(user.clone());
                        Ok(Scope::User(user))
                    }
                }
            }
            Request::History { query } if query.tenant.as_ref().is_some_and(|t| *t != user) => {
                Err(Response::err(
                    "refused",
                    "only root may read another tenant's history; yours is rea history",
                ))
            }
            _ => {
                qualify_request(&user, request);
                Ok(Scope::User(user))
            }
        }
    }

    /// Whether `uid` belongs to `[daemon] monitor_group`.
    fn is_monitor(&self, uid: u32) -> bool {
        let Some(group) = &self.config.daemon.monitor_group else {
            return false;
        };
        let (Ok(gid), Some(user)) = (
            rea_host::user::group_id(group),
            rea_host::user::user_by_uid(uid),
        ) else {
            return false;
        };
        rea_host::user::in_group(&user, gid)
    }

    /// The jobs of a pause/resume selector that `scope` may touch; unknown
    /// (or foreign) names are answered as unknown.
    pub(super) fn selected(&self, sel: &Selector, scope: &Scope) -> Result<Vec<String>, Response> {
        use rea_core::job::SelectError;
        let mine = self
            .config
            .jobs
            .iter()
            .map(|j| &**j)
            .filter(|j| scope.sees(j));
        rea_core::job::select(mine, &sel.jobs, sel.tag.as_deref(), sel.all).map_err(|e| match e {
            SelectError::UnknownJob(n) => self.unknown_job_in(&n, scope),
            SelectError::NoTag(tag) => {
                Response::err("unknown_job", format!("no job has the tag {tag:?}"))
            }
            SelectError::Nothing => Response::err("bad_request", "name jobs, --tag TAG or --all"),
        })
    }

    /// The names of the jobs `scope` may see, in file order.
    pub(super) fn visible_names<'a>(&'a self, scope: &'a Scope) -> impl Iterator<Item = &'a str> {
        self.config
            .jobs
            .iter()
            .filter(move |j| scope.sees(j))
            .map(|j| j.name.as_str())
    }

    /// `no job named "x"`, suggesting only names `scope` may see.
    pub(super) fn unknown_job_in(&self, name: &str, scope: &Scope) -> Response {
        Response::err("unknown_job", format!("no job named {name:?}")).with_suggestions(
            rea_core::suggest::closest(name, self.visible_names(scope), 3),
        )
    }

    fn user_file(&self, user: &str) -> Result<PathBuf, Response> {
        self.files.files().set().user_file(user).ok_or_else(|| {
            Response::err(
                "refused",
                "this daemon reads no users' job files (it runs as root with a users/ directory beside its job file)",
            )
        })
    }

    pub(super) fn edit_get(&self, user: Option<String>) -> Response {
        let Some(user) = user else {
            return Response::err("bad_request", "whose job file? (user)");
        };
        let path = match self.user_file(&user) {
            Ok(p) => p,
            Err(r) => return r,
        };
        // A user without a file starts from an empty one.
        let content = match crate::jobfiles::read_for_edit(&path) {
            Ok(text) => text,
            Err(e) => return Response::err("refused", e),
        };
        Response::with(&EditGetReply {
            user,
            path: path.display().to_string(),
            content,
        })
    }

    /// Validates `content` as `user`'s file (with the machine's checks),
    /// installs it atomically (root's, 0600) and reloads.
    pub(super) fn edit_put(
        &mut self,
        user: Option<String>,
        content: String,
        actions: &mut std::collections::VecDeque<rea_core::engine::Action>,
    ) -> Response {
        let Some(user) = user else {
            return Response::err("bad_request", "whose job file? (user)");
        };
        let path = match self.user_file(&user) {
            Ok(p) => p,
            Err(r) => return r,
        };
        if rea_host::user::user(&user).is_err() {
            return Response::err("refused", format!("no user {user:?} on this machine"));
        }
        let kind = rea_config::FileKind::User(user.clone());
        let checked = rea_config::parse_as(content.as_bytes(), &path, &kind)
            .and_then(crate::host_checks::with_host_checks);
        let cfg = match checked {
            Ok(cfg) => cfg,
            Err(diags) => {
                return Response::err(
                    "invalid_config",
                    format!(
                        "{user}'s job file has {} error(s); nothing was changed",
                        diags.len()
                    ),
                )
                .with_suggestions(diags.iter().map(ToString::to_string).collect())
            }
        };
        if let Err(e) = crate::jobfiles::install(&path, content.as_bytes(), 0o600, None) {
            return Response::err("refused", format!("cannot write {}: {e}", path.display()));
        }
        tracing::info!(user = user.as_str(), file = %path.display(), "a user's job file was edited");
        // Other files' refusals (a broken drop-in, another user's file)
        // are neither hers to fix nor hers to read: only those of her file
        // (a job name another file already has) send her back to the editor.
        let shown = path.display().to_string();
        let mine: Vec<String> = match self.reload(actions, super::reload::ReloadCause::Request) {
            Ok(_) => Vec::new(),
            Err(errors) => errors
                .into_iter()
                .filter(|e| e.starts_with(&shown))
                .collect(),
        };
        if mine.is_empty() {
            Response::with(&EditPutReply {
                path: shown,
                jobs: cfg.jobs.len(),
            })
        } else {
            Response::err(
                "invalid_config",
                "the file was installed, but its jobs are refused beside the other job files",
            )
            .with_suggestions(mine)
        }
    }
}

/// History queries answered at once, at most: they read files (a big
/// history takes a while), so they run off the loop, and a user asking in a
/// loop cannot take more than this.
const HISTORY_QUERIES: usize = 2;

static QUERY_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HISTORY_QUERIES);

impl Loop {
    /// `rea history` / `rea logs` for a user who cannot read the state
    /// directory (it is root's): answered from the history, off the loop,
    /// for their own jobs only.
    pub(super) fn history_request(
        &self,
        request: Request,
        scope: &Scope,
        reply: tokio::sync::oneshot::Sender<crate::control::Reply>,
    ) {
        let scope = scope.clone();
        let dir = self.opts.state_dir.clone();
        tokio::spawn(async move {
            let Ok(_slot) = QUERY_SLOTS.acquire().await else {
                return;
            };
            let answer = tokio::task::spawn_blocking(move || answer_history(&dir, request, &scope))
                .await
                .unwrap_or_else(|e| Response::err("refused", format!("the query failed: {e}")));
            let _ = reply.send(crate::control::Reply::Done(answer));
        });
    }
}

fn answer_history(dir: &std::path::Path, request: Request, scope: &Scope) -> Response {
    let reader = rea_store::Local::history_reader(dir);
    // A record is a user's by its owner, never by a name her file holds
    // now: a name root's removed job had is not hers for taking it.
    let sees = |job: Option<&str>| job.is_some_and(|j| scope.owns(j)) || *scope == Scope::Admin;
    let unknown = |job: &str| Response::err("unknown_job", format!("no job named {job:?}"));
    let read_error =
        |e: std::io::Error| Response::err("refused", format!("cannot read the history: {e}"));
    match request {
        Request::History { query } => {
            if let Some(job) = query.job.as_deref().filter(|j| !sees(Some(j))) {
                return unknown(job);
            }
            match reader.query(&query) {
                Ok(records) => Response::with(&records),
                Err(e) => read_error(e),
            }
        }
        Request::FindRun { run } => match reader.find_run(&run) {
            Ok(found) => Response::with(&found.filter(|r| sees(r.job.as_deref()))),
            Err(e) => read_error(e),
        },
        Request::LatestFinalRun { job } if !sees(Some(&job)) => unknown(&job),
        Request::LatestFinalRun { job } => match reader.latest_final_run(&job) {
            Ok(found) => Response::with(&found),
            Err(e) => read_error(e),
        },
        _ => Response::err("bad_request", "not a history request"),
    }
}
