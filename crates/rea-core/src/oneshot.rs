//! One-shot jobs: submitted at run time (`rea submit --in 30m -- cmd`,
//! `rea at 14:30`) to run once at an instant, durable across restarts. This
//! is the definition only, as plain data; the engine schedules it, a store
//! (`rea-store`'s journal) keeps it, the program runs it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::backoff::RetryPolicy;

/// Retry settings of a one-shot (the job file's `retry`, flattened).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct OneShotRetry {
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
}

/// One-shots have no job file entry; this stands in for its `kill_grace`.
pub const KILL_GRACE: Duration = Duration::from_secs(10);
/// ... and this for its `output_limit`.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// A job that runs once at `due`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneShot {
    /// The name given at submission, or a generated id; unique among
    /// pending one-shots and distinct from every job name.
    pub id: String,
    /// The program and its arguments, executed without a shell (with
    /// `shell`, `argv[0]` is a script for `/bin/sh -c`). Shared: a million
    /// pending one-shots typically run a few commands (the journal's replay
    /// and the daemon's submissions reuse equal ones).
    pub argv: Arc<[String]>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shell: bool,
    /// The submitter's working directory (shared like `argv`).
    pub dir: Arc<Path>,
    /// Only what the submitter passed with `--env`; never its whole
    /// environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub due: DateTime<Utc>,
    pub submitted: DateTime<Utc>,
    /// If the daemon was down at `due` and comes back later than this
    /// after it, the one-shot is dropped (recorded) instead of run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "is_default_retry")]
    pub retry: OneShotRetry,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl OneShotRetry {
    /// The job file's rule for `retry`, for a one-shot's: at most
    /// [`RetryPolicy::MAX_ATTEMPTS`] retries, delays within
    /// `duration::MAX`, and `max_delay` not below `delay`. The error names
    /// the wrong field as the caller calls them (`names`: attempts, delay,
    /// max delay; e.g. the command line's flags or the protocol's fields).
    pub fn check(&self, names: [&str; 3]) -> Result<(), String> {
        let [attempts, delay_name, max_delay_name] = names;
        if self.attempts > RetryPolicy::MAX_ATTEMPTS {
            return Err(format!(
                "{attempts}: retries must be between 0 and {}, not {}",
                RetryPolicy::MAX_ATTEMPTS,
                self.attempts
            ));
        }
        let delay = self
            .delay_ms
            .map(|ms| crate::duration::from_millis_checked(ms, delay_name))
            .transpose()
            .map_err(|e| e.message)?;
        let max_delay = self
            .max_delay_ms
            .map(|ms| crate::duration::from_millis_checked(ms, max_delay_name))
            .transpose()
            .map_err(|e| e.message)?;
        let defaults = RetryPolicy::default();
        let (delay, max_delay) = (
            delay.unwrap_or(defaults.delay),
            max_delay.unwrap_or(defaults.max_delay.max(delay.unwrap_or_default())),
        );
        if max_delay < delay {
            return Err(format!(
                "{max_delay_name} ({}) must be at least {delay_name} ({})",
                crate::duration::format_exact(max_delay),
                crate::duration::format_exact(delay)
            ));
        }
        Ok(())
    }
}

fn is_default_retry(r: &OneShotRetry) -> bool {
    *r == OneShotRetry::default()
}

impl OneShot {
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }

    pub fn expire(&self) -> Option<Duration> {
        self.expire_ms.map(Duration::from_millis)
    }

    /// The retry policy in the job file's terms.
    pub fn retry_policy(&self) -> RetryPolicy {
        let mut p = RetryPolicy {
            attempts: self.retry.attempts,
            ..Default::default()
        };
        if let Some(d) = self.retry.delay_ms {
            p.delay = Duration::from_millis(d);
        }
        if let Some(d) = self.retry.max_delay_ms {
            p.max_delay = Duration::from_millis(d);
        }
        if p.max_delay < p.delay {
            p.max_delay = p.delay;
        }
        p
    }

    /// What to execute.
    pub fn program(&self) -> crate::run::Program {
        if self.shell {
            crate::run::Program::Shell {
                shell: "/bin/sh".into(),
                script: self.argv.first().cloned().unwrap_or_default(),
            }
        } else {
            crate::run::Program::Argv(self.argv.to_vec())
        }
    }
}
