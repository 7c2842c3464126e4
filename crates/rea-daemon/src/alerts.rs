//! An alert raised or resolved by the engine ([`Action::Alert`]) reaches
//! its channels here, in this order: the history (one `alert` record,
//! rea-history(5)), the log, the job's `on_alert` hook (as the job's user,
//! outside the `max_concurrent` slots, `REA_ALERT_*` in its environment)
//! and mail to its `mailto` (`alert.mail`, default on). The metrics
//! (`rea_job_alert`, `rea_job_overdue_seconds`) are state, read from the
//! engine at each scrape (`metrics/registry.rs`).
//!
//! In cluster mode the store decides which node tells each change
//! (`rea_store::cluster::ClusterNode::alert`; rea-pg's `rea.alerts`), so
//! that an alert every node's engine raised is told once.
//!
//! A new channel (a webhook) is one more call in `Loop::tell_alert`: it
//! receives the [`AlertEvent`] and the job; it must not block the loop
//! (hand the delivery to a task, as mail does).
//!
//! [`Action::Alert`]: rea_core::engine::Action::Alert

use rea_core::alert::{AlertEvent, AlertKind, AlertState};
use rea_store::cluster::AlertClaim;
use std::collections::VecDeque;

use rea_core::engine::{Action, AlertNotice};
use rea_core::record::format_ts;
use tracing::{debug, info, warn};

use super::{Loop, Msg};

/// `on_alert` hooks' batch ids start here, far above the engine's
/// `StartHooks` ids (which count from 1), so that the two never meet in
/// `hook_batches` (the engine ignores a `hooks_done` for an id it did not
/// hand out).
pub(super) const HOOK_IDS: u64 = 1 << 62;

impl Loop {
    /// An alert raised or resolved by the engine. In cluster mode the
    /// store first decides which node tells it ([`Loop::alert_told`]);
    /// the loop does not wait for that answer.
    pub(super) fn on_alert(&mut self, n: AlertNotice, actions: &mut VecDeque<Action>) {
        if let Some(cl) = self.backend.node() {
            let tx = self.runs.sender();
            let (job, kind) = (n.event.job.clone(), n.event.kind.as_str());
            let raised = n.event.state == AlertState::Raised;
            let no_success = (raised && n.event.kind == AlertKind::NoSuccessWithin)
                .then(|| n.job.extras().alert.no_success_within)
                .flatten();
            let notice = Box::new(n);
            cl.node.alert(
                &job,
                kind,
                raised,
                no_success,
                Box::new(move |claim| {
                    let _ = tx.send(Msg::AlertTold { notice, claim });
                }),
            );
            return;
        }
        self.tell_alert(n, actions);
    }

    /// Cluster mode: the store's answer for an alert of this node's engine.
    pub(super) fn alert_told(
        &mut self,
        n: AlertNotice,
        claim: AlertClaim,
        actions: &mut VecDeque<Action>,
    ) {
        match claim {
            AlertClaim::Mine => self.tell_alert(n, actions),
            AlertClaim::Elsewhere(by) => debug!(
                job = n.event.job.as_str(),
                kind = n.event.kind.as_str(),
                state = n.event.state.as_str(),
                "alert told by {}",
                by.as_deref().unwrap_or("another node")
            ),
            AlertClaim::Unavailable(e) => {
                warn!(
                    job = n.event.job.as_str(),
                    kind = n.event.kind.as_str(),
                    "the cluster database did not say which node tells this alert ({e}): told here"
                );
                self.tell_alert(n, actions);
            }
        }
    }

    /// Records the alert and tells the job's channels.
    fn tell_alert(&mut self, n: AlertNotice, actions: &mut VecDeque<Action>) {
        let AlertNotice { job, event } = n;
        let rec = event.record();
        log_alert(&event);
        self.append(&rec);
        if let Some(command) = job.extras().on_alert.clone() {
            self.alert_hooks += 1;
            let id = self.alert_hooks;
            self.start_alert_hook(id, job.clone(), &event, command, actions);
        }
        if job.extras().alert.mail && !job.extras().mailto.is_empty() {
            self.send_mail(&job, &rec);
        }
        self.notify(&rea_core::notify::Notification::Alert {
            job: event.job.clone(),
            kind: event.kind.as_str().to_string(),
            state: event.state,
            reason: event.reason.clone(),
            at: event.at,
        });
    }
}

fn log_alert(e: &AlertEvent) {
    let (job, kind, reason) = (e.job.as_str(), e.kind.as_str(), e.reason.as_str());
    match e.state {
        rea_core::alert::AlertState::Raised => warn!(job, kind, reason, "alert raised"),
        rea_core::alert::AlertState::Resolved => info!(job, kind, reason, "alert resolved"),
    }
}

/// What an `on_alert` hook finds in its environment besides the job's
/// (`REA_JOB`, `REA_TENANT`, ...).
pub(super) fn alert_env(e: &AlertEvent) -> Vec<(String, String)> {
    let mut env = vec![
        ("REA_ALERT_KIND".to_string(), e.kind.as_str().to_string()),
        ("REA_ALERT_STATE".to_string(), e.state.as_str().to_string()),
        ("REA_ALERT_REASON".to_string(), e.reason.clone()),
        ("REA_ALERT_AT".to_string(), format_ts(e.at)),
    ];
    if let Some(due) = e.due {
        env.push(("REA_ALERT_DUE".to_string(), format_ts(due)));
    }
    env
}
