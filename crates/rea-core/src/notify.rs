//! Webhooks and pings a job asks for (`webhook`, `ping`), which events they
//! are sent for ([`Filter`]), and the events themselves ([`Notification`]):
//! a run that started or ended, or an alert raised or resolved. Plain data:
//! reading it from TOML is `rea-config`'s work, sending it the daemon's
//! (`rea_daemon::webhooks`).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::record::{Record, RunStatus};

/// A job's webhooks and ping, shared (`Arc`) by the jobs that inherit them
/// from `[defaults]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Notify {
    /// Each gets a POST of the JSON body for the events its filter matches.
    pub webhooks: Vec<Webhook>,
    /// A dead man's switch told of each run's start and end.
    pub ping: Option<Ping>,
}

impl Notify {
    pub fn is_empty(&self) -> bool {
        self.webhooks.is_empty() && self.ping.is_none()
    }
}

/// `webhook = { url = "https://…", on = ["failure"], timeout = "10s" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `http://` or `https://` (checked by the reader).
    pub url: String,
    pub on: Filter,
    /// For each attempt: resolve, connect, send, and the answer.
    pub timeout: Duration,
    /// Attempts in all, the first included (retried with backoff).
    pub attempts: u32,
}

/// `ping = "https://hc-ping.com/UUID"` (or a table with `style` and `timeout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    pub url: String,
    pub style: PingStyle,
    pub timeout: Duration,
    pub attempts: u32,
}

/// How a ping service is told of a start, a success and a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PingStyle {
    /// Healthchecks.io: `URL/start`, `URL`, `URL/<exit code>` or `URL/fail`,
    /// with the tail of the output as the body.
    #[default]
    Healthchecks,
    /// Cronitor's telemetry: `URL?state=run|complete|fail&status_code=N`.
    Cronitor,
}

impl PingStyle {
    pub const ALL: [(&'static str, PingStyle); 2] = [
        ("healthchecks", PingStyle::Healthchecks),
        ("cronitor", PingStyle::Cronitor),
    ];
}

/// The default timeout of one attempt of a webhook or a ping.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default number of attempts of a delivery, and the most allowed.
pub const DEFAULT_ATTEMPTS: u32 = 5;
pub const MAX_ATTEMPTS: u32 = 10;

/// The kinds of alert a filter may name as `alert:KIND` (issue #23's
/// expectations).
pub const ALERT_KINDS: [&str; 4] = ["late", "running_over", "no_success_within", "failures"];

/// Which events a webhook is sent for: run outcomes (`success`,
/// `failure`, …), the start of a run (`start`), and alerts (`alert` for
/// every kind, `alert:late` for one). A set of bits: copied, compared and
/// matched without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Filter(u32);

const START: u32 = 1 << 0;
const SUCCESS: u32 = 1 << 1;
const FAILURE: u32 = 1 << 2;
const TIMEOUT: u32 = 1 << 3;
const KILLED: u32 = 1 << 4;
const SKIPPED: u32 = 1 << 5;
const INTERRUPTED: u32 = 1 << 6;
/// `alert:KIND` is `ALERT_BASE << i` for `ALERT_KINDS[i]`.
const ALERT_BASE: u32 = 1 << 8;
const ALERTS: u32 = 0b1111 << 8;
const ENDS: u32 = SUCCESS | FAILURE | TIMEOUT | KILLED | SKIPPED | INTERRUPTED;

impl Filter {
    /// The names a filter is written with, and what each matches.
    pub const NAMES: [(&'static str, &'static str); 14] = [
        ("start", "a run started"),
        ("success", "a run succeeded"),
        (
            "failure",
            "a run failed (non-zero exit, a signal, out of memory)",
        ),
        ("timeout", "a run timed out"),
        ("killed", "a run was killed (rea kill, replace, shutdown)"),
        ("skipped", "an occurrence was skipped (overlap)"),
        ("interrupted", "a run was cut short by the daemon's death"),
        ("end", "every end of a run: all of the above but start"),
        ("problem", "failure, timeout, killed and interrupted"),
        ("alert", "every alert, raised or resolved"),
        ("alert:late", "the late alert"),
        ("alert:running_over", "the running_over alert"),
        ("alert:no_success_within", "the no_success_within alert"),
        ("alert:failures", "the failures alert"),
    ];

    /// What a webhook without `on` is sent for: every problem and every
    /// alert (`["problem", "alert"]`).
    pub const DEFAULT: Filter = Filter(FAILURE | TIMEOUT | KILLED | INTERRUPTED | ALERTS);

    pub const NONE: Filter = Filter(0);

    /// One name of [`Filter::NAMES`]; None if unknown.
    pub fn parse(name: &str) -> Option<Filter> {
        let bits = match name {
            "start" => START,
            "success" => SUCCESS,
            "failure" => FAILURE,
            "timeout" => TIMEOUT,
            "killed" => KILLED,
            "skipped" => SKIPPED,
            "interrupted" => INTERRUPTED,
            "end" => ENDS,
            "problem" => FAILURE | TIMEOUT | KILLED | INTERRUPTED,
            "alert" => ALERTS,
            _ => {
                let kind = name.strip_prefix("alert:")?;
                let i = ALERT_KINDS.iter().position(|k| *k == kind)?;
                ALERT_BASE << i
            }
        };
        Some(Filter(bits))
    }

    pub fn union(self, other: Filter) -> Filter {
        Filter(self.0 | other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether a run's record of `status` is sent.
    pub fn matches_run(self, status: RunStatus) -> bool {
        let bit = match status {
            RunStatus::Started => START,
            RunStatus::Succeeded => SUCCESS,
            // Out of memory is a failure: `failure` (and `problem`) send it.
            RunStatus::Failed | RunStatus::OomKilled => FAILURE,
            RunStatus::TimedOut => TIMEOUT,
            RunStatus::Killed => KILLED,
            RunStatus::Skipped => SKIPPED,
            RunStatus::Interrupted => INTERRUPTED,
            RunStatus::Cancelled => 0,
        };
        self.0 & bit != 0
    }

    /// Whether an alert of `kind` (`late`, …) is sent; a kind this build
    /// does not know is sent by `alert` only.
    pub fn matches_alert(self, kind: &str) -> bool {
        match ALERT_KINDS.iter().position(|k| *k == kind) {
            Some(i) => self.0 & (ALERT_BASE << i) != 0,
            None => self.0 & ALERTS == ALERTS,
        }
    }

    /// Whether `notification` is sent.
    pub fn matches(self, notification: &Notification) -> bool {
        match notification {
            Notification::Run { record } => record.status.is_some_and(|s| self.matches_run(s)),
            Notification::Alert { kind, .. } => self.matches_alert(kind),
        }
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Filter::NAMES
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| {
                // Only the single names, not the groups.
                !matches!(*n, "end" | "problem" | "alert")
                    && Filter::parse(n).is_some_and(|b| self.0 & b.0 == b.0)
            })
            .collect();
        write!(f, "Filter({})", names.join(", "))
    }
}

pub use crate::alert::AlertState;

/// What a webhook or a ping is about.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    /// A run's `started` record, or its final one.
    Run { record: Box<Record> },
    /// An alert of `job` raised or resolved at `at`.
    Alert {
        job: String,
        /// `late`, `running_over`, `no_success_within`, `failures`.
        kind: String,
        state: AlertState,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl Notification {
    /// The job it is about.
    pub fn job(&self) -> Option<&str> {
        match self {
            Notification::Run { record } => record.job.as_deref(),
            Notification::Alert { job, .. } => Some(job),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_match() {
        for (name, _) in Filter::NAMES {
            assert!(Filter::parse(name).is_some(), "{name}");
        }
        assert!(Filter::parse("alert:nope").is_none());
        assert!(Filter::parse("succes").is_none());
        let f = Filter::parse("failure").unwrap();
        assert!(f.matches_run(RunStatus::Failed));
        assert!(!f.matches_run(RunStatus::Succeeded));
        assert!(!f.matches_run(RunStatus::TimedOut));
        assert!(!f.matches_alert("late"));
        let late = Filter::parse("alert:late").unwrap();
        assert!(late.matches_alert("late"));
        assert!(!late.matches_alert("failures"));
        assert!(!late.matches_alert("future_kind"));
        let all = Filter::parse("alert").unwrap();
        assert!(all.matches_alert("future_kind"));
        assert!(Filter::DEFAULT.matches_run(RunStatus::TimedOut));
        assert!(!Filter::DEFAULT.matches_run(RunStatus::Succeeded));
        assert!(!Filter::DEFAULT.matches_run(RunStatus::Started));
        let end = Filter::parse("end").unwrap();
        assert!(RunStatus::FINAL.iter().all(|s| end.matches_run(*s)));
        assert_eq!(
            format!("{:?}", f.union(late)),
            "Filter(failure, alert:late)"
        );
    }
}
