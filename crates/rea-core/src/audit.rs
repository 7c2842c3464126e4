//! The audit log's entry: who asked the daemon to change what, from where,
//! and what it answered. One [`Entry`] per state-changing control request
//! (trigger, pause, resume, cancel, submit, edit, reload, kill), refused
//! ones included: an attempt on someone else's job is the interesting line.
//! Its serde form *is* the documented `audit.jsonl` line and the
//! `rea audit --json` schema.
//!
//! What lives here is data and pure decisions: the bounds that keep an
//! entry small whatever a client sent ([`Entry::bounded`]), which entries a
//! query selects ([`Query::matches`]) and how a user sees her own
//! ([`Entry::seen_by`]). Writing, rotating and reading the file is
//! `rea_store::audit`'s; deciding when to write one is the daemon's.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::tenant::Tenant;

/// The most targets an entry keeps; the rest are counted in one last
/// target (`…and N more`), so a request naming thousands of jobs costs the
/// log one short line.
pub const MAX_TARGETS: usize = 32;
/// The longest target kept, in bytes (longer ones are cut).
pub const MAX_TARGET_BYTES: usize = 256;
/// The longest refusal message kept, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 512;
/// The longest source kept, in bytes.
pub const MAX_SOURCE_BYTES: usize = 32;

/// The source of a request that does not name one (any socket client).
pub const SOURCE_SOCKET: &str = "socket";

/// What a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Trigger,
    Pause,
    Resume,
    Cancel,
    Submit,
    Edit,
    Reload,
    Kill,
}

impl Action {
    pub const ALL: [Action; 8] = [
        Action::Trigger,
        Action::Pause,
        Action::Resume,
        Action::Cancel,
        Action::Submit,
        Action::Edit,
        Action::Reload,
        Action::Kill,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Trigger => "trigger",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel => "cancel",
            Action::Submit => "submit",
            Action::Edit => "edit",
            Action::Reload => "reload",
            Action::Kill => "kill",
        }
    }
}

/// Whether the daemon did it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// Answered with an error: `code` and `message` say which.
    Refused,
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// When the daemon answered.
    #[serde(with = "crate::record::ms_time")]
    pub ts: DateTime<Utc>,
    /// Who asked (SO_PEERCRED).
    pub uid: u32,
    /// The uid's name, when the user database has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The tenant the request acted in (None: the system's): a user's own
    /// always; root's the targets' owner when they all have one, else the
    /// system's.
    #[serde(default)]
    pub tenant: Option<String>,
    /// What sent it, as the client says (`cli`; a client that says
    /// nothing is `socket`). Self-declared: the uid is the fact.
    pub source: String,
    pub action: Action,
    /// What it named: jobs (qualified for users' jobs), run or one-shot
    /// ids, `tag:NAME`, `*` (every job), the user whose file was edited.
    #[serde(default)]
    pub target: Vec<String>,
    pub result: Outcome,
    /// The refusal's code (`refused`, `unknown_job`, `bad_request`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The refusal's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The cluster node that answered (cluster mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// A trigger's parameters, as it passed them (accepted or refused),
    /// cut to [`crate::params::MAX_PARAMS`] values of at most
    /// [`MAX_PARAM_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<crate::params::Values>,
}

/// Bytes of a parameter's value an entry keeps.
pub const MAX_PARAM_BYTES: usize = 256;

impl Entry {
    /// The tenant the entry belongs to.
    pub fn tenant(&self) -> Tenant<'_> {
        Tenant::from_owner(self.tenant.as_deref())
    }

    /// The entry cut to the bounds above: at most [`MAX_TARGETS`] targets
    /// of [`MAX_TARGET_BYTES`], a message of [`MAX_MESSAGE_BYTES`], a source
    /// of [`MAX_SOURCE_BYTES`] (anything but letters, digits, `-`, `_`, `.`
    /// makes it `socket`).
    pub fn bounded(mut self) -> Entry {
        let more = self.target.len().saturating_sub(MAX_TARGETS);
        if more > 0 {
            self.target.truncate(MAX_TARGETS - 1);
            self.target.push(format!("…and {} more", more + 1));
        }
        for t in &mut self.target {
            cut(t, MAX_TARGET_BYTES);
        }
        if let Some(m) = &mut self.message {
            cut(m, MAX_MESSAGE_BYTES);
        }
        if let Some(p) = &mut self.params {
            *p = std::mem::take(p)
                .into_iter()
                .take(crate::params::MAX_PARAMS)
                .map(|(mut k, mut v)| {
                    cut(&mut k, MAX_PARAM_BYTES);
                    cut(&mut v, MAX_PARAM_BYTES);
                    (k, v)
                })
                .collect();
        }
        self.source = source_name(Some(&self.source));
        self
    }

    /// The entry as `tenant` may see it: its own entries, with its own
    /// names unqualified (a user's `alice/backup` is her `backup`); None
    /// for another tenant's.
    pub fn seen_by(&self, tenant: Tenant<'_>) -> Option<Entry> {
        if self.tenant() != tenant {
            return None;
        }
        let mut e = self.clone();
        for t in &mut e.target {
            if let Some(local) = tenant.local(t) {
                *t = local.to_string();
            }
        }
        // Messages quote the names they hold.
        if let (Some(m), Some(user)) = (&mut e.message, tenant.user()) {
            *m = m.replace(&format!("\"{user}{}", crate::tenant::SEPARATOR), "\"");
        }
        Some(e)
    }
}

/// The tenant root's (or the daemon's user's) request acted in: that of
/// the jobs it names when they are all one user's (for an edit, the user
/// whose file it is), else the system's (None).
pub fn admin_tenant(action: Action, target: &[String]) -> Option<String> {
    let owners: Vec<Tenant<'_>> = match action {
        Action::Edit => target.iter().map(|u| Tenant::User(u)).collect(),
        _ => target.iter().map(|t| Tenant::of(t)).collect(),
    };
    let first = owners.first().copied()?;
    if owners.iter().all(|o| *o == first) {
        first.user().map(str::to_string)
    } else {
        None
    }
}

/// A client's self-declared source as the log keeps it: short and plain,
/// else `socket`.
pub fn source_name(declared: Option<&str>) -> String {
    match declared {
        Some(s)
            if !s.is_empty()
                && s.len() <= MAX_SOURCE_BYTES
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) =>
        {
            s.to_string()
        }
        _ => SOURCE_SOCKET.to_string(),
    }
}

/// Cuts `s` to at most `max` bytes, on a character boundary, marking the
/// cut with `…`.
fn cut(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
}

/// Which entries `rea audit` asks for, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Query {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// Who asked: a user name or a uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `system` or a user's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Entries naming this job (as the asker names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Only refused requests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

impl Query {
    /// Whether `e` is selected (the limit aside).
    pub fn matches(&self, e: &Entry) -> bool {
        self.since.is_none_or(|s| e.ts >= s)
            && self.until.is_none_or(|u| e.ts < u)
            && self.user.as_deref().is_none_or(|u| {
                e.user.as_deref() == Some(u) || u.parse::<u32>().is_ok_and(|uid| uid == e.uid)
            })
            && self.tenant.as_deref().is_none_or(|t| match e.tenant() {
                Tenant::System => t == "system",
                Tenant::User(u) => u == t,
            })
            && (self.actions.is_empty() || self.actions.contains(&e.action))
            && self
                .job
                .as_deref()
                .is_none_or(|j| e.target.iter().any(|t| t == j))
            && (!self.refused || e.result == Outcome::Refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            ts: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            uid: 1001,
            user: Some("alice".into()),
            tenant: Some("alice".into()),
            source: "cli".into(),
            action: Action::Pause,
            target: vec!["alice/backup".into()],
            result: Outcome::Ok,
            code: None,
            message: None,
            node: None,
            params: None,
        }
    }

    #[test]
    fn the_line_is_the_documented_schema() {
        let text = serde_json::to_string(&entry()).unwrap();
        assert_eq!(
            text,
            r#"{"ts":"2027-01-15T08:00:00.000Z","uid":1001,"user":"alice","tenant":"alice","source":"cli","action":"pause","target":["alice/backup"],"result":"ok"}"#
        );
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), entry());
    }

    #[test]
    fn an_entry_stays_small_whatever_the_client_sent() {
        let mut e = entry();
        e.target = (0..10_000)
            .map(|i| format!("{i}{}", "x".repeat(1000)))
            .collect();
        e.message = Some("é".repeat(10_000));
        e.source = "<script>".into();
        let e = e.bounded();
        assert_eq!(e.target.len(), MAX_TARGETS);
        assert_eq!(e.target.last().unwrap(), "…and 9969 more");
        assert!(e.target.iter().all(|t| t.len() <= MAX_TARGET_BYTES));
        assert!(e.message.unwrap().len() <= MAX_MESSAGE_BYTES);
        assert_eq!(e.source, "socket");
        assert_eq!(source_name(Some("top")), "top");
        assert_eq!(source_name(None), "socket");
    }

    #[test]
    fn a_user_sees_her_own_entries_with_her_names_unqualified() {
        let mut refused = entry();
        refused.message = Some("no job named \"alice/backup\"".into());
        let seen = refused.seen_by(Tenant::User("alice")).unwrap();
        assert_eq!(seen.target, ["backup"]);
        assert_eq!(seen.message.as_deref(), Some("no job named \"backup\""));
        assert!(entry().seen_by(Tenant::User("bob")).is_none());
        assert!(entry().seen_by(Tenant::System).is_none());
    }

    #[test]
    fn roots_request_is_in_the_tenant_of_the_jobs_it_names() {
        let t = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            admin_tenant(Action::Pause, &names)
        };
        assert_eq!(t(&["alice/a", "alice/b"]).as_deref(), Some("alice"));
        assert_eq!(t(&["alice/a", "bob/b"]), None);
        assert_eq!(t(&["alice/a", "backup"]), None);
        assert_eq!(t(&[]), None);
        let edit = admin_tenant(Action::Edit, &["bob".to_string()]);
        assert_eq!(edit.as_deref(), Some("bob"));
    }

    #[test]
    fn queries_filter_by_each_field() {
        let e = entry();
        let q = |f: &dyn Fn(&mut Query)| {
            let mut q = Query::default();
            f(&mut q);
            q.matches(&e)
        };
        assert!(q(&|_| {}));
        assert!(q(&|q| q.user = Some("alice".into())));
        assert!(q(&|q| q.user = Some("1001".into())));
        assert!(!q(&|q| q.user = Some("bob".into())));
        assert!(q(&|q| q.tenant = Some("alice".into())));
        assert!(!q(&|q| q.tenant = Some("system".into())));
        assert!(q(&|q| q.actions = vec![Action::Trigger, Action::Pause]));
        assert!(!q(&|q| q.actions = vec![Action::Trigger]));
        assert!(q(&|q| q.job = Some("alice/backup".into())));
        assert!(!q(&|q| q.job = Some("backup".into())));
        assert!(!q(&|q| q.refused = true));
        assert!(q(&|q| q.since = Some(e.ts)));
        assert!(!q(&|q| q.until = Some(e.ts)));
    }
}
