//! Stopping: the first SIGTERM/SIGINT stops new runs and hooks and gives
//! running ones `shutdown_grace` to finish; when it runs out, or at a second
//! signal, every run and hook is terminated (TERM, its `kill_grace`, KILL to
//! its group) and the loop ends once the last one has reported, so each
//! run is recorded.

use std::collections::VecDeque;

use rea_core::engine::Action;
use tokio::time::Instant;
use tracing::{info, warn};

use super::Loop;

/// Where the daemon is in stopping. One explicit state, read by the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stopping {
    /// Running normally.
    No,
    /// A stop signal came: no new runs; running ones may finish until
    /// `grace_ends`.
    Draining { grace_ends: Instant },
    /// Every run was told to terminate; the loop ends when the last one
    /// has reported.
    Terminating,
}

impl Stopping {
    pub(super) fn is_stopping(self) -> bool {
        self != Stopping::No
    }

    /// When the shutdown grace runs out, while draining.
    pub(super) fn grace_ends(self) -> Option<Instant> {
        match self {
            Stopping::Draining { grace_ends } => Some(grace_ends),
            _ => None,
        }
    }
}

/// Sleeps until `at` (forever without one: the loop's `select!` only
/// polls this while there is a deadline).
pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Loop {
    pub(super) fn on_stop_signal(&mut self, name: &str, actions: &mut VecDeque<Action>) {
        self.stop_waiting_followers();
        match self.stopping {
            Stopping::No => {
                let grace = self.config.daemon.shutdown_grace;
                info!(
                    signal = name,
                    running = self.engine.running(),
                    grace = %rea_core::duration::format(grace),
                    "stopping: no new runs; waiting for running jobs (send the signal again to stop them now)"
                );
                actions.extend(self.engine.shutdown());
                self.stopping = Stopping::Draining {
                    grace_ends: Instant::now() + grace,
                };
                self.notify.stopping(&format!(
                    "stopping: waiting for {} running job(s)",
                    self.engine.running()
                ));
            }
            Stopping::Draining { .. } | Stopping::Terminating => {
                warn!(signal = name, "second signal: terminating running jobs now");
                self.terminate_all(actions);
            }
        }
    }

    pub(super) fn on_grace_expired(&mut self, actions: &mut VecDeque<Action>) {
        warn!(
            running = self.engine.running(),
            "shutdown grace expired; terminating running jobs"
        );
        self.terminate_all(actions);
    }

    /// Terminated runs still report (their groups get SIGKILL after each
    /// run's `kill_grace`); the loop waits for them with no deadline.
    fn terminate_all(&mut self, actions: &mut VecDeque<Action>) {
        actions.extend(self.engine.terminate_all());
        self.stopping = Stopping::Terminating;
        self.terminate_hooks();
    }
}
