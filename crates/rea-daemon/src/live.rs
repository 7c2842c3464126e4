//! The live views' answers: `overview` and `jobs` (a page of job
//! summaries, filtered and sorted here). Both read the engine's live index
//! (`Engine::live`, refreshed first with what changed since it was last
//! read): the counts are kept per tenant as jobs change, the failing jobs
//! in a set ordered by streak, the next fires come from the engine's heap
//! in due order, and a page is a scan of the dense array of job briefs (a
//! few integers per job: no lookup, no pointer followed and nothing
//! allocated per job) with a heap bounded by the page's size, so no answer
//! builds the job set in memory, whatever the number of jobs. A user's
//! answers read her tenant's jobs only, and are localized on their way
//! back like every other answer; an unfiltered page of root's in file
//! order reads only its own jobs (`Engine::job_views_from`), an exact
//! `name` one job.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};
use rea_core::engine::{Brief, JobView, Live, LiveState};
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

impl Loop {
    /// `overview`: counts over the jobs `scope` sees, the runs in progress,
    /// the failing jobs and the next fires, each bounded.
    pub(super) fn overview(&mut self, now: DateTime<Utc>, scope: &Scope) -> Overview {
        self.engine.refresh_live();
        let live = self.engine.live();
        let (tally, failing, due) = match scope.tenant() {
            None => (
                live.tally(None),
                live.failing(None, OVERVIEW_FAILING),
                live.next_due(OVERVIEW_DUE),
            ),
            Some(me) => match live.tenant(me) {
                None => Default::default(),
                Some(t) => {
                    // Her jobs only: a walk of her positions.
                    let mut failing = Bounded::new(OVERVIEW_FAILING);
                    let mut due = Bounded::new(OVERVIEW_DUE);
                    let briefs = live.briefs();
                    for &p in live.positions(t) {
                        let b = &briefs[p as usize];
                        if b.consecutive_failures > 0 {
                            failing.offer((Reverse(b.consecutive_failures), p));
                        }
                        if b.next_fire_ms != i64::MAX {
                            due.offer((b.next_fire_ms, p));
                        }
                    }
                    (
                        live.tally(Some(t)),
                        failing.sorted().into_iter().map(|(_, p)| p).collect(),
                        due.sorted()
                            .into_iter()
                            .filter_map(|(ms, p)| Some((DateTime::from_timestamp_millis(ms)?, p)))
                            .collect(),
                    )
                }
            },
        };
        let mut counts = Counts {
            jobs: tally.jobs,
            running: tally.running,
            queued: tally.queued,
            paused: tally.paused,
            disabled: tally.disabled,
            failing: tally.failing,
            oneshots_pending: 0,
        };
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
                .into_iter()
                .filter_map(|p| live.view(p))
                .map(|v| summary_of(&v))
                .collect(),
            next_due: due
                .into_iter()
                .map(|(at, p)| Due {
                    job: live.name(p).to_string(),
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
    pub(super) fn jobs_page(
        &mut self,
        query: &JobsQuery,
        scope: &Scope,
    ) -> Result<JobsPage, Response> {
        let bad = |m: String| Response::err("bad_request", m);
        let state = match &query.state {
            None => None,
            Some(state) => Some(LiveState::parse(state).ok_or_else(|| {
                bad(format!(
                    "unknown state {state:?}: one of {}",
                    LiveState::ALL.map(LiveState::as_str).join(", ")
                ))
            })?),
        };
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
        let plain = *scope == Scope::Admin
            && query.sort == JobSort::File
            && !query.descending
            && query.text.is_none()
            && query.name.is_none()
            && query.tag.is_none()
            && query.tenant.is_none()
            && query.state.is_none()
            && !query.failing;
        if plain {
            return Ok(self.file_page(after.as_ref(), limit));
        }
        self.engine.refresh_live();
        let live = self.engine.live();
        let none = || JobsPage {
            jobs: Vec::new(),
            matching: 0,
            next: None,
        };
        // Whose jobs: the asker's tenant, and the tenant asked for.
        let mine = match scope.tenant() {
            None => None,
            Some(me) => match live.tenant(me) {
                Some(t) => Some(t),
                None => return Ok(none()),
            },
        };
        let tenant = match query.tenant.as_deref() {
            None => None,
            Some(t) => {
                let t = match t {
                    "system" => Tenant::System,
                    user => Tenant::User(user),
                };
                match live.tenant(t) {
                    Some(id) => Some(id),
                    None => return Ok(none()),
                }
            }
        };
        // The fewest jobs that can match: one name, a tag's, a tenant's,
        // or all; the other filters are checked on each.
        let one;
        let all: Vec<u32>;
        let source: &[u32] = if let Some(name) = &query.name {
            match live.position(name) {
                Some(p) => {
                    one = [p];
                    &one
                }
                None => return Ok(none()),
            }
        } else if let Some(tag) = &query.tag {
            live.tagged(tag)
        } else if let Some(t) = mine.or(tenant) {
            live.positions(t)
        } else {
            all = (0..live.briefs().len() as u32).collect();
            &all
        };
        let tagged = query.tag.as_deref().map(|t| live.tagged(t));
        let needle = query.text.as_deref().map(str::to_lowercase);
        let me = scope.tenant();
        let briefs = live.briefs();
        let after = after.map(|c| c.at(&live));
        let mut matching = 0usize;
        let mut beyond = 0usize;
        // One more than the page: whether a next page exists.
        let mut page: Bounded<Ordered> = Bounded::new(limit);
        for &p in source {
            let b = &briefs[p as usize];
            if mine.is_some_and(|t| b.tenant != t)
                || tenant.is_some_and(|t| b.tenant != t)
                || state.is_some_and(|s| b.state != s)
                || (query.failing && b.consecutive_failures == 0)
                || tagged.is_some_and(|list| list.binary_search(&p).is_err())
            {
                continue;
            }
            if let Some(needle) = &needle {
                let name = live.name(p);
                // A user searches her names as she writes them.
                let shown = me.and_then(|t| t.local(name)).unwrap_or(name);
                if !contains_folded(shown, needle) {
                    continue;
                }
            }
            matching += 1;
            let key = Ordered {
                key: sort_key(query.sort, p, b),
                rank: 2 * u64::from(b.rank) + 1,
                position: p,
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
            .map(|k| Cursor::of(query.sort, k.key, live.name(k.position)));
        Ok(JobsPage {
            jobs: picked
                .iter()
                .filter_map(|k| live.view(k.position))
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
            // Past the cursor: a later position, or the cursor's own
            // position held by a name after its.
            if after.is_some_and(|c| (i as i64, v.name) <= (c.key, c.name.as_str())) {
                continue;
            }
            picked.push((i, v));
            if picked.len() > limit {
                break;
            }
        }
        let more = picked.len() > limit;
        picked.truncate(limit);
        let next = more
            .then(|| picked.last())
            .flatten()
            .map(|(i, v)| Cursor::of(JobSort::File, *i as i64, v.name));
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
fn sort_key(sort: JobSort, position: u32, b: &Brief) -> i64 {
    match sort {
        JobSort::File => i64::from(position),
        JobSort::Name => 0,
        JobSort::NextFire => b.next_fire_ms,
        JobSort::Failures => -i64::from(b.consecutive_failures),
        JobSort::Duration => b.p95_ms.map_or(1, |ms| -(ms as i64)),
        JobSort::LastRun => b.last_run_s.map_or(i64::MAX, |t| -t),
    }
}

/// A job in a page's order: its key, then its name as its place in name
/// order (`rank`: twice a job's rank plus one, so a cursor's name that
/// left the file falls between two jobs' ranks).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ordered {
    key: i64,
    rank: u64,
    position: u32,
    descending: bool,
}

impl Ordered {
    fn cmp_cursor(&self, c: &(i64, u64)) -> Ordering {
        let o = (self.key, self.rank).cmp(c);
        if self.descending {
            o.reverse()
        } else {
            o
        }
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        let o = (self.key, self.rank).cmp(&(other.key, other.rank));
        if self.descending {
            o.reverse()
        } else {
            o
        }
    }
}

impl PartialOrd for Ordered {
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
    fn of(sort: JobSort, key: i64, name: &str) -> String {
        format!("{}:{key}:{name}", sort.as_str())
    }

    /// The cursor as a job's place in the order: its key and its name's
    /// place in name order (see [`Ordered`]).
    fn at(&self, live: &Live<'_>) -> (i64, u64) {
        let (below, exact) = live.rank_of(&self.name);
        (self.key, 2 * u64::from(below) + u64::from(exact))
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
        let c = Cursor::of(JobSort::Failures, -3, "a:b");
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
