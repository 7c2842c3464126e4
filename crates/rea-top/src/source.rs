//! The daemon as `rea top` asks it: one control-socket connection per
//! worker, every request sent with `source = "top"` (the audit log's), so
//! the socket's per-user authorization and the audit apply exactly as for
//! the CLI. The live views' requests (`overview`, `jobs`) are answered by
//! the daemon from its per-job summaries; a daemon from before them gets
//! the same questions answered from `status` (its whole job list, what
//! these requests exist to avoid, so only for an older daemon).

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::record::{Record, RunStatus};
use rea_proto::live::{Counts, Due, JobSort, JobSummary, JobsPage, JobsQuery, Overview, RunNow};
use rea_proto::protocol::{
    CancelReply, HistoryChunk, KillReply, PauseReply, PendingReply, StatusReply,
};
use rea_proto::{Client, Request, Response};
use serde::de::DeserializeOwned;

use crate::app::Action;

/// What `rea top` says it is, in the audit log.
pub(crate) const SOURCE: &str = "top";
/// How many records the timeline reads at most (the newest).
pub(crate) const TIMELINE_RECORDS: usize = 5000;

pub(crate) struct Source {
    client: Client,
    /// The daemon does not answer the live views: answer them from
    /// `status`.
    legacy: bool,
}

impl Source {
    pub(crate) fn connect(state_dir: &Path, timeout: Duration) -> Result<Source, String> {
        let client = Client::connect(state_dir, timeout)
            .map_err(|e| e.to_string())?
            .with_source(SOURCE);
        Ok(Source {
            client,
            legacy: false,
        })
    }

    /// The connection itself, for a stream that outlives a request.
    pub(crate) fn into_client(self) -> Client {
        self.client
    }

    fn ask<T: DeserializeOwned>(&mut self, request: &Request) -> Result<T, String> {
        let resp = self.client.request(request).map_err(|e| e.to_string())?;
        data(resp)
    }

    /// Whether an error answer means "this daemon has no live views".
    fn unsupported(resp: &Response) -> bool {
        !resp.ok && resp.code.as_deref() == Some("bad_request")
    }

    pub(crate) fn overview(&mut self) -> Result<Overview, String> {
        if !self.legacy {
            let resp = self
                .client
                .request(&Request::Overview)
                .map_err(|e| e.to_string())?;
            if !Self::unsupported(&resp) {
                return data(resp);
            }
            self.legacy = true;
        }
        let status: StatusReply = self.ask(&Request::Status { job: None })?;
        Ok(legacy_overview(&status))
    }

    pub(crate) fn jobs(&mut self, query: &JobsQuery) -> Result<JobsPage, String> {
        if !self.legacy {
            let resp = self
                .client
                .request(&Request::Jobs(query.clone()))
                .map_err(|e| e.to_string())?;
            if !Self::unsupported(&resp) {
                return data(resp);
            }
            self.legacy = true;
        }
        let status: StatusReply = self.ask(&Request::Status { job: None })?;
        Ok(legacy_page(&status, query))
    }

    pub(crate) fn pending(&mut self) -> Result<PendingReply, String> {
        self.ask(&Request::Pending {
            tag: None,
            limit: Some(200),
        })
    }

    /// The final run records written since `since`, newest first, at most
    /// [`TIMELINE_RECORDS`] (the answer is streamed by the daemon).
    pub(crate) fn history(&mut self, since: DateTime<Utc>) -> Result<Vec<Record>, String> {
        let query = rea_store::history::Query {
            since: Some(since),
            runs_only: true,
            statuses: RunStatus::FINAL.to_vec(),
            limit: Some(TIMELINE_RECORDS),
            ..rea_store::history::Query::default()
        };
        let mut resp = self
            .client
            .request(&Request::History { query })
            .map_err(|e| e.to_string())?;
        let mut records = Vec::new();
        loop {
            match data::<HistoryChunk>(resp)? {
                HistoryChunk::Records { records: r } => records.extend(r),
                HistoryChunk::End { .. } => return Ok(records),
            }
            resp = self.client.read_response().map_err(|e| e.to_string())?;
        }
    }

    /// A confirmed action (not a trigger or an edit, which the caller
    /// runs): what it did, as a line.
    pub(crate) fn act(&mut self, action: &Action) -> Result<String, String> {
        match action {
            Action::Pause(sel) | Action::Resume(sel) => {
                let pause = matches!(action, Action::Pause(_));
                let request = if pause {
                    Request::Pause(sel.clone())
                } else {
                    Request::Resume(sel.clone())
                };
                let r: PauseReply = self.ask(&request)?;
                let verb = if pause { "paused" } else { "resumed" };
                Ok(match r.changed.as_slice() {
                    [] => format!("nothing to do: already {verb}"),
                    changed => format!("{verb} {}", changed.join(", ")),
                })
            }
            Action::Cancel(id) => {
                let r: CancelReply = self.ask(&Request::Cancel {
                    ids: vec![id.clone()],
                    kill: false,
                })?;
                Ok(r.cancelled
                    .iter()
                    .map(|c| format!("{}: {}", c.id, c.result))
                    .collect::<Vec<_>>()
                    .join(", "))
            }
            Action::Kill(target) => {
                let r: KillReply = self.ask(&Request::Kill {
                    target: target.clone(),
                })?;
                Ok(match r.killed.as_slice() {
                    [] => format!("{target}: no run in progress"),
                    killed => format!(
                        "killing {}",
                        killed
                            .iter()
                            .map(|k| format!("run {} of {}", k.run, k.job))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })
            }
            Action::Trigger(_) | Action::Edit => Err("not an action of this connection".into()),
        }
    }
}

/// A successful answer's data, or its error as a line.
pub(crate) fn data<T: DeserializeOwned>(resp: Response) -> Result<T, String> {
    if !resp.ok {
        let mut e = resp
            .error
            .unwrap_or_else(|| "the daemon refused the request".into());
        if !resp.suggestions.is_empty() {
            e.push_str(&format!(" (did you mean {}?)", resp.suggestions.join(", ")));
        }
        return Err(e);
    }
    resp.data_as()
}

/// A record's end as a sentence: `succeeded in 1.2s (exit 0)`.
pub(crate) fn ended(record: &Record) -> String {
    let status = record.status.map_or("ended", RunStatus::as_str);
    let dur = record
        .duration_ms
        .map(|ms| format!(" in {}", crate::text::duration_ms(Some(ms))))
        .unwrap_or_default();
    let how = match (record.exit_code, record.signal) {
        (Some(c), _) => format!(" (exit {c})"),
        (None, Some(s)) => format!(" (signal {s})"),
        _ => String::new(),
    };
    let run = record.run.as_deref().unwrap_or("?");
    format!("run {run} {status}{dur}{how}")
}

fn letter(status: &str) -> String {
    crate::text::status_letter(status).to_string()
}

fn legacy_summary(j: &rea_proto::protocol::JobInfo) -> JobSummary {
    let failed = j.last.as_ref().is_some_and(|l| l.status != "succeeded");
    JobSummary {
        name: j.name.clone(),
        tenant: None,
        state: j.state.clone(),
        paused: j.paused,
        schedule: None,
        timezone: None,
        tags: Vec::new(),
        next_fire: j.next_fire,
        retry_at: j.retry_at,
        running: j.running.len() as u32,
        queued: j.queued as u32,
        after: j.after.clone(),
        dependencies: j.dependencies.clone(),
        outcomes: j
            .last
            .as_ref()
            .map(|l| letter(&l.status))
            .unwrap_or_default(),
        consecutive_failures: j.consecutive_failures,
        last_duration_ms: j.last.as_ref().map(|l| l.duration_ms),
        p50_ms: None,
        p95_ms: None,
        last_success: j.last.as_ref().filter(|_| !failed).map(|l| l.ended),
        last_failure: j.last.as_ref().filter(|_| failed).map(|l| l.ended),
        last_run: j.last.as_ref().map(|l| l.ended),
    }
}

/// An overview made from a whole `status` answer (older daemons).
fn legacy_overview(s: &StatusReply) -> Overview {
    let summaries: Vec<JobSummary> = s.jobs.iter().map(legacy_summary).collect();
    let failing_now = |j: &&JobSummary| j.last_failure.is_some();
    let mut running: Vec<RunNow> = s
        .jobs
        .iter()
        .flat_map(|j| {
            j.running.iter().map(|r| RunNow {
                run: r.run.clone(),
                job: j.name.clone(),
                since: r.since,
                pid: r.pid,
                cpu_ms: r.cpu_ms,
                memory_peak_kb: r.memory_peak_kb,
                node: None,
            })
        })
        .collect();
    running.sort_by_key(|r| r.since);
    let mut failing: Vec<JobSummary> = summaries.iter().filter(failing_now).cloned().collect();
    failing.sort_by_key(|j| std::cmp::Reverse(j.consecutive_failures));
    let counts = Counts {
        jobs: s.jobs.len(),
        running: running.len(),
        queued: s.daemon.queued,
        paused: s.jobs.iter().filter(|j| j.paused).count(),
        disabled: s.jobs.iter().filter(|j| !j.enabled).count(),
        failing: failing.len(),
        oneshots_pending: s.daemon.oneshots_pending,
    };
    failing.truncate(20);
    running.truncate(50);
    let mut next_due: Vec<Due> = s
        .jobs
        .iter()
        .filter(|j| !j.paused)
        .filter_map(|j| {
            j.next_fire.map(|at| Due {
                job: j.name.clone(),
                at,
            })
        })
        .collect();
    next_due.sort_by_key(|d| d.at);
    next_due.truncate(10);
    Overview {
        daemon: s.daemon.clone(),
        counts,
        running,
        failing,
        next_due,
        tenant: s.tenant.clone(),
    }
}

/// A page made from a whole `status` answer (older daemons): the filters
/// it can answer (text, state, failing), its sorts, an offset as cursor.
fn legacy_page(s: &StatusReply, q: &JobsQuery) -> JobsPage {
    let text = q.text.as_ref().map(|t| t.to_lowercase());
    let mut jobs: Vec<JobSummary> = s
        .jobs
        .iter()
        .map(legacy_summary)
        .filter(|j| {
            text.as_ref()
                .is_none_or(|t| j.name.to_lowercase().contains(t))
        })
        .filter(|j| q.state.as_ref().is_none_or(|st| *st == j.state))
        .filter(|j| !q.failing || j.last_failure.is_some())
        .filter(|_| q.tag.is_none())
        .collect();
    match q.sort {
        JobSort::File => {}
        JobSort::Name => jobs.sort_by(|a, b| a.name.cmp(&b.name)),
        JobSort::NextFire => jobs.sort_by_key(|j| (j.next_fire.is_none(), j.next_fire)),
        JobSort::Failures => jobs.sort_by_key(|j| std::cmp::Reverse(j.consecutive_failures)),
        JobSort::Duration => jobs.sort_by_key(|j| std::cmp::Reverse(j.last_duration_ms)),
        JobSort::LastRun => jobs.sort_by(|a, b| {
            let last = |j: &JobSummary| j.last_success.max(j.last_failure);
            last(b).cmp(&last(a))
        }),
    }
    if q.descending {
        jobs.reverse();
    }
    let matching = jobs.len();
    let from: usize = q
        .cursor
        .as_deref()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let limit = q
        .limit
        .unwrap_or(rea_proto::live::DEFAULT_PAGE)
        .min(rea_proto::live::MAX_PAGE);
    let page: Vec<JobSummary> = jobs.into_iter().skip(from).take(limit).collect();
    let next = (from + page.len() < matching).then(|| (from + page.len()).to_string());
    JobsPage {
        jobs: page,
        matching,
        next,
    }
}
