//! Users and their own jobs. A root daemon that reads users' job files
//! (`users/NAME.toml`, cron's user crontabs) lets every local user connect
//! to its socket, and authorizes each request by who sent it (SO_PEERCRED):
//! root and the daemon's own user may do everything; any other user sees,
//! triggers, pauses and edits only the jobs of their own file, and nothing
//! else (no one-shots, which would run as root; no reload).

use std::path::PathBuf;

use rea_core::job::Job;
use rea_core::record::Record;
use rea_core::tenant::Tenant;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::Loop;
use crate::control::protocol::{EditGetReply, EditPutReply, HistoryChunk};
use crate::control::{Peer, Reply, Request, Response, Selector};
use crate::quota::{Holder, Quota, Refused};

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

    /// `name` as this scope means it: a user's bare names are hers
    /// (see [`qualified`]); root's are as typed.
    pub(super) fn qualify(&self, name: &str) -> String {
        let mut name = name.to_string();
        if let Scope::User(me) = self {
            qualified(me, &mut name);
        }
        name
    }

    /// The user's tenant; None for root, who sees every tenant.
    pub(super) fn tenant(&self) -> Option<Tenant<'_>> {
        match self {
            Scope::Admin => None,
            Scope::User(me) => Some(Tenant::User(me)),
        }
    }
}

/// How long a uid's name is taken from [`name_of`]'s cache: a user
/// pipelining thousands of requests costs one user-database lookup (a read
/// of /etc/passwd, or NSS) a few times a minute, not one per request.
const NAME_TTL: std::time::Duration = std::time::Duration::from_secs(5);

/// The user name of `uid` (None: not in the user database), cached for
/// [`NAME_TTL`], at most 1,024 uids (the cache is emptied when full).
fn name_of(uid: u32) -> Option<String> {
    use std::collections::HashMap;
    use std::time::Instant;
    type Names = HashMap<u32, (Option<String>, Instant)>;
    static NAMES: std::sync::Mutex<Option<Names>> = std::sync::Mutex::new(None);
    let now = Instant::now();
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = guard.get_or_insert_with(HashMap::new);
    if let Some((name, at)) = names.get(&uid) {
        if now.duration_since(*at) < NAME_TTL {
            return name.clone();
        }
    }
    let name = rea_host::user::user_by_uid(uid).map(|u| u.name);
    if names.len() >= 1024 {
        names.clear();
    }
    names.insert(uid, (name.clone(), now));
    name
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
        | Request::LatestFinalRun { job }
        | Request::Days { job, .. } => qualified(me, job),
        Request::Jobs(query) => {
            if let Some(name) = &mut query.name {
                qualified(me, name);
            }
        }
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
                    // Ends as soon as the client is gone, even while the
                    // stream is idle (a subscription), so its producer
                    // learns it at once.
                    loop {
                        let line = tokio::select! {
                            line = lines.recv() => line,
                            () = tx2.closed() => return,
                        };
                        let Some(line) = line else { return };
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
        let Some(user) = name_of(peer.uid) else {
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
        if matches!(
            request,
            Request::Status { .. } | Request::Overview | Request::Jobs(_) | Request::Subscribe(_)
        ) && self.is_monitor(peer.uid)
        {
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

    /// `user`'s job file, if she may have one.
    fn user_file(&self, user: &str) -> Result<PathBuf, Response> {
        let set = self.files.files().set();
        let path = set.user_file(user).ok_or_else(|| {
            Response::err(
                "refused",
                "this daemon reads no users' job files (it runs as root with a users/ directory beside its job file)",
            )
        })?;
        crate::jobfiles::user_allowed(set, user).map_err(|why| {
            Response::err("refused", why)
                .with_suggestions(vec![format!("  hint: {}", crate::jobfiles::ALLOW_HINT)])
        })?;
        Ok(path)
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
    /// installs it atomically (root's, 0600) and reloads that file alone
    /// (see [`UserReloads`]); `reply` is answered once it is in force.
    pub(super) fn edit_put(
        &mut self,
        user: Option<String>,
        content: String,
        reply: tokio::sync::oneshot::Sender<Reply>,
        actions: &mut std::collections::VecDeque<rea_core::engine::Action>,
    ) {
        let answer = match self.install_user_file(user, content) {
            Ok(answer) => answer,
            Err(refusal) => {
                let _ = reply.send(Reply::Done(refusal));
                return;
            }
        };
        let path = PathBuf::from(&answer.path);
        let now = tokio::time::Instant::now();
        if self
            .files
            .user_reloads
            .wait(path.clone(), answer, reply, now)
        {
            self.user_reload(&path, actions);
        }
    }

    /// Checks and installs `user`'s new file; what to answer once it is
    /// in force.
    fn install_user_file(
        &mut self,
        user: Option<String>,
        content: String,
    ) -> Result<EditPutReply, Response> {
        let Some(user) = user else {
            return Err(Response::err("bad_request", "whose job file? (user)"));
        };
        let path = self.user_file(&user)?;
        if rea_host::user::user(&user).is_err() {
            return Err(Response::err(
                "refused",
                format!("no user {user:?} on this machine"),
            ));
        }
        let kind = rea_config::FileKind::User(user.clone());
        let checked = rea_config::parse_as(content.as_bytes(), &path, &kind)
            .and_then(crate::host_checks::with_host_checks);
        let cfg = match checked {
            Ok(cfg) => cfg,
            Err(diags) => {
                return Err(Response::err(
                    "invalid_config",
                    format!(
                        "{user}'s job file has {} error(s); nothing was changed",
                        diags.len()
                    ),
                )
                .with_suggestions(diags.iter().map(ToString::to_string).collect()))
            }
        };
        if let Err(e) = crate::jobfiles::install(&path, content.as_bytes(), 0o600, None) {
            return Err(Response::err(
                "refused",
                format!("cannot write {}: {e}", path.display()),
            ));
        }
        tracing::info!(user = user.as_str(), file = %path.display(), "a user's job file was edited");
        Ok(EditPutReply {
            path: path.display().to_string(),
            jobs: cfg.jobs.len(),
        })
    }

    /// Users' files whose reload is due (see [`UserReloads`]).
    pub(super) fn due_user_reloads(
        &mut self,
        actions: &mut std::collections::VecDeque<rea_core::engine::Action>,
    ) {
        let now = tokio::time::Instant::now();
        for path in self.files.user_reloads.due(now) {
            self.user_reload(&path, actions);
        }
    }

    /// Reloads the user's file `path` alone (never the main file or another
    /// part) and answers the edits waiting for it.
    fn user_reload(
        &mut self,
        path: &std::path::Path,
        actions: &mut std::collections::VecDeque<rea_core::engine::Action>,
    ) {
        let waiting = self
            .files
            .user_reloads
            .reloading(path, tokio::time::Instant::now());
        let shown = path.display().to_string();
        // Other files' refusals (a broken drop-in, another user's file)
        // are neither hers to fix nor hers to read: only those of her file
        // (a job name another file already has) send her back to the editor.
        let parts = [std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())];
        let mine: Vec<String> =
            match self.reload_parts(actions, super::reload::ReloadCause::Request, &parts) {
                Ok(_) => Vec::new(),
                Err(errors) => errors
                    .into_iter()
                    .filter(|e| e.starts_with(&shown))
                    .collect(),
            };
        for (reply, answer) in waiting {
            let response = if mine.is_empty() {
                Response::with(&answer)
            } else {
                Response::err(
                    "invalid_config",
                    "the file was installed, but its jobs are refused beside the other job files",
                )
                .with_suggestions(mine.clone())
            };
            let _ = reply.send(Reply::Done(response));
        }
    }
}

/// Users' edits waiting for their file's reload. An edit reloads its
/// user's file alone, and each file at most once per
/// [`USER_RELOAD_INTERVAL`](super::reload::USER_RELOAD_INTERVAL): an edit
/// sooner than that after the last waits, with every other edit of that
/// file meanwhile, for one reload at the end of the interval, and their
/// answers wait for it. A user saving in a loop costs the daemon one read
/// of her own file a second.
#[derive(Default)]
pub(super) struct UserReloads {
    files: std::collections::HashMap<PathBuf, PendingReload>,
}

#[derive(Default)]
struct PendingReload {
    /// When the file was last reloaded for an edit.
    last: Option<tokio::time::Instant>,
    /// When the edits waiting are due.
    due: Option<tokio::time::Instant>,
    /// The edits waiting, with their answers.
    waiting: Vec<(tokio::sync::oneshot::Sender<Reply>, EditPutReply)>,
}

impl UserReloads {
    /// An edit of `path` waits for its reload. True: reload now.
    fn wait(
        &mut self,
        path: PathBuf,
        answer: EditPutReply,
        reply: tokio::sync::oneshot::Sender<Reply>,
        now: tokio::time::Instant,
    ) -> bool {
        let file = self.files.entry(path).or_default();
        file.waiting.push((reply, answer));
        match file.last.map(|l| l + super::reload::USER_RELOAD_INTERVAL) {
            Some(next) if next > now => {
                file.due = Some(next);
                false
            }
            _ => true,
        }
    }

    /// `path` is reloaded now: the edits it answers.
    fn reloading(
        &mut self,
        path: &std::path::Path,
        now: tokio::time::Instant,
    ) -> Vec<(tokio::sync::oneshot::Sender<Reply>, EditPutReply)> {
        let file = self.files.entry(path.to_path_buf()).or_default();
        file.last = Some(now);
        file.due = None;
        std::mem::take(&mut file.waiting)
    }

    /// The files whose waiting edits are due at `now`.
    fn due(&self, now: tokio::time::Instant) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|(_, f)| f.due.is_some_and(|d| d <= now))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// When the next waiting edits are due.
    pub(super) fn next_due(&self) -> Option<tokio::time::Instant> {
        self.files.values().filter_map(|f| f.due).min()
    }
}

/// History queries answered at once, at most: they read files (a big
/// history takes a while), so they run off the loop; a user holds one of
/// them at a time, and one is kept for root (`crate::quota`).
const HISTORY_QUERIES: usize = 4;

static QUERY_SLOTS: std::sync::LazyLock<Quota<String>> =
    std::sync::LazyLock::new(|| Quota::with_shares(HISTORY_QUERIES, 1, 1));

/// Records of a streamed answer sent in one line, at most about this many
/// bytes of them: with the connection's bounded channel (`STREAM_LINES`)
/// and its write buffer, all of a query the daemon holds at once.
const CHUNK_BYTES: usize = 64 * 1024;

/// Chunks a query may have read ahead of what its client has taken.
const STREAM_LINES: usize = 2;

impl Loop {
    /// `rea history` / `rea logs` / `rea audit` for a user who cannot read
    /// the state directory (it is root's): answered from the history (the
    /// audit log), off the loop, for their own jobs (tenant) only. `history`
    /// is streamed in bounded chunks as it is read
    /// (`rea_proto::protocol::HistoryChunk`), with the client's reading as
    /// backpressure, so its cost never stays in the daemon.
    pub(super) fn history_request(
        &self,
        request: Request,
        scope: &Scope,
        reply: tokio::sync::oneshot::Sender<crate::control::Reply>,
    ) {
        let holder = match scope {
            Scope::Admin => Holder::Admin,
            Scope::User(me) => Holder::Other(me.clone()),
        };
        let slot = match QUERY_SLOTS.try_acquire(holder) {
            Ok(slot) => slot,
            Err(refused) => {
                let why = match refused {
                    Refused::Share(_) => {
                        "one history query of yours is being answered already; try again when it ends".to_string()
                    }
                    Refused::Full => format!(
                        "the daemon answers {HISTORY_QUERIES} history queries already; try again later"
                    ),
                };
                let _ = reply.send(Reply::Done(Response::err("refused", why)));
                return;
            }
        };
        let scope = scope.clone();
        let dir = self.opts.state_dir.clone();
        tokio::spawn(async move {
            let Request::History { query } = request else {
                let answer = tokio::task::spawn_blocking(move || {
                    let _slot = slot;
                    match &request {
                        Request::Audit { query } => crate::audit::answer(&dir, query, &scope),
                        _ => answer_history(&dir, request, &scope),
                    }
                })
                .await
                .unwrap_or_else(|e| Response::err("refused", format!("the query failed: {e}")));
                let _ = reply.send(Reply::Done(answer));
                return;
            };
            let (tx, mut rx) = mpsc::channel(STREAM_LINES);
            tokio::task::spawn_blocking(move || {
                let _slot = slot;
                stream_history(&dir, &query, &scope, &tx);
            });
            let first = rx.recv().await.unwrap_or_else(|| {
                Response::err("refused", "the query failed before its first answer")
            });
            let _ = reply.send(Reply::Stream(first, rx));
        });
    }
}

/// A `history` answer, line by line into `lines` (see
/// [`Loop::history_request`]); returns when it is complete, has failed,
/// or its client is gone.
fn stream_history(
    dir: &std::path::Path,
    query: &rea_store::history::Query,
    scope: &Scope,
    lines: &mpsc::Sender<Response>,
) {
    use std::ops::ControlFlow;
    // A record is a user's by its owner (`query.tenant`, set for her),
    // never by a name her file holds now.
    if let Some(job) = query.job.as_deref().filter(|j| !scope.owns(j)) {
        let _ = lines.blocking_send(Response::err(
            "unknown_job",
            format!("no job named {job:?}"),
        ));
        return;
    }
    let reader = rea_store::Local::history_reader(dir);
    let mut chunk = Vec::new();
    let mut bytes = 0;
    let mut count: u64 = 0;
    let mut gone = false;
    let send = |records: &mut Vec<Record>| {
        let line = Response::with(&HistoryChunk::Records {
            records: std::mem::take(records),
        });
        lines.blocking_send(line).is_ok()
    };
    let read = reader.query_each(query, &mut |record| {
        // A record's size is mostly its output; the rest is a few hundred
        // bytes at most.
        bytes += record.output.as_ref().map_or(0, String::len) + 512;
        count += 1;
        chunk.push(record);
        if bytes >= CHUNK_BYTES {
            bytes = 0;
            if !send(&mut chunk) {
                gone = true;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    if gone {
        return;
    }
    let last = match read {
        Ok(()) => {
            if !chunk.is_empty() && !send(&mut chunk) {
                return;
            }
            Response::with(&HistoryChunk::End { count })
        }
        Err(e) => Response::err(
            "refused",
            format!("cannot read the history (the answer stops here, incomplete): {e}"),
        ),
    };
    let _ = lines.blocking_send(last);
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
        Request::FindRun { run } => match reader.find_run(&run) {
            Ok(found) => Response::with(&found.filter(|r| sees(r.job.as_deref()))),
            Err(e) => read_error(e),
        },
        Request::LatestFinalRun { job } if !sees(Some(&job)) => unknown(&job),
        Request::LatestFinalRun { job } => match reader.latest_final_run(&job) {
            Ok(found) => Response::with(&found),
            Err(e) => read_error(e),
        },
        Request::Days { job, .. } if !sees(Some(&job)) => unknown(&job),
        Request::Days {
            job,
            zone,
            from,
            to,
        } => {
            let zone = zone.unwrap_or_else(|| "UTC".into());
            let Ok(tz) = zone.parse::<chrono_tz::Tz>() else {
                return Response::err("bad_request", format!("unknown time zone {zone:?}"));
            };
            // 92 days at most: what the roll-up keeps (and a bound on
            // what one question reads).
            let span = (to - from).num_days();
            if !(0..rea_store::history::KEEP_DAYS).contains(&span) {
                return Response::err(
                    "bad_request",
                    format!(
                        "ask for 1 to {} days, not {from}..{to}",
                        rea_store::history::KEEP_DAYS
                    ),
                );
            }
            match reader.days(&job, tz, from, to) {
                Ok(days) => Response::with(&rea_proto::protocol::DaysReply {
                    zone: tz.name().to_string(),
                    today: rea_store::clock::now().with_timezone(&tz).date_naive(),
                    days,
                }),
                Err(e) => read_error(e),
            }
        }
        _ => Response::err("bad_request", "not a history request"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;
    use tokio::time::Instant;

    fn edit(r: &mut UserReloads, path: &str, at: Instant) -> bool {
        let (tx, _rx) = tokio::sync::oneshot::channel();
        let answer = EditPutReply {
            path: path.to_string(),
            jobs: 1,
        };
        r.wait(PathBuf::from(path), answer, tx, at)
    }

    /// Edits of one file within the interval wait for one reload at its
    /// end; another user's file is not held by hers.
    #[test]
    fn edits_within_the_interval_are_coalesced_per_file() {
        let mut r = UserReloads::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let (a, b) = ("users/a.toml", "users/b.toml");
        assert!(edit(&mut r, a, t0), "the first edit reloads at once");
        assert_eq!(r.reloading(Path::new(a), t0).len(), 1);
        for n in [100, 300, 900] {
            assert!(!edit(&mut r, a, ms(n)), "held until the interval is over");
        }
        assert!(edit(&mut r, b, ms(500)), "her neighbour's edit is not held");
        assert_eq!(r.reloading(Path::new(b), ms(500)).len(), 1);
        assert_eq!(r.next_due(), Some(ms(1000)));
        assert!(r.due(ms(999)).is_empty());
        assert_eq!(r.due(ms(1000)), [PathBuf::from(a)]);
        assert_eq!(
            r.reloading(Path::new(a), ms(1000)).len(),
            3,
            "one reload answers all three"
        );
        assert_eq!(r.next_due(), None);
        assert!(!edit(&mut r, a, ms(1500)));
        assert_eq!(r.next_due(), Some(ms(2000)));
    }
}
