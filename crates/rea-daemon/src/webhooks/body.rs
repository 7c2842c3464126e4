//! What is sent: a webhook's JSON body (version 1, documented in the
//! README's "Webhooks and pings" and rea-jobs(5)), and a ping's URL and
//! body for the style of its service. Built on the loop when the event
//! happens (a few KiB at most: the output's tail is bounded), sent later by
//! a worker.

use chrono::{DateTime, Utc};
use rea_core::notify::{AlertState, PingStyle};
use rea_core::record::{format_ts, Record, RunStatus};
use rea_core::tenant::Tenant;
use serde_json::{json, Value};

/// Bytes of the output's tail in a webhook's body.
pub(crate) const WEBHOOK_TAIL: usize = 4096;
/// Bytes of the output's tail in a ping's body (Healthchecks keeps 100 KB;
/// a tail is what tells why).
pub(crate) const PING_TAIL: usize = 10 * 1024;
/// Bytes of the tail in a Cronitor `message` (its limit is 2,000 characters
/// once encoded).
const CRONITOR_TAIL: usize = 600;

/// The body's schema version.
pub(crate) const VERSION: u32 = 1;

/// The last `max` bytes of `text`, cut at a character boundary.
pub(crate) fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut from = text.len() - max;
    while !text.is_char_boundary(from) {
        from += 1;
    }
    &text[from..]
}

/// The filter's name of a run's status (`on = [...]`, `X-Rea-Event`).
pub(crate) fn event_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Started => "start",
        RunStatus::Succeeded => "success",
        // Out of memory is sent as a failure; the body's `status` says
        // `oom_killed`.
        RunStatus::Failed | RunStatus::OomKilled => "failure",
        RunStatus::TimedOut => "timeout",
        RunStatus::Killed => "killed",
        RunStatus::Skipped => "skipped",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Cancelled => "cancelled",
    }
}

/// The job's name as its owner writes it, and the owner (None: the system).
fn job_and_tenant(job: &str) -> (&str, Option<&str>) {
    match Tenant::of(job) {
        Tenant::System => (job, None),
        Tenant::User(u) => (&job[u.len() + 1..], Some(u)),
    }
}

fn ts(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, |t| Value::String(format_ts(t)))
}

/// A run's webhook body.
pub(crate) fn run_body(rec: &Record, host: &str) -> Vec<u8> {
    let full = rec.job.as_deref().unwrap_or("");
    let (job, tenant) = job_and_tenant(full);
    let status = rec.status.unwrap_or(RunStatus::Started);
    let output = rec.output.as_deref().unwrap_or("");
    let shown = tail(output, WEBHOOK_TAIL);
    let body = json!({
        "v": VERSION,
        "kind": "run",
        "event": event_name(status),
        "job": job,
        "tenant": tenant,
        "host": host,
        "run": rec.run,
        "attempt": rec.attempt.unwrap_or(1),
        "trigger": rec.trigger.map(|t| t.as_str()),
        "status": status.as_str(),
        "exit_code": rec.exit_code,
        "signal": rec.signal,
        "reason": rec.reason,
        "scheduled": ts(rec.scheduled),
        "started": ts(rec.started),
        "ended": ts(rec.ended),
        "duration_ms": rec.duration_ms,
        "retry_at": ts(rec.retry_at()),
        "output": {
            "tail": shown,
            "bytes": rec.output_bytes.unwrap_or(output.len() as u64),
            "truncated": shown.len() < output.len()
                || rec.output_bytes.is_some_and(|b| b > shown.len() as u64),
        },
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// An alert's webhook body.
pub(crate) fn alert_body(
    full: &str,
    kind: &str,
    state: AlertState,
    reason: &str,
    at: DateTime<Utc>,
    host: &str,
) -> Vec<u8> {
    let (job, tenant) = job_and_tenant(full);
    let body = json!({
        "v": VERSION,
        "kind": "alert",
        "event": format!("alert:{kind}"),
        "job": job,
        "tenant": tenant,
        "host": host,
        "alert": {
            "kind": kind,
            "state": state.as_str(),
            "reason": reason,
            "at": format_ts(at),
        },
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// What a run's record tells a ping service: the URL to call (with the
/// method) and the body; None when the service is told nothing (a skipped
/// occurrence, a cancelled one-shot).
pub(crate) fn ping(style: PingStyle, url: &str, rec: &Record) -> Option<(bool, String, Vec<u8>)> {
    let status = rec.status?;
    let output = rec.output.as_deref().unwrap_or("");
    match style {
        PingStyle::Healthchecks => {
            let retried = rec.retry_at().is_some();
            let suffix = match status {
                RunStatus::Started => Some("start".to_string()),
                RunStatus::Succeeded => None,
                // Healthchecks' "log" records without changing the check's
                // state: a failure that will be retried is not yet down.
                _ if retried && status.is_final() => Some("log".to_string()),
                RunStatus::Failed => Some(match rec.exit_code {
                    Some(c) if (1..=255).contains(&c) => c.to_string(),
                    _ => "fail".to_string(),
                }),
                RunStatus::TimedOut
                | RunStatus::Killed
                | RunStatus::Interrupted
                | RunStatus::OomKilled => Some("fail".to_string()),
                RunStatus::Skipped | RunStatus::Cancelled => return None,
            };
            let body = match status {
                RunStatus::Started => Vec::new(),
                _ => {
                    let mut b = String::new();
                    if status != RunStatus::Succeeded {
                        b.push_str(&format!(
                            "rea: {} {}{}\n",
                            rec.job.as_deref().unwrap_or(""),
                            status.as_str(),
                            how(rec)
                        ));
                        if let Some(at) = rec.retry_at() {
                            b.push_str(&format!("rea: retried at {}\n", format_ts(at)));
                        }
                    }
                    b.push_str(tail(output, PING_TAIL));
                    b.into_bytes()
                }
            };
            let url = match suffix {
                Some(s) => with_path(url, &s),
                None => url.to_string(),
            };
            Some((true, url, body))
        }
        PingStyle::Cronitor => {
            let query = match status {
                RunStatus::Started => "state=run".to_string(),
                RunStatus::Succeeded => "state=complete&status_code=0".to_string(),
                RunStatus::Skipped | RunStatus::Cancelled => return None,
                _ => {
                    let code = rec.exit_code.unwrap_or(1);
                    let message = format!(
                        "{}{} {}",
                        status.as_str(),
                        how(rec),
                        tail(output, CRONITOR_TAIL)
                    );
                    format!(
                        "state=fail&status_code={code}&message={}",
                        percent_encode(message.trim_end())
                    )
                }
            };
            let sep = if url.contains('?') { '&' } else { '?' };
            Some((false, format!("{url}{sep}{query}"), Vec::new()))
        }
    }
}

/// ` (exit 3)`, ` (signal 9)`, or nothing.
fn how(rec: &Record) -> String {
    match (rec.exit_code, rec.signal) {
        (Some(c), _) => format!(" (exit {c})"),
        (None, Some(s)) => format!(" (signal {s})"),
        _ => String::new(),
    }
}

/// `https://hc-ping.com/UUID?x=1` + `start` → `https://hc-ping.com/UUID/start?x=1`.
pub(crate) fn with_path(url: &str, suffix: &str) -> String {
    let (base, query) = match url.find('?') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    format!("{}/{suffix}{query}", base.trim_end_matches('/'))
}

/// RFC 3986's unreserved characters kept, every other byte `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rea_core::record::Event;

    fn record(status: RunStatus, code: Option<i32>, output: &str) -> Record {
        let mut r = Record::new(Event::Run, Utc::now());
        r.job = Some("alice/backup".into());
        r.run = Some("r1".into());
        r.status = Some(status);
        r.exit_code = code;
        r.output = Some(output.into());
        r
    }

    #[test]
    fn healthchecks_urls() {
        let u = "https://hc-ping.com/abc";
        let p = |s, c| ping(PingStyle::Healthchecks, u, &record(s, c, "out\n")).unwrap();
        assert_eq!(
            p(RunStatus::Started, None).1,
            "https://hc-ping.com/abc/start"
        );
        assert!(p(RunStatus::Started, None).2.is_empty());
        assert_eq!(p(RunStatus::Succeeded, Some(0)).1, u);
        assert_eq!(p(RunStatus::Succeeded, Some(0)).2, b"out\n");
        assert_eq!(p(RunStatus::Failed, Some(3)).1, "https://hc-ping.com/abc/3");
        assert_eq!(
            p(RunStatus::Failed, Some(300)).1,
            "https://hc-ping.com/abc/fail"
        );
        assert_eq!(
            p(RunStatus::TimedOut, None).1,
            "https://hc-ping.com/abc/fail"
        );
        let body = String::from_utf8(p(RunStatus::Failed, Some(3)).2).unwrap();
        assert_eq!(body, "rea: alice/backup failed (exit 3)\nout\n");
        assert!(ping(
            PingStyle::Healthchecks,
            u,
            &record(RunStatus::Skipped, None, "")
        )
        .is_none());
        let mut retried = record(RunStatus::Failed, Some(1), "");
        retried.set_retry_at(Utc::now());
        assert_eq!(
            ping(PingStyle::Healthchecks, u, &retried).unwrap().1,
            "https://hc-ping.com/abc/log"
        );
        assert_eq!(
            with_path("https://h/u/?a=1", "start"),
            "https://h/u/start?a=1"
        );
    }

    #[test]
    fn cronitor_urls_and_tails() {
        let u = "https://cronitor.link/p/k/job";
        let (post, url, _) = ping(
            PingStyle::Cronitor,
            u,
            &record(RunStatus::Failed, Some(2), "no disk"),
        )
        .unwrap();
        assert!(!post);
        assert_eq!(
            url,
            format!("{u}?state=fail&status_code=2&message=failed%20%28exit%202%29%20no%20disk")
        );
        assert_eq!(tail("héllo", 4), "llo");
        let body: Value =
            serde_json::from_slice(&run_body(&record(RunStatus::Failed, Some(2), "x"), "h"))
                .unwrap();
        assert_eq!(body["job"], "backup");
        assert_eq!(body["tenant"], "alice");
        assert_eq!(body["event"], "failure");
        assert_eq!(body["output"]["tail"], "x");
    }
}
