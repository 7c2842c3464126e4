//! The live views' answers: `overview` and `jobs` (a page of job
//! summaries, filtered and sorted here). Both read the engine's per-job
//! views (`Engine::job_views_indexed`: borrowed, nothing copied, no
//! lookup per job) and keep only what the answer holds: a page is picked
//! with a heap bounded by its size, so no answer builds the job set in
//! memory, whatever the number of jobs; an unfiltered page of root's in
//! file order reads only its own jobs (`Engine::job_views_from`). A user's answers hold her jobs only (`Scope::owns`), and are
//! localized on their way back like every other answer.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};
use rea_core::engine::JobView;
use rea_core::tenant::Tenant;

use super::users::Scope;
use super::Loop;
use crate::control::protocol::Ts;
use crate::control::Response;
use rea_proto::live::{
    Counts, Due, JobSort, JobSummary, JobsPage, JobsQuery, Overview, RunNow, DEFAULT_PAGE, MAX_PAGE,
};

/// The overview's bounds (see [`Overview`]).
const OVERVIEW_RUNNING: usize = 50;
const OVERVIEW_FAILING: usize = 20;
const OVERVIEW_DUE: usize = 10;

/// The states a `jobs` query may ask for.
const STATES: [&str; 6] = [
    "running",
    "queued",
    "retry_pending",
    "disabled",
    "paused",
    "idle",
];

impl Loop {
    /// `overview`: counts over the jobs `scope` sees, the runs in progress,
    /// the failing jobs and the next fires, each bounded.
    pub(super) fn overview(&self, now: DateTime<Utc>, scope: &Scope) -> Overview {
        let mut counts = Counts::default();
        let mut failing = Bounded::new(OVERVIEW_FAILING);
        let mut due = Bounded::new(OVERVIEW_DUE);
        // One walk in name order; a job's file position breaks ties, so
        // the answer is the one a walk in file order gives.
        for (i, v) in self
            .engine
            .job_views_indexed()
            .filter(|(_, v)| scope.owns(v.name))
        {
            counts.jobs += 1;
            counts.running += usize::from(v.running > 0);
            counts.queued += usize::from(v.queued > 0);
            counts.paused += usize::from(v.paused);
            counts.disabled += usize::from(!v.job.enabled);
            if v.consecutive_failures > 0 {
                counts.failing += 1;
                failing.offer((Reverse(v.consecutive_failures), i, v.name));
            }
            if let Some(at) = v.next_fire {
                due.offer((at, i, v.name));
            }
        }
        if *scope == Scope::Admin {
            counts.oneshots_pending = self.engine.oneshot_count();
        }
        let mut running = Bounded::new(OVERVIEW_RUNNING);
        for r in self.engine.run_views() {
            if !scope.owns(r.source.name())
                || (r.source.oneshot().is_some() && *scope != Scope::Admin)
            {
                continue;
            }
            // Longest running first; not yet started last.
            running.offer((r.since.is_none(), r.since, r.run, r.source.name(), r.pid));
        }
        let mut overview = Overview {
            daemon: self.daemon_info(now, scope),
            counts,
            running: running
                .sorted()
                .into_iter()
                .map(|(_, since, run, job, pid)| {
                    let used = self.runs.usage_now(run);
                    RunNow {
                        run: run.to_string(),
                        job: job.to_string(),
                        since: since.map(Ts),
                        pid,
                        cpu_ms: used.as_ref().map(|u| u.user_ms + u.sys_ms),
                        memory_peak_kb: used.and_then(|u| u.memory_peak_kb),
                        node: self.node_name(),
                    }
                })
                .collect(),
            failing: failing
                .sorted()
                .into_iter()
                .filter_map(|(_, _, name)| self.engine.job_view(name))
                .map(|v| summary_of(&v))
                .collect(),
            next_due: due
                .sorted()
                .into_iter()
                .map(|(at, _, name)| Due {
                    job: name.to_string(),
                    at: Ts(at),
                })
                .collect(),
            tenant: scope.tenant().and_then(|t| t.user()).map(str::to_string),
        };
        // Cluster mode: other nodes' runs too (`peers.rs`).
        self.add_peer_runs(&mut overview, scope, OVERVIEW_RUNNING);
        overview
    }

    /// `jobs`: one page of the jobs `scope` sees that match `query`.
    pub(super) fn jobs_page(&self, query: &JobsQuery, scope: &Scope) -> Result<JobsPage, Response> {
        let bad = |m: String| Response::err("bad_request", m);
        if let Some(state) = &query.state {
            if !STATES.contains(&state.as_str()) {
                return Err(bad(format!(
                    "unknown state {state:?}: one of {}",
                    STATES.join(", ")
                )));
            }
        }
        let limit = match query.limit {
            Some(0) => return Err(bad("limit must be at least 1".into())),
            Some(n) => n.min(MAX_PAGE),
            None => DEFAULT_PAGE,
        };
        let after = query
            .cursor
            .as_deref()
            .map(|c| Cursor::parse(c, query.sort))
            .transpose()
            .map_err(bad)?;
        let text = query.text.as_deref().map(str::to_lowercase);
        let me = scope.tenant();
        // A tenant filter: `system`, or a user's name (a user's own, or
        // nothing).
        let tenant = query.tenant.as_deref().map(|t| match t {
            "system" => Tenant::System,
            user => Tenant::User(user),
        });
        let wanted = |v: &JobView<'_>| -> bool {
            if !scope.owns(v.name) {
                return false;
            }
            if let Some(t) = tenant {
                if !t.owns(v.name) {
                    return false;
                }
            }
            if let Some(needle) = &text {
                // A user searches her names as she writes them.
                let shown = me.and_then(|t| t.local(v.name)).unwrap_or(v.name);
                if !contains_folded(shown, needle) {
                    return false;
                }
            }
            if let Some(tag) = &query.tag {
                if !v.job.tags.iter().any(|t| t == tag) {
                    return false;
                }
            }
            if let Some(state) = &query.state {
                if v.state() != state {
                    return false;
                }
            }
            !query.failing || v.consecutive_failures > 0
        };
        let plain = *scope == Scope::Admin
            && query.sort == JobSort::File
            && !query.descending
            && query.text.is_none()
            && query.tag.is_none()
            && query.tenant.is_none()
            && query.state.is_none()
            && !query.failing;
        if plain {
            return Ok(self.file_page(after.as_ref(), limit));
        }
        let mut matching = 0usize;
        let mut beyond = 0usize;
        // One more than the page: whether a next page exists.
        let mut page: Bounded<Ordered<'_>> = Bounded::new(limit);
        // The page's order is its keys' (a job's file position for the
        // file order), so the walk may go in name order, without a lookup
        // per job.
        for (i, v) in self.engine.job_views_indexed() {
            if !wanted(&v) {
                continue;
            }
            matching += 1;
            let key = Ordered {
                key: sort_key(query.sort, i, &v),
                name: v.name,
                descending: query.descending,
            };
            if let Some(c) = &after {
                if key.cmp_cursor(c) != Ordering::Greater {
                    continue;
                }
            }
            beyond += 1;
            page.offer(key);
        }
        let picked = page.sorted();
        let next = (beyond > picked.len())
            .then(|| picked.last())
            .flatten()
            .map(|k| Cursor::of(query.sort, k));
        Ok(JobsPage {
            jobs: picked
                .iter()
                .filter_map(|k| self.engine.job_view(k.name))
                .map(|v| summary_of(&v))
                .collect(),
            matching,
            next,
        })
    }
}

impl Loop {
    /// An unfiltered page of root's in file order: the jobs it shows read
    /// from the file order, one more to know whether a next page exists,
    /// and the count of the file's jobs; O(page), not O(jobs). The same
    /// answer as the general walk, a cursor included (a job's key in file
    /// order is its position).
    fn file_page(&self, after: Option<&Cursor>, limit: usize) -> JobsPage {
        let from = after.map_or(0, |c| usize::try_from(c.key).unwrap_or(0));
        let mut picked: Vec<(usize, JobView<'_>)> = Vec::with_capacity(limit.min(1024) + 1);
        for (i, v) in self.engine.job_views_from(from) {
            let key = Ordered {
                key: i as i64,
                name: v.name,
                descending: false,
            };
            if after.is_some_and(|c| key.cmp_cursor(c) != Ordering::Greater) {
                continue;
            }
            picked.push((i, v));
            if picked.len() > limit {
                break;
            }
        }
        let more = picked.len() > limit;
        picked.truncate(limit);
        let next = more.then(|| picked.last()).flatten().map(|(i, v)| {
            Cursor::of(
                JobSort::File,
                &Ordered {
                    key: *i as i64,
                    name: v.name,
                    descending: false,
                },
            )
        });
        JobsPage {
            jobs: picked.iter().map(|(_, v)| summary_of(v)).collect(),
            matching: self.engine.job_count(),
            next,
        }
    }
}

/// A job's summary on the wire.
pub(super) fn summary_of(v: &JobView<'_>) -> JobSummary {
    let s = v.summary;
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    JobSummary {
        name: v.name.to_string(),
        tenant: Tenant::of(v.name).user().map(str::to_string),
        state: v.state().to_string(),
        paused: v.paused,
        schedule: v.job.schedule.as_ref().map(|_| v.job.schedule_text()),
        timezone: (&*v.job.timezone_name != "UTC").then(|| v.job.timezone_name.to_string()),
        tags: v.job.tags.clone(),
        next_fire: v.next_fire.map(Ts),
        retry_at: v.retry_at.map(Ts),
        running: u32::try_from(v.running).unwrap_or(u32::MAX),
        queued: u32::try_from(v.queued).unwrap_or(u32::MAX),
        after: v.job.after.iter().map(|d| d.job.clone()).collect(),
        dependencies: v.job.after.clone(),
        outcomes: s.outcome_letters(),
        consecutive_failures: v.consecutive_failures,
        last_duration_ms: s.last_duration().map(ms),
        p50_ms: s.p50().map(ms),
        p95_ms: s.p95().map(ms),
        last_success: s.last_success().map(Ts),
        last_failure: s.last_failure().map(Ts),
        last_run: s.last_run().map(Ts),
    }
}

/// Whether `hay` contains `needle` (already lower case), ignoring case.
fn contains_folded(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    if hay.is_ascii() && needle.is_ascii() {
        let (h, n) = (hay.as_bytes(), needle.as_bytes());
        return h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n));
    }
    hay.to_lowercase().contains(needle)
}

/// A job's place in a sort: its key, then its name (names are unique, so
/// the order is total and a cursor is exact).
fn sort_key(sort: JobSort, index: usize, v: &JobView<'_>) -> i64 {
    let s = v.summary;
    match sort {
        JobSort::File => index as i64,
        JobSort::Name => 0,
        JobSort::NextFire => v.next_fire.map_or(i64::MAX, |t| t.timestamp_millis()),
        JobSort::Failures => -i64::from(v.consecutive_failures),
        JobSort::Duration => s.p95().map_or(1, |d| -(d.as_millis() as i64)),
        JobSort::LastRun => s.last_run().map_or(i64::MAX, |t| -t.timestamp()),
    }
}

/// A job in a page's order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ordered<'a> {
    key: i64,
    name: &'a str,
    descending: bool,
}

impl Ordered<'_> {
    fn cmp_cursor(&self, c: &Cursor) -> Ordering {
        let o = (self.key, self.name).cmp(&(c.key, c.name.as_str()));
        if self.descending {
            o.reverse()
        } else {
            o
        }
    }
}

impl Ord for Ordered<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let o = (self.key, self.name).cmp(&(other.key, other.name));
        if self.descending {
            o.reverse()
        } else {
            o
        }
    }
}

impl PartialOrd for Ordered<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Where a page ended: `SORT:KEY:NAME`. Opaque to clients; checked
/// against the query's sort.
#[derive(Debug)]
struct Cursor {
    key: i64,
    name: String,
}

impl Cursor {
    fn of(sort: JobSort, k: &Ordered<'_>) -> String {
        format!("{}:{}:{}", sort.as_str(), k.key, k.name)
    }

    fn parse(text: &str, sort: JobSort) -> Result<Cursor, String> {
        let invalid = || format!("invalid cursor {text:?}: give back a page's `next` as it came");
        let mut parts = text.splitn(3, ':');
        let (Some(s), Some(key), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(invalid());
        };
        if s != sort.as_str() {
            return Err(format!(
                "the cursor belongs to a page sorted by {s}, not by {}: ask with the same sort",
                sort.as_str()
            ));
        }
        Ok(Cursor {
            key: key.parse().map_err(|_| invalid())?,
            name: name.to_string(),
        })
    }
}

/// The `n` smallest items offered, held in a max-heap of at most `n`.
struct Bounded<T: Ord> {
    heap: BinaryHeap<T>,
    n: usize,
}

impl<T: Ord> Bounded<T> {
    fn new(n: usize) -> Bounded<T> {
        Bounded {
            heap: BinaryHeap::with_capacity(n.min(1024) + 1),
            n,
        }
    }

    fn offer(&mut self, item: T) {
        if self.heap.len() < self.n {
            self.heap.push(item);
        } else if let Some(mut top) = self.heap.peek_mut() {
            if item < *top {
                *top = item;
            }
        }
    }

    fn sorted(self) -> Vec<T> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_heap_keeps_the_smallest_in_order() {
        let mut b = Bounded::new(3);
        for x in [5, 1, 9, 3, 7, 2, 8] {
            b.offer(x);
        }
        assert_eq!(b.sorted(), vec![1, 2, 3]);
    }

    #[test]
    fn case_is_ignored_in_the_text_filter() {
        assert!(contains_folded("Backup-DB", "backup"));
        assert!(contains_folded("nightly-report", "rep"));
        assert!(!contains_folded("nightly", "report"));
        assert!(contains_folded("Ünïcode", "ünï"));
    }

    #[test]
    fn a_cursor_must_come_from_the_same_sort() {
        let k = Ordered {
            key: -3,
            name: "a:b",
            descending: false,
        };
        let c = Cursor::of(JobSort::Failures, &k);
        let back = Cursor::parse(&c, JobSort::Failures).unwrap();
        assert_eq!((back.key, back.name.as_str()), (-3, "a:b"));
        assert!(Cursor::parse(&c, JobSort::Name)
            .unwrap_err()
            .contains("sorted by failures"));
        assert!(Cursor::parse("nonsense", JobSort::Name)
            .unwrap_err()
            .contains("invalid cursor"));
    }
}
