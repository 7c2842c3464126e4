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

/// The fields of a one-shot that are rarely set, boxed so that the common
/// one-shot does not carry ~100 bytes of empty maps and options (a million
/// pending one-shots are a case the daemon must hold).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OneShotRare {
    /// Only what the submitter passed with `--env`; never its whole
    /// environment.
    pub env: BTreeMap<String, String>,
    /// If the daemon was down at `due` and comes back later than this
    /// after it, the one-shot is dropped (recorded) instead of run.
    pub expire_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub retry: OneShotRetry,
    pub tags: Vec<String>,
}

static NO_RARE: OneShotRare = OneShotRare {
    env: BTreeMap::new(),
    expire_ms: None,
    timeout_ms: None,
    retry: OneShotRetry {
        attempts: 0,
        delay_ms: None,
        max_delay_ms: None,
    },
    tags: Vec::new(),
};

impl OneShotRare {
    /// `None` when every field has its default (nothing to box).
    pub fn boxed(
        env: BTreeMap<String, String>,
        expire_ms: Option<u64>,
        timeout_ms: Option<u64>,
        retry: OneShotRetry,
        tags: Vec<String>,
    ) -> Option<Box<OneShotRare>> {
        let rare = OneShotRare {
            env,
            expire_ms,
            timeout_ms,
            retry,
            tags,
        };
        (rare != NO_RARE).then(|| Box::new(rare))
    }
}

/// A job that runs once at `due`. On the wire (the journal, the control
/// socket, the cluster database) its fields are flat, as [`Wire`] spells
/// them.
#[derive(Debug, Clone, PartialEq)]
pub struct OneShot {
    /// The name given at submission, or a generated id; unique among
    /// pending one-shots and distinct from every job name. A `Box<str>`:
    /// 8 bytes less than a `String` per pending one-shot.
    pub id: Box<str>,
    /// The program and its arguments, executed without a shell (with
    /// `shell`, `argv[0]` is a script for `/bin/sh -c`). Shared: a million
    /// pending one-shots typically run a few commands (the journal's replay
    /// and the daemon's submissions reuse equal ones).
    pub argv: Arc<[String]>,
    pub shell: bool,
    /// The submitter's working directory (shared like `argv`).
    pub dir: Arc<Path>,
    pub due: DateTime<Utc>,
    pub submitted: DateTime<Utc>,
    /// `env`, `expire_ms`, `timeout_ms`, `retry`, `tags` (see
    /// [`OneShotRare`]); `None` when all are defaults.
    pub rare: Option<Box<OneShotRare>>,
}

/// A one-shot as the journal and the control socket spell it.
#[derive(Deserialize)]
struct Wire {
    id: String,
    argv: Arc<[String]>,
    #[serde(default)]
    shell: bool,
    dir: Arc<Path>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    due: DateTime<Utc>,
    submitted: DateTime<Utc>,
    #[serde(default)]
    expire_ms: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    retry: OneShotRetry,
    #[serde(default)]
    tags: Vec<String>,
}

/// [`Wire`] borrowed, for writing without a copy.
#[derive(Serialize)]
struct WireRef<'a> {
    id: &'a str,
    argv: &'a [String],
    #[serde(skip_serializing_if = "is_false")]
    shell: bool,
    dir: &'a Path,
    #[serde(skip_serializing_if = "is_empty_map")]
    env: &'a BTreeMap<String, String>,
    due: &'a DateTime<Utc>,
    submitted: &'a DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expire_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "is_default_retry_ref")]
    retry: &'a OneShotRetry,
    #[serde(skip_serializing_if = "is_empty_list")]
    tags: &'a [String],
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_empty_map(m: &&BTreeMap<String, String>) -> bool {
    m.is_empty()
}

fn is_empty_list(l: &&[String]) -> bool {
    l.is_empty()
}

fn is_default_retry_ref(r: &&OneShotRetry) -> bool {
    is_default_retry(r)
}

impl Serialize for OneShot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rare = self.rare();
        WireRef {
            id: &self.id,
            argv: &self.argv,
            shell: self.shell,
            dir: &self.dir,
            env: &rare.env,
            due: &self.due,
            submitted: &self.submitted,
            expire_ms: rare.expire_ms,
            timeout_ms: rare.timeout_ms,
            retry: &rare.retry,
            tags: &rare.tags,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for OneShot {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OneShot, D::Error> {
        let w = Wire::deserialize(d)?;
        Ok(OneShot {
            id: w.id.into_boxed_str(),
            argv: w.argv,
            shell: w.shell,
            dir: w.dir,
            due: w.due,
            submitted: w.submitted,
            rare: OneShotRare::boxed(w.env, w.expire_ms, w.timeout_ms, w.retry, w.tags),
        })
    }
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
    /// The rarely set fields (defaults when none is set).
    pub fn rare(&self) -> &OneShotRare {
        self.rare.as_deref().unwrap_or(&NO_RARE)
    }

    /// The rarely set fields, to change them.
    pub fn rare_mut(&mut self) -> &mut OneShotRare {
        self.rare.get_or_insert_with(Box::default)
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.rare().timeout_ms.map(Duration::from_millis)
    }

    pub fn expire(&self) -> Option<Duration> {
        self.rare().expire_ms.map(Duration::from_millis)
    }

    /// The retry policy in the job file's terms.
    pub fn retry_policy(&self) -> RetryPolicy {
        let mut p = RetryPolicy {
            attempts: self.rare().retry.attempts,
            ..Default::default()
        };
        if let Some(d) = self.rare().retry.delay_ms {
            p.delay = Duration::from_millis(d);
        }
        if let Some(d) = self.rare().retry.max_delay_ms {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire format is flat and unchanged by the boxing: what is read
    /// is written back the same, with absent fields left absent.
    #[test]
    fn the_wire_format_is_flat() {
        let minimal = r#"{"id":"a","argv":["true"],"dir":"/","due":"2026-11-29T00:00:00Z","submitted":"2026-11-29T00:00:00Z"}"#;
        let full = r#"{"id":"b","argv":["echo hi"],"shell":true,"dir":"/tmp","env":{"A":"1"},"due":"2026-11-29T00:00:00Z","submitted":"2026-11-29T00:00:00Z","expire_ms":5,"timeout_ms":6,"retry":{"attempts":2,"delay_ms":7},"tags":["t"]}"#;
        for line in [minimal, full] {
            let shot: OneShot = serde_json::from_str(line).expect("parse");
            let again: serde_json::Value = serde_json::to_value(&shot).expect("json");
            let want: serde_json::Value = serde_json::from_str(line).expect("json");
            assert_eq!(again, want);
        }
        let a: OneShot = serde_json::from_str(minimal).expect("parse");
        assert!(a.rare.is_none(), "nothing rare: nothing boxed");
        let b: OneShot = serde_json::from_str(full).expect("parse");
        assert_eq!(b.rare().env["A"], "1");
        assert_eq!(b.timeout(), Some(Duration::from_millis(6)));
        assert_eq!(b.expire(), Some(Duration::from_millis(5)));
        assert_eq!(b.retry_policy().attempts, 2);
    }
}
