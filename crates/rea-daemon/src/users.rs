//! Users and their own jobs. A root daemon that reads users' job files
//! (`users/NAME.toml`, cron's user crontabs) lets every local user connect
//! to its socket, and authorizes each request by who sent it (SO_PEERCRED):
//! root and the daemon's own user may do everything; any other user sees,
//! triggers, pauses and edits only the jobs of their own file, and nothing
//! else (no one-shots, which would run as root; no reload).

use std::path::PathBuf;

use rea_core::job::Job;

use super::Loop;
use crate::control::protocol::{EditGetReply, EditPutReply};
use crate::control::{Peer, Request, Response, Selector};

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
        match self {
            Scope::Admin => true,
            Scope::User(me) => job.owner.as_deref() == Some(me.as_str()),
        }
    }
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
            _ => Ok(Scope::User(user)),
        }
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
        // Checked before installing: the loader would refuse the later file
        // of two that share a name, which may be another user's.
        let taken = self.files.files().taken_elsewhere(&path, &cfg);
        if !taken.is_empty() {
            return Response::err(
                "invalid_config",
                format!(
                    "{user}'s job file has {} error(s); nothing was changed",
                    taken.len()
                ),
            )
            .with_suggestions(taken.iter().map(ToString::to_string).collect());
        }
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
    /// `rea history` / `rea logs` / `rea audit` for a user who cannot read
    /// the state directory (it is root's): answered from the history (the
    /// audit log), off the loop, for their own jobs (tenant) only.
    pub(super) fn history_request(
        &self,
        request: Request,
        scope: &Scope,
        reply: tokio::sync::oneshot::Sender<crate::control::Reply>,
    ) {
        let visible: Option<std::collections::HashSet<String>> = match scope {
            Scope::Admin => None,
            Scope::User(_) => Some(self.visible_names(scope).map(str::to_string).collect()),
        };
        let dir = self.opts.state_dir.clone();
        let scope = scope.clone();
        tokio::spawn(async move {
            let Ok(_slot) = QUERY_SLOTS.acquire().await else {
                return;
            };
            let answer = tokio::task::spawn_blocking(move || match &request {
                Request::Audit { query } => crate::audit::answer(&dir, query, &scope),
                _ => answer_history(&dir, request, visible.as_ref()),
            })
            .await
            .unwrap_or_else(|e| Response::err("refused", format!("the query failed: {e}")));
            let _ = reply.send(crate::control::Reply::Done(answer));
        });
    }
}

fn answer_history(
    dir: &std::path::Path,
    request: Request,
    visible: Option<&std::collections::HashSet<String>>,
) -> Response {
    let reader = rea_store::Local::history_reader(dir);
    let sees = |job: Option<&str>| visible.is_none_or(|v| job.is_some_and(|j| v.contains(j)));
    let unknown = |job: &str| Response::err("unknown_job", format!("no job named {job:?}"));
    let read_error =
        |e: std::io::Error| Response::err("refused", format!("cannot read the history: {e}"));
    match request {
        Request::History { query } => {
            if visible.is_some() {
                match query.job.as_deref() {
                    None => {
                        return Response::err(
                            "bad_request",
                            "name one of your jobs: rea history JOB",
                        )
                    }
                    Some(job) if !sees(Some(job)) => return unknown(job),
                    Some(_) => {}
                }
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
