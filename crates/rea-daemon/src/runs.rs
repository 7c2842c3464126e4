//! The runs and hooks this daemon spawned and has not seen end, and the
//! clients waiting for a run's end (`trigger --wait`, followers). Each
//! spawned process is watched by a task of its own, which reports its end to
//! the loop as a [`Msg`]; the loop then tells the engine and forgets it here.
//!
//! What does not live here: deciding what runs (the engine), building a
//! run's process (`actions.rs`, `hooks.rs`), streaming its output to
//! followers (`follow.rs`, which asks here for a run's output tap).

use std::collections::HashMap;

use rea_exec::{Follower, RunHandle, Running};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::Msg;

pub(super) struct Runs {
    /// Runs spawned and not finished: run id → (its handle, its job or
    /// one-shot).
    handles: HashMap<String, (RunHandle, String)>,
    /// Clients told a run's final record, by run id.
    waiters: HashMap<String, Vec<oneshot::Sender<Value>>>,
    /// Where the watching tasks report an end.
    tx: mpsc::UnboundedSender<Msg>,
}

impl Runs {
    pub(super) fn new(tx: mpsc::UnboundedSender<Msg>) -> Runs {
        Runs {
            handles: HashMap::new(),
            waiters: HashMap::new(),
            tx,
        }
    }

    /// Where an answer for the loop goes (a cluster store's, told on its
    /// task).
    pub(super) fn sender(&self) -> mpsc::UnboundedSender<Msg> {
        self.tx.clone()
    }

    /// `run` of `name` started: kept until its end arrives as
    /// [`Msg::Finished`].
    pub(super) fn spawned(
        &mut self,
        run: String,
        name: String,
        handle: RunHandle,
        running: Running,
    ) {
        self.handles.insert(run.clone(), (handle, name));
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let outcome = running.await;
            let _ = tx.send(Msg::Finished {
                run,
                outcome: Box::new(outcome),
            });
        });
    }

    /// What the running `run` has used so far (None: no such run, or no
    /// cgroup to ask).
    pub(super) fn usage_now(&self, run: &str) -> Option<rea_core::run::Usage> {
        self.handles.get(run)?.0.usage_now()
    }

    /// A sendmail of `tenant` started, for `job`'s run `run`: its failure
    /// is logged, and its end arrives as [`Msg::MailEnded`].
    pub(super) fn mail_spawned(&self, tenant: String, job: String, run: String, running: Running) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let o = running.await;
            if o.timed_out {
                tracing::warn!(
                    job = job.as_str(),
                    run = run.as_str(),
                    "sendmail killed after {}",
                    rea_core::duration::format(super::mail::TIMEOUT)
                );
            } else if o.termination != rea_core::run::Termination::Exited(0) {
                tracing::warn!(
                    job = job.as_str(),
                    run = run.as_str(),
                    output = o.output.text.trim(),
                    "sendmail failed ({:?})",
                    o.termination
                );
            }
            let _ = tx.send(Msg::MailEnded { tenant });
        });
    }

    /// A hook of the batch `id` started; its end arrives as
    /// [`Msg::HookFinished`] (its handle is the batch's).
    pub(super) fn hook_spawned(&self, id: u64, running: Running) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let outcome = running.await;
            let _ = tx.send(Msg::HookFinished {
                id,
                outcome: Box::new(outcome),
            });
        });
    }

    /// `run` ended (its watching task said so).
    pub(super) fn ended(&mut self, run: &str) {
        self.handles.remove(run);
    }

    /// Asks `run` to stop (its job's TERM, grace, KILL); nothing if it has
    /// ended.
    pub(super) fn terminate(&self, run: &str) {
        if let Some((h, _)) = self.handles.get(run) {
            h.terminate();
        }
    }

    /// Whether a run of the job or one-shot `name` is running.
    pub(super) fn any_of(&self, name: &str) -> bool {
        self.handles.values().any(|(_, n)| n == name)
    }

    /// The newest running run of `name` (run ids sort by when they were
    /// made: the largest is the newest).
    pub(super) fn newest_of(&self, name: &str) -> Option<String> {
        self.handles
            .iter()
            .filter(|(_, (_, n))| n == name)
            .map(|(run, _)| run)
            .max()
            .cloned()
    }

    /// The output of `run` as it comes, if it is running.
    pub(super) fn follow(&self, run: &str) -> Option<Follower> {
        Some(self.handles.get(run)?.0.follow())
    }

    /// A receiver of `run`'s final record.
    pub(super) fn await_end(&mut self, run: &str) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.waiters.entry(run.to_string()).or_default().push(tx);
        rx
    }

    /// Those waiting for `run`'s end (taken: each is told once).
    pub(super) fn take_waiters(&mut self, run: &str) -> Option<Vec<oneshot::Sender<Value>>> {
        self.waiters.remove(run)
    }
}
