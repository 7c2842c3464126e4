//! Reloading the job files: from the watcher (through the settle and
//! half-written guards), SIGHUP, or `rea reload`. An invalid file changes
//! nothing but the banner: the last good configuration stays in force.

use std::collections::VecDeque;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use rea_config::Config;
use rea_core::engine::Action;
use rea_core::record::{Event, Record};
use serde_json::json;
use tracing::{error, info, warn};

use super::startup::load;
use super::{free_in_background, metrics, Loop};
use crate::control::protocol::ReloadReply;
use crate::jobfiles::JobFiles;

/// How long a job file that would remove more than half of the jobs must
/// stay unchanged before the watcher applies it.
pub(super) const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// A tenant's file is reloaded at most once per this interval for her
/// edits; edits in between are coalesced into the next reload (their
/// answers wait for it).
pub(super) const USER_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The job files as the loop knows them between reloads.
pub(super) struct FileState {
    /// The job files, with each part's last good version.
    files: JobFiles,
    last_reload: DateTime<Utc>,
    /// Set while the file on disk is invalid: (when, errors).
    error: Option<(DateTime<Utc>, Vec<String>)>,
    /// A change seen by the watcher that would remove more than half of the
    /// jobs (of the files it read), waiting to be seen unchanged.
    settling: Option<Settling>,
    /// Users' files to reload, at most one reload per tenant per
    /// [`USER_RELOAD_INTERVAL`].
    pub(super) user_reloads: crate::users::UserReloads,
}

/// A shrinking change held by the watcher.
#[derive(Debug, Clone)]
struct Settling {
    /// The digest of the configuration it would make.
    digest: u64,
    /// When to look again.
    at: tokio::time::Instant,
    /// Only these parts (drop-ins, users' files) changed; None: the main
    /// file did (or anything may have).
    parts: Option<Vec<PathBuf>>,
}

impl FileState {
    pub(super) fn new(files: JobFiles, loaded_at: DateTime<Utc>) -> FileState {
        FileState {
            files,
            last_reload: loaded_at,
            error: None,
            settling: None,
            user_reloads: Default::default(),
        }
    }

    pub(super) fn files(&self) -> &JobFiles {
        &self.files
    }

    pub(super) fn last_reload(&self) -> DateTime<Utc> {
        self.last_reload
    }

    /// The refusal in force, if the file on disk is invalid: (when, errors).
    pub(super) fn error(&self) -> Option<&(DateTime<Utc>, Vec<String>)> {
        self.error.as_ref()
    }

    /// When a shrinking change held by the watcher is looked at again.
    pub(super) fn settles_at(&self) -> Option<tokio::time::Instant> {
        self.settling.as_ref().map(|s| s.at)
    }

    /// The parts a held change is about (None: the main file's).
    pub(super) fn settling_parts(&self) -> Option<Vec<PathBuf>> {
        self.settling.as_ref().and_then(|s| s.parts.clone())
    }
}

/// Who asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReloadCause {
    /// The file watcher saw a change.
    Watcher,
    /// A shrinking change held by the watcher has stayed the same.
    Settled,
    /// SIGHUP: re-read even an unchanged file.
    Signal,
    /// `rea reload`.
    Request,
}

impl Loop {
    /// Re-reads the job file. An invalid file changes nothing but the banner.
    /// Unless forced (SIGHUP), a file whose bytes are those of the
    /// configuration in force is not parsed again: an edit seen by the
    /// watcher and then by `rea reload` (or the other way round) costs one
    /// parse, which matters for a 100,000-job file.
    ///
    /// What the watcher sees may be a file half written (`render >
    /// jobs.toml` truncates it first). So a change seen by the watcher that
    /// would remove every job is never applied (only `rea reload` or SIGHUP
    /// apply an empty file), and one that would remove more than half of
    /// them is applied only once the file has stayed the same for
    /// [`SETTLE`]; both are logged loudly.
    pub(super) fn reload(
        &mut self,
        actions: &mut VecDeque<Action>,
        cause: ReloadCause,
    ) -> Result<ReloadReply, Vec<String>> {
        self.reload_files(actions, cause, None)
    }

    /// [`Loop::reload`] of the parts `parts` only (drop-ins, users' files,
    /// as the watcher names them): the main file and every other part stay
    /// as last loaded, unread. The guards are the same, on the jobs of
    /// these parts: a change seen by the watcher that would empty them is
    /// not applied, one that would remove more than half of them waits
    /// for [`SETTLE`].
    pub(super) fn reload_parts(
        &mut self,
        actions: &mut VecDeque<Action>,
        cause: ReloadCause,
        parts: &[PathBuf],
    ) -> Result<ReloadReply, Vec<String>> {
        self.reload_files(actions, cause, Some(parts))
    }

    fn reload_files(
        &mut self,
        actions: &mut VecDeque<Action>,
        cause: ReloadCause,
        parts: Option<&[PathBuf]>,
    ) -> Result<ReloadReply, Vec<String>> {
        let now = rea_store::clock::now();
        let force = cause == ReloadCause::Signal || cause == ReloadCause::Settled;
        // A reload of the whole set decides about any held change; one of
        // some parts, about a held change of the same parts only.
        let ours = parts.is_none() || self.files.settling_parts().as_deref() == parts;
        if cause != ReloadCause::Settled && ours {
            self.files.settling = None;
        }
        self.notify.reloading();
        // A part deleted takes its jobs with it, unguarded (a missing main
        // file is the watcher's `Missing`): only the parts still there are
        // weighed.
        let present: Vec<PathBuf> = parts
            .unwrap_or_default()
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok())
            .cloned()
            .collect();
        let part_jobs = |files: &crate::jobfiles::JobFiles| -> usize {
            present.iter().map(|p| files.part_jobs(p)).sum()
        };
        let jobs_before = match parts {
            None => self.config.jobs.len(),
            Some(_) => part_jobs(&self.files.files),
        };
        // Put back if nothing is applied, so the next look sees the change.
        let before = self.files.files.clone();
        let loaded = match parts {
            None => load(&mut self.files.files, force),
            Some(parts) => self.files.files.load_parts(parts, force).inspect(|l| {
                for w in l.iter().flat_map(|l| &l.config.warnings) {
                    warn!("{w}");
                }
            }),
        };
        let loaded = loaded.and_then(|l| match l {
            Some(l) => self.check_names(&l.config).map(|()| Some(l)),
            None => Ok(None),
        });
        let result = match loaded {
            Ok(None) => {
                if ours {
                    self.files.settling = None;
                }
                // Nothing new, but a file still refused is still an error
                // for whoever asked (logged and recorded when it was new).
                let still: Vec<String> = self
                    .files
                    .files
                    .refused()
                    .iter()
                    .flat_map(|(_, diags)| diags.iter().map(ToString::to_string))
                    .collect();
                if still.is_empty() {
                    // The file on disk is the one in force again (an edit
                    // reverted to the last good bytes): nothing to apply,
                    // and nothing wrong any more.
                    if self.files.error.take().is_some() {
                        info!("the job file is valid again: it is the configuration in force");
                    }
                    Ok(ReloadReply {
                        jobs: self.config.jobs.len(),
                        unchanged: true,
                    })
                } else {
                    Err(still)
                }
            }
            Ok(Some(loaded)) => {
                let refusals: Vec<String> = loaded
                    .refused
                    .iter()
                    .flat_map(|(_, diags)| diags.iter().map(ToString::to_string))
                    .collect();
                let jobs_after = match parts {
                    None => loaded.config.jobs.len(),
                    Some(_) => part_jobs(&self.files.files),
                };
                let shrink = Shrink {
                    before: jobs_before,
                    after: jobs_after,
                    digest: loaded.config.digest,
                    parts: parts.map(<[PathBuf]>::to_vec),
                };
                match self.shrink_guard(&shrink, cause, now) {
                    Some(held) => {
                        self.files.files = before;
                        held
                    }
                    None => {
                        if ours {
                            self.files.settling = None;
                        }
                        super::startup::warn_unenforceable(&loaded.config, &self.containment);
                        super::startup::apply_tenant_limits(&loaded.config, &self.containment);
                        let reply = self.apply(loaded.config, actions, now);
                        if refusals.is_empty() {
                            Ok(reply)
                        } else {
                            Err(self.reject(refusals, now))
                        }
                    }
                }
            }
            Err(diags) => {
                self.files.files = before;
                let errors: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
                Err(self.reject(errors, now))
            }
        };
        self.notify_ready();
        result
    }

    /// Puts a valid configuration in force.
    fn apply(
        &mut self,
        cfg: Config,
        actions: &mut VecDeque<Action>,
        now: DateTime<Utc>,
    ) -> ReloadReply {
        if self.files.error.take().is_some() {
            info!("the job file is valid again");
        }
        let (before, after) = (self.config.jobs.len(), cfg.jobs.len());
        if after * 2 < before {
            warn!(
                before,
                after,
                "the job file now has {after} job(s) instead of {before}; the others are removed"
            );
        }
        actions.extend(self.engine.reload(&cfg.plan(), now));
        // A job new to this file may already be running on another node.
        self.tell_elsewhere();
        metrics::reloaded(self.metrics.as_mut(), &self.config, &cfg);
        self.backend.reloaded(&self.config, &cfg);
        self.webhooks
            .set_private_targets(cfg.daemon.webhook_private_targets);
        if cfg.daemon.job_output != self.config.daemon.job_output {
            self.journald = crate::journal_for(cfg.daemon.job_output);
        }
        if (
            &cfg.daemon.web_hosts,
            &cfg.daemon.web_viewers,
            &cfg.daemon.web_proxy,
        ) != (
            &self.config.daemon.web_hosts,
            &self.config.daemon.web_viewers,
            &self.config.daemon.web_proxy,
        ) {
            // The TCP address stays until a restart.
            let tcp = self.web.tcp_address();
            self.web
                .configure(crate::web::settings(&cfg, self.others, tcp));
        }
        let old = std::mem::replace(&mut self.config, cfg);
        self.files.last_reload = now;
        free_in_background(old);
        info!(jobs = self.config.jobs.len(), "job file reloaded");
        self.publish_reload();
        ReloadReply {
            jobs: self.config.jobs.len(),
            unchanged: false,
        }
    }

    /// What the watcher saw would remove every job (of the files read), or
    /// more than half of them: hold it (see `reload`). None: apply it.
    fn shrink_guard(
        &mut self,
        shrink: &Shrink,
        cause: ReloadCause,
        now: DateTime<Utc>,
    ) -> Option<Result<ReloadReply, Vec<String>>> {
        let Shrink { before, after, .. } = *shrink;
        let from_watcher = matches!(cause, ReloadCause::Watcher | ReloadCause::Settled);
        if !from_watcher || before == 0 || after * 2 >= before {
            return None;
        }
        let which = match &shrink.parts {
            None => self.opts.file.display().to_string(),
            Some(parts) => parts
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        };
        if after == 0 {
            let message = format!(
                "{which}: the job file is now empty of jobs (it had {before}); a file seen half written is not applied: run `rea reload` (or send SIGHUP) to apply it"
            );
            return Some(Err(self.reject(vec![message], now)));
        }
        match (cause, &self.files.settling) {
            (ReloadCause::Settled, Some(held)) if held.digest == shrink.digest => None,
            _ => {
                warn!(
                    before,
                    after,
                    file = which.as_str(),
                    "the job file would remove {} of {before} jobs; applying it once it has not changed for {}",
                    before - after,
                    rea_core::duration::format(SETTLE)
                );
                // A change of other files already held is not forgotten:
                // both then settle as one reload of the whole set.
                let parts = match &self.files.settling {
                    Some(held) if held.parts != shrink.parts => None,
                    _ => shrink.parts.clone(),
                };
                self.files.settling = Some(Settling {
                    digest: shrink.digest,
                    at: tokio::time::Instant::now() + SETTLE,
                    parts,
                });
                Some(Ok(ReloadReply {
                    jobs: self.config.jobs.len(),
                    unchanged: true,
                }))
            }
        }
    }

    /// Job names must not be those of pending one-shots.
    fn check_names(&self, cfg: &Config) -> Result<(), Vec<rea_config::Diagnostic>> {
        name_clashes(cfg, |name| self.engine.oneshot(name).is_some())
    }

    /// The file on disk is not put in force: say why, everywhere.
    pub(super) fn reject(&mut self, errors: Vec<String>, now: DateTime<Utc>) -> Vec<String> {
        for e in &errors {
            error!("{e}");
        }
        error!(
            "the job file has {} error(s); still running the last good configuration",
            errors.len()
        );
        let mut rec = Record::new(Event::ConfigRejected, now);
        rec.count = Some(errors.len() as u64);
        rec.reason = Some(errors.join("\n"));
        rec.detail = Some(json!({ "file": self.opts.file.display().to_string() }));
        self.append(&rec);
        self.files.error = Some((now, errors.clone()));
        errors
    }
}

/// A change as the shrink guard weighs it.
struct Shrink {
    /// Jobs of the files read, before and after.
    before: usize,
    after: usize,
    /// The digest of the configuration it would make.
    digest: u64,
    /// The parts read (None: the whole set).
    parts: Option<Vec<PathBuf>>,
}

/// Job names must not be those of pending one-shots (`rea status NAME`,
/// `rea cancel NAME` would not know which is meant): one diagnostic per
/// clash, at the job.
pub(super) fn name_clashes(
    cfg: &Config,
    pending: impl Fn(&str) -> bool,
) -> Result<(), Vec<rea_config::Diagnostic>> {
    let clashes: Vec<rea_config::Diagnostic> = cfg
        .jobs
        .iter()
        .filter(|j| pending(&j.name))
        .map(|j| {
            cfg.diagnostic_at(
                &j.name,
                "",
                format!("job {:?} has the name of a pending one-shot", j.name),
                Some(format!(
                    "rename the job, or cancel the one-shot first: rea cancel {}",
                    j.name
                )),
            )
        })
        .collect();
    if clashes.is_empty() {
        Ok(())
    } else {
        Err(clashes)
    }
}
