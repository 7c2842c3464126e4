//! `rea audit`: who asked the daemon for which change, and its answer,
//! newest first. Root (and the owner of the state directory) reads the
//! audit log itself: the state directory's `audit.jsonl`, or the cluster
//! database in cluster mode; anyone else asks the daemon, which answers
//! with her own tenant's entries only.

use chrono::Utc;
use rea_core::audit::{Action, Entry, Outcome, Query};
use rea_store::audit::AuditReader;

use crate::cli::{AuditAction, AuditArgs, Global};
use crate::failure::{self, CommandResult, Failure};
use crate::table::Table;

pub(crate) fn run(global: &Global, args: &AuditArgs) -> CommandResult {
    let dir = super::state_dir(global)?;
    let now = Utc::now();
    let tz = crate::time_text::zone(args.utc);
    let bound = |flag: &str, text: &Option<String>| {
        text.as_deref()
            .map(|t| crate::time_text::parse_bound(flag, t, now, tz))
            .transpose()
            .map_err(Failure::invalid)
    };
    let query = Query {
        since: bound("--since", &args.since)?,
        until: bound("--until", &args.until)?,
        user: args.user.clone(),
        tenant: args.tenant.clone(),
        actions: args.action.iter().map(|a| action(*a)).collect(),
        job: args.job.clone(),
        refused: args.refused,
        limit: Some(args.limit),
    };
    let reader = reader(global, &dir)?;
    let entries = reader
        .query(&query)
        .map_err(|e| Failure::runtime(format!("cannot read the audit log: {e}")))?;
    if args.json {
        for e in &entries {
            println!("{}", serde_json::to_string(e).unwrap_or_default());
        }
        return failure::ok();
    }
    if entries.is_empty() {
        eprintln!("rea: no matching entries in the audit log");
        return failure::ok();
    }
    let mut table = Table::new([
        "TIME", "USER", "TENANT", "SOURCE", "ACTION", "TARGET", "RESULT",
    ]);
    for e in &entries {
        table.row([
            crate::time_text::show(e.ts, tz),
            user(e),
            e.tenant().to_string(),
            e.source.clone(),
            e.action.as_str().to_string(),
            target(e),
            result(e),
        ]);
    }
    print!("{}", table.render());
    failure::ok()
}

/// The audit log to read: the state directory's files or the cluster's
/// database when this user may read them (root, or the directory's
/// owner), else the daemon's answer for her own tenant.
fn reader(global: &Global, dir: &std::path::Path) -> Result<Box<dyn AuditReader>, Failure> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let readable = me == 0 || std::fs::metadata(dir).map_or(true, |m| m.uid() == me);
    if !readable {
        let client = rea_proto::Client::connect(dir, global.client_timeout)
            .map_err(super::client_failure)?;
        return Ok(Box::new(rea_proto::RemoteAudit::new(client)));
    }
    if let Some(s) = super::cluster::settings(global)? {
        return super::cluster::audit_reader(&s);
    }
    Ok(Box::new(rea_store::audit::JsonlAuditReader::new(dir)))
}

fn action(a: AuditAction) -> Action {
    match a {
        AuditAction::Trigger => Action::Trigger,
        AuditAction::Pause => Action::Pause,
        AuditAction::Resume => Action::Resume,
        AuditAction::Cancel => Action::Cancel,
        AuditAction::Submit => Action::Submit,
        AuditAction::Edit => Action::Edit,
        AuditAction::Reload => Action::Reload,
        AuditAction::Kill => Action::Kill,
    }
}

/// `alice`, or `uid 1234` when the user database had no name.
/// What it named, and a trigger's parameters: `report DATE=2026-11-30`.
fn target(e: &Entry) -> String {
    let mut parts = e.target.clone();
    if let Some(p) = &e.params {
        parts.extend(p.iter().map(|(k, v)| format!("{k}={v:?}")));
    }
    parts.join(" ")
}

fn user(e: &Entry) -> String {
    e.user.clone().unwrap_or_else(|| format!("uid {}", e.uid))
}

/// `ok`, or `refused: the first line of the daemon's message`.
fn result(e: &Entry) -> String {
    match e.result {
        Outcome::Ok => "ok".to_string(),
        Outcome::Refused => {
            let why = e
                .message
                .as_deref()
                .and_then(|m| m.lines().next())
                .unwrap_or("");
            format!("refused: {why}")
                .trim_end_matches([' ', ':'])
                .to_string()
        }
    }
}
