//! What the live views read (`overview`, pages of `jobs`): one small
//! [`Brief`] per job in a dense array in file order, and the overview's
//! counts per tenant, kept current as jobs change instead of recomputed
//! from every job's state on each question.
//!
//! How it stays current: every change to a job's state goes through
//! [`JobMap::get_mut`] (the job map hands out no other mutable access, so
//! a new mutation site cannot forget it), which marks the job's position;
//! a pause or resume marks its job. The marks are read when a view asks
//! ([`Engine::refresh_live`]): each marked job's brief is made again from
//! its state and the counts of its tenant move by the difference. What
//! renumbers the file (a start, a reload, a shutdown's clearing of every
//! queue) marks everything and the index is rebuilt in one walk. The
//! oracle is a recount from every job's view (`tests.rs`: sequences of
//! starts, ends, failures, pauses, reloads and kills, checked at each
//! step).
//!
//! The next fires are not kept here: they are read from the engine's heap
//! in due order ([`Live::next_due`]).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;

use super::*;
use crate::tenant::Tenant;

/// The job map: the engine's jobs by name, handing out mutable access
/// only through methods that mark what changed for the live index.
#[derive(Debug, Default)]
pub(super) struct JobMap {
    map: BTreeMap<Arc<str>, Box<JobState>>,
    /// Positions of jobs changed since the index last read them (each
    /// once: `marked`), so at most one per job.
    changed: Vec<u32>,
    marked: Vec<bool>,
    /// Everything changed: the index is rebuilt.
    all: bool,
}

impl Deref for JobMap {
    type Target = BTreeMap<Arc<str>, Box<JobState>>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl JobMap {
    /// The job named `name`, to change: marked for the live index.
    pub(super) fn get_mut<Q>(&mut self, name: &Q) -> Option<&mut JobState>
    where
        Arc<str>: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let s = self.map.get_mut(name)?;
        mark(&mut self.changed, &mut self.marked, self.all, s.position);
        Some(s)
    }

    /// Marks the job named `name` (its pause changed).
    pub(super) fn touch(&mut self, name: &str) {
        if let Some(s) = self.map.get(name) {
            mark(&mut self.changed, &mut self.marked, self.all, s.position);
        }
    }

    /// Every job, to change: the index is rebuilt.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Box<JobState>> {
        self.all = true;
        self.map.values_mut()
    }

    /// A new job (start, reload): the index is rebuilt.
    pub(super) fn insert(&mut self, name: Arc<str>, state: Box<JobState>) {
        self.all = true;
        self.map.insert(name, state);
    }

    /// Forgets a job that left the file (it has no brief: only the jobs
    /// of the file in force have one).
    pub(super) fn remove(&mut self, name: &str) -> Option<Box<JobState>> {
        self.map.remove(name)
    }

    /// Everything changed (the paused set was replaced, the file order).
    pub(super) fn all_changed(&mut self) {
        self.all = true;
    }
}

fn mark(changed: &mut Vec<u32>, marked: &mut [bool], all: bool, position: usize) {
    if all {
        return;
    }
    // A job that left the file keeps a stale position while its run ends:
    // marking whichever job holds it now costs a recomputation, nothing
    // more.
    if let Some(m) = marked.get_mut(position) {
        if !*m {
            *m = true;
            changed.push(position as u32);
        }
    }
}

/// A job's state in one word, as `rea status` says it (see
/// [`JobView::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum LiveState {
    Running,
    Queued,
    RetryPending,
    Disabled,
    Paused,
    #[default]
    Idle,
}

impl LiveState {
    pub const ALL: [LiveState; 6] = [
        LiveState::Running,
        LiveState::Queued,
        LiveState::RetryPending,
        LiveState::Disabled,
        LiveState::Paused,
        LiveState::Idle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LiveState::Running => "running",
            LiveState::Queued => "queued",
            LiveState::RetryPending => "retry_pending",
            LiveState::Disabled => "disabled",
            LiveState::Paused => "paused",
            LiveState::Idle => "idle",
        }
    }

    pub fn parse(s: &str) -> Option<LiveState> {
        LiveState::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// What a page's filters and sorts read of a job, in 40 bytes, so that a
/// page over 100,000 jobs is a scan of one array with no lookup, no
/// pointer followed and nothing allocated per job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Brief {
    /// Its next fire, milliseconds since the epoch; `i64::MAX`: none.
    pub next_fire_ms: i64,
    /// The end of its last final run that was not skipped, seconds since
    /// the epoch; `None`: never.
    pub last_run_s: Option<i64>,
    /// Its p95 duration estimate in milliseconds; `None`: no run yet.
    pub p95_ms: Option<u64>,
    pub consecutive_failures: u32,
    /// Its place in name order among the jobs of the file.
    pub rank: u32,
    /// Its tenant (see [`Live::tenant`]).
    pub tenant: u32,
    pub state: LiveState,
    /// [`Brief::RUNNING`] and the others: what the counts count.
    pub flags: u8,
}

impl Brief {
    pub const RUNNING: u8 = 1;
    pub const QUEUED: u8 = 2;
    pub const PAUSED: u8 = 4;
    pub const DISABLED: u8 = 8;

    fn of(v: &JobView<'_>, rank: u32, tenant: u32) -> Brief {
        let s = v.summary;
        let flag = |on: bool, f: u8| if on { f } else { 0 };
        Brief {
            next_fire_ms: v.next_fire.map_or(i64::MAX, |t| t.timestamp_millis()),
            last_run_s: s.last_run().map(|t| t.timestamp()),
            p95_ms: s.p95().map(|d| d.as_millis() as u64),
            consecutive_failures: v.consecutive_failures,
            rank,
            tenant,
            state: v.live_state(),
            flags: flag(v.running > 0, Brief::RUNNING)
                | flag(v.queued > 0, Brief::QUEUED)
                | flag(v.paused, Brief::PAUSED)
                | flag(!v.job.enabled, Brief::DISABLED),
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// The overview's counts over a set of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub jobs: usize,
    pub running: usize,
    pub queued: usize,
    pub paused: usize,
    pub disabled: usize,
    /// Jobs whose last final run failed (a failure streak).
    pub failing: usize,
}

impl Tally {
    fn add(&mut self, b: &Brief, sign: isize) {
        let step = |n: &mut usize, on: bool| {
            if on {
                *n = n.wrapping_add_signed(sign);
            }
        };
        step(&mut self.jobs, true);
        step(&mut self.running, b.has(Brief::RUNNING));
        step(&mut self.queued, b.has(Brief::QUEUED));
        step(&mut self.paused, b.has(Brief::PAUSED));
        step(&mut self.disabled, b.has(Brief::DISABLED));
        step(&mut self.failing, b.consecutive_failures > 0);
    }
}

/// One tenant's part of the index.
#[derive(Debug, Default)]
struct TenantPart {
    /// None: the system.
    user: Option<Box<str>>,
    tally: Tally,
    /// Its jobs' positions, in file order.
    positions: Vec<u32>,
}

/// The live views' index. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct LiveIndex {
    /// By position (file order).
    briefs: Vec<Brief>,
    /// Positions in name order (a rank's position).
    by_name: Vec<u32>,
    /// Tenant 0 is the system; users follow in name order.
    tenants: Vec<TenantPart>,
    total: Tally,
    /// Positions of the jobs with each tag, in file order (tags change
    /// only with the file).
    tags: HashMap<Box<str>, Vec<u32>>,
    /// Failing jobs: (streak, position), longest streak first.
    failing: BTreeSet<(std::cmp::Reverse<u32>, u32)>,
}

impl Engine {
    /// Brings the live index up to date with every change since it was
    /// last read: the marked jobs' briefs, or the whole index after a
    /// start or reload. Call before [`Engine::live`].
    pub fn refresh_live(&mut self) {
        if self.jobs.all || self.live.briefs.len() != self.order.len() {
            self.rebuild_live();
            return;
        }
        let changed = std::mem::take(&mut self.jobs.changed);
        for &p in &changed {
            self.jobs.marked[p as usize] = false;
            let Some(name) = self.order.get(p as usize) else {
                continue;
            };
            let Some(v) = self.job_view(name) else {
                continue;
            };
            let old = self.live.briefs[p as usize];
            let new = Brief::of(&v, old.rank, old.tenant);
            if new != old {
                self.live.replace(p, old, new);
            }
        }
        // The vector's room is kept for the next marks.
        self.jobs.changed = changed;
        self.jobs.changed.clear();
    }

    fn rebuild_live(&mut self) {
        let n = self.order.len();
        let mut live = LiveIndex {
            briefs: vec![Brief::default(); n],
            by_name: Vec::with_capacity(n),
            tenants: vec![TenantPart::default()],
            ..LiveIndex::default()
        };
        let mut users: HashMap<&str, u32> = HashMap::new();
        // Name order: each user's jobs are one run of names, so a
        // tenant's number is found once per run.
        for (rank, (p, v)) in self.job_views_indexed().enumerate() {
            let tenant = match Tenant::of(v.name).user() {
                None => 0,
                Some(u) => *users.entry(u).or_insert_with(|| {
                    live.tenants.push(TenantPart {
                        user: Some(u.into()),
                        ..TenantPart::default()
                    });
                    (live.tenants.len() - 1) as u32
                }),
            };
            live.briefs[p] = Brief::of(&v, rank as u32, tenant);
            live.by_name.push(p as u32);
            for tag in &v.job.tags {
                live.tags
                    .entry(tag.as_str().into())
                    .or_default()
                    .push(p as u32);
            }
        }
        for (p, b) in live.briefs.iter().enumerate() {
            live.total.add(b, 1);
            let t = &mut live.tenants[b.tenant as usize];
            t.tally.add(b, 1);
            t.positions.push(p as u32);
            if b.consecutive_failures > 0 {
                live.failing
                    .insert((std::cmp::Reverse(b.consecutive_failures), p as u32));
            }
        }
        for list in live.tags.values_mut() {
            list.sort_unstable();
        }
        self.live = live;
        self.jobs.all = false;
        self.jobs.changed.clear();
        self.jobs.marked.clear();
        self.jobs.marked.resize(n, false);
    }

    /// The live index as last refreshed ([`Engine::refresh_live`]).
    pub fn live(&self) -> Live<'_> {
        Live { engine: self }
    }
}

impl LiveIndex {
    fn replace(&mut self, p: u32, old: Brief, new: Brief) {
        self.total.add(&old, -1);
        self.total.add(&new, 1);
        let t = &mut self.tenants[old.tenant as usize].tally;
        t.add(&old, -1);
        t.add(&new, 1);
        if old.consecutive_failures != new.consecutive_failures {
            self.failing
                .remove(&(std::cmp::Reverse(old.consecutive_failures), p));
            if new.consecutive_failures > 0 {
                self.failing
                    .insert((std::cmp::Reverse(new.consecutive_failures), p));
            }
        }
        self.briefs[p as usize] = new;
    }
}

/// The live index, read ([`Engine::live`]).
#[derive(Clone, Copy)]
pub struct Live<'a> {
    engine: &'a Engine,
}

impl<'a> Live<'a> {
    /// Every job's brief, by position (file order).
    pub fn briefs(&self) -> &'a [Brief] {
        &self.engine.live.briefs
    }

    /// The name of the job at `position`.
    pub fn name(&self, position: u32) -> &'a str {
        self.engine
            .order
            .get(position as usize)
            .map_or("", |n| &**n)
    }

    /// The job at `position`, as the live views show it.
    pub fn view(&self, position: u32) -> Option<JobView<'a>> {
        self.engine.job_view(self.name(position))
    }

    /// The number of `tenant` (None: the system's jobs, or a user who has
    /// none in the file).
    pub fn tenant(&self, tenant: Tenant<'_>) -> Option<u32> {
        match tenant.user() {
            None => Some(0),
            Some(u) => self
                .engine
                .live
                .tenants
                .iter()
                .position(|t| t.user.as_deref() == Some(u))
                .map(|i| i as u32),
        }
    }

    /// The counts over every job (None) or one tenant's.
    pub fn tally(&self, tenant: Option<u32>) -> Tally {
        match tenant {
            None => self.engine.live.total,
            Some(t) => self
                .engine
                .live
                .tenants
                .get(t as usize)
                .map(|t| t.tally)
                .unwrap_or_default(),
        }
    }

    /// The positions of one tenant's jobs, in file order.
    pub fn positions(&self, tenant: u32) -> &'a [u32] {
        self.engine
            .live
            .tenants
            .get(tenant as usize)
            .map_or(&[], |t| &t.positions)
    }

    /// The positions of the jobs tagged `tag`, in file order.
    pub fn tagged(&self, tag: &str) -> &'a [u32] {
        self.engine.live.tags.get(tag).map_or(&[], |v| v)
    }

    /// The position of the job named `name` in the file (a lookup).
    pub fn position(&self, name: &str) -> Option<u32> {
        let s = self.engine.jobs.get(name)?;
        (!s.removed).then_some(s.position as u32)
    }

    /// Where `name` falls in name order: the number of the file's jobs
    /// named before it, and whether one is named `name`.
    pub fn rank_of(&self, name: &str) -> (u32, bool) {
        if let Some(p) = self.position(name) {
            return (self.engine.live.briefs[p as usize].rank, true);
        }
        let by_name = &self.engine.live.by_name;
        let below = by_name.partition_point(|&p| self.name(p) < name);
        (below as u32, false)
    }

    /// The failing jobs of every tenant (None) or one, longest streak
    /// first (then file order), at most `n`.
    pub fn failing(&self, tenant: Option<u32>, n: usize) -> Vec<u32> {
        let briefs = self.briefs();
        self.engine
            .live
            .failing
            .iter()
            .map(|&(_, p)| p)
            .filter(|&p| tenant.is_none_or(|t| briefs[p as usize].tenant == t))
            .take(n)
            .collect()
    }

    /// The next fires of every job, soonest first (then file order), at
    /// most `n`: read from the heap in due order, so it costs the entries
    /// due before them, not the job count.
    pub fn next_due(&self, n: usize) -> Vec<(DateTime<Utc>, u32)> {
        let e = self.engine;
        if n == 0 {
            return Vec::new();
        }
        // An entry is due at its occurrence plus its jitter: an
        // occurrence earlier than one already held can be due up to the
        // largest jitter later.
        let slack = chrono::Duration::from_std(e.max_jitter).unwrap_or(chrono::Duration::MAX);
        let mut best: BTreeSet<(DateTime<Utc>, u32)> = BTreeSet::new();
        for (read, (id, due, entry)) in e.heap.in_order().enumerate() {
            // Many jobs due at the same instant (every `*/5` job of the
            // file at the next five minutes) must all be read to break
            // their tie by file order: past a few hundred entries the
            // scan of the briefs (0.1 ms at 100,000 jobs) is cheaper.
            if read >= HEAP_READ {
                return self.next_due_scanned(n);
            }
            if best.len() >= n {
                match best.last() {
                    Some((worst, _))
                        if due
                            > worst
                                .checked_add_signed(slack)
                                .unwrap_or(DateTime::<Utc>::MAX_UTC) =>
                    {
                        break
                    }
                    _ => {}
                }
            }
            let Due::Occurrence { job, at, .. } = entry else {
                continue;
            };
            let Some(s) = e.jobs.get(&**job) else {
                continue;
            };
            if s.removed || s.next != Some(id) {
                continue;
            }
            best.insert((*at, s.position as u32));
            if best.len() > n {
                best.pop_last();
            }
        }
        best.into_iter().collect()
    }

    /// [`Live::next_due`] from a scan of the briefs.
    pub(super) fn next_due_scanned(&self, n: usize) -> Vec<(DateTime<Utc>, u32)> {
        let mut best: std::collections::BinaryHeap<(i64, u32)> =
            std::collections::BinaryHeap::with_capacity(n + 1);
        for (p, b) in self.briefs().iter().enumerate() {
            if b.next_fire_ms == i64::MAX {
                continue;
            }
            let k = (b.next_fire_ms, p as u32);
            if best.len() < n {
                best.push(k);
            } else if let Some(mut top) = best.peek_mut() {
                if k < *top {
                    *top = k;
                }
            }
        }
        best.into_sorted_vec()
            .into_iter()
            .filter_map(|(ms, p)| Some((DateTime::from_timestamp_millis(ms)?, p)))
            .collect()
    }
}

/// How many heap entries [`Live::next_due`] reads before it scans the
/// briefs instead.
const HEAP_READ: usize = 256;
