//! A cgroup v2 leaf per run: created before the child executes, the child
//! placed in it as its first act, the whole of it signalled, killed
//! (`cgroup.kill`) and measured (`cpu.stat`, `memory.peak`, `io.stat`,
//! `pids.peak`), its emptiness seen by polling (epoll, `EPOLLPRI`) its
//! `cgroup.events`,
//! removed once empty.
//!
//! - [`Tree`]: the daemon's subtree, `<its own cgroup>/rea`, with a
//!   directory per tenant; what it can enforce (the controllers it could
//!   enable) and what it cannot, as a sentence ([`Tree::mode`]).
//! - `Leaf`: one run's cgroup, owned by the run's supervisor.
//! - [`Pool`]: a tenant's run cgroups kept for the next runs (below).
//!
//! How the child gets in. The parent holds the leaf's directory open. On
//! x86_64 the child is created in the leaf (`clone3` with
//! `CLONE_INTO_CGROUP`, `process/clone3.rs`); elsewhere, or where the
//! kernel refuses that, the parent opens the leaf's `cgroup.procs` right
//! before the clone and the child writes "0" to it before anything else, as
//! root, before it switches users. Either way the
//! child executes no code of the job before it is in, so nothing escapes in
//! between; the write costs a full RCU grace period whenever spawns are
//! spaced out (see `clone_child` in `process.rs`, and BENCHMARKS.md).
//!
//! Leaves are reused. Making a cgroup (`mkdir`, its files opened and its
//! `cgroup.events` registered with the loop's epoll) and removing it
//! (`rmdir`, then the kernel's teardown on a kworker and in RCU callbacks)
//! was most of what a cgroup added to a short run, on the loop's thread and
//! on the machine (BENCHMARKS.md, stop 31). So a run's leaf, once empty, goes
//! back to its tenant's [`Pool`] and the tenant's next run is created in it:
//! a run then pays an `open` of the directory and an `fsetxattr` before its
//! clone. A waiting leaf holds no descriptor (each one the daemon holds is
//! copied into every child and closed there), and `cgroup.events` is only
//! watched for a run that has processes left after its leader. Such leaves are named
//! `pool.<daemon pid>.<n>`, since cgroup v2 refuses to rename a cgroup; the
//! run in one is its extended attribute `user.rea.run`, written before the
//! child is created in it, which is how restart recovery finds a leftover
//! run's leaf exactly ([`Tree::end_leftover`]); a leaf whose attribute names
//! another run, or none, is never taken for it. Its CPU figures are
//! `cpu.stat` now minus `cpu.stat` when the run took it. Only leaves whose
//! figures can be told apart that way are reused: none with the memory, io
//! or pids controller (`memory.peak` and `pids.peak` cannot be reset
//! everywhere) and none with a limit of the job's. Hooks and mail
//! deliveries keep a leaf of their own named after their run.
//!
//! A waiting leaf is kept populated by a keeper ([`crate::process`]'s
//! `Keeper`): a child of the daemon's, created in the leaf by `clone3`
//! sharing the daemon's memory (no page table is copied), that closes
//! every descriptor, blocks every signal, asks for SIGKILL when the
//! daemon dies and sleeps. A leaf that emptied after each run cost the
//! kernel, at the next run's clone, a new css_set linked to every
//! hierarchy under the global `cgroup_mutex`, and a kworker per
//! `populated` flip (BENCHMARKS.md, stop 32). With a keeper, "the run is
//! over" is "no process but the keeper in `cgroup.procs`"; a run that
//! leaves processes behind kills its keeper (from then on `cgroup.events`
//! says when the leaf is empty, as without one) and the leaf gets a new
//! one at a later run's end. Keepers are shared out: [`POOL_MAX`] per
//! tenant, [`KEEPERS_MAX`] per daemon of which [`KEEPERS_FOR_ROOT`] for
//! root's tenant only. A leaf that was killed (`cgroup.kill`) is never
//! reused (see `Leaf::killed`).
//!
//! A process cannot leave its cgroup without write access to another
//! cgroup's `cgroup.procs` (root jobs could; jobs as other users cannot),
//! so what a run starts — double forks, `setsid`, `setpgid` — stays in it
//! and is killed with it.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rea_core::run::{Limits, Usage};
use rea_core::tenant::Tenant;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The controllers rea enables for runs, when the host offers them.
pub const CONTROLLERS: [&str; 4] = ["cpu", "memory", "io", "pids"];

/// How this daemon contains its runs: a cgroup each, or (without a
/// writable cgroup v2, or with `cgroups = "off"`) their process groups.
#[derive(Debug)]
pub enum Containment {
    Cgroups(Tree),
    ProcessGroups { why: String },
}

impl Containment {
    /// Sets up the daemon's subtree if `wanted` and the host allows, with
    /// the directory of `tenant` made (and checked writable) up front.
    pub fn detect(wanted: bool, tenant: &str) -> Containment {
        if !wanted {
            return Containment::ProcessGroups {
                why: "cgroups = \"off\" in [daemon]".to_string(),
            };
        }
        let tree = Tree::setup().and_then(|tree| {
            let dir = tree.tenant(tenant)?;
            writable(&dir)?;
            Ok(tree)
        });
        match tree {
            Ok(tree) => Containment::Cgroups(tree),
            Err(why) => Containment::ProcessGroups { why },
        }
    }

    /// The mode as one line, for the log, `rea status` and metrics.
    pub fn mode(&self) -> String {
        match self {
            Containment::Cgroups(tree) => tree.mode(),
            Containment::ProcessGroups { why } => {
                format!("process groups (escapees are not contained, limits through cgroups unavailable): {why}")
            }
        }
    }

    /// `"cgroup"` or `"process_group"`, for a metric's label.
    pub fn kind(&self) -> &'static str {
        match self {
            Containment::Cgroups(_) => "cgroup",
            Containment::ProcessGroups { .. } => "process_group",
        }
    }

    pub fn tree(&self) -> Option<&Tree> {
        match self {
            Containment::Cgroups(tree) => Some(tree),
            Containment::ProcessGroups { .. } => None,
        }
    }

    /// Where a hook or a mail delivery goes: a leaf of its own,
    /// `<tenant>/<run>`; None in process-group mode, or (said in the log)
    /// if the tenant's directory cannot be made.
    pub fn place(&self, tenant: &str, run: &str) -> Option<CgroupSpec> {
        self.place_in(tenant, run, false)
    }

    /// Where a run goes: a leaf of the tenant's [`Pool`] where it can be
    /// reused, else as [`Containment::place`].
    pub fn place_run(&self, tenant: &str, run: &str) -> Option<CgroupSpec> {
        self.place_in(tenant, run, true)
    }

    fn place_in(&self, tenant: &str, run: &str, pooled: bool) -> Option<CgroupSpec> {
        let tree = self.tree()?;
        match tree.tenant_dir(tenant) {
            Ok(dir) => Some(CgroupSpec {
                parent: dir.path,
                name: run.to_string(),
                controllers: tree.enabled.clone().into(),
                pool: pooled.then_some(dir.pool),
            }),
            Err(e) => {
                tracing::warn!("run {run} is contained by its process group only: {e}");
                None
            }
        }
    }

    /// Sets tenants' subtree limits ([`Tree::set_tenant_limits`]); nothing
    /// in process-group mode (said by [`Containment::unenforceable`]).
    pub fn set_tenant_limits(&self, wanted: &[(String, Limits)]) -> Vec<String> {
        match self.tree() {
            Some(tree) => tree.set_tenant_limits(wanted),
            None => Vec::new(),
        }
    }

    /// The limits among `limits` this host cannot enforce, each as
    /// `memory_max (memory controller not enabled)`.
    pub fn unenforceable(&self, limits: &Limits) -> Vec<String> {
        let mut out = Vec::new();
        for (controller, fields) in limits.controllers() {
            let why = match self {
                Containment::Cgroups(tree) if tree.has(controller) => continue,
                Containment::Cgroups(tree) => {
                    format!("{controller} controller: {}", tree.missing_why())
                }
                Containment::ProcessGroups { .. } => "no cgroup per run".to_string(),
            };
            for f in fields {
                out.push(format!("{f} ({why})"));
            }
        }
        out
    }
}

/// What a daemon started here would get, without creating or moving
/// anything: for `rea check`. Controllers are those this process's cgroup
/// offers (a delegated unit offers its own; elsewhere the daemon enables
/// none itself, which this may overstate).
pub fn probe() -> Result<Vec<String>, String> {
    let hierarchy = rea_host::cgroup::find()?;
    let own = &hierarchy.own;
    writable(own)?;
    writable(&own.join("cgroup.procs"))?;
    let offered = if *own == hierarchy.mount {
        rea_host::cgroup::enabled(own)
    } else {
        rea_host::cgroup::controllers(own)
    };
    Ok(offered
        .into_iter()
        .filter(|c| CONTROLLERS.contains(&c.as_str()))
        .collect())
}

/// The daemon's subtree of cgroups: `<root>/<tenant>/<run>`.
#[derive(Debug)]
pub struct Tree {
    root: PathBuf,
    /// Tenants' directories made so far (made once, not per run).
    tenants: std::sync::Mutex<Vec<(String, TenantDir)>>,
    /// The limits of tenants' whole subtrees, by directory name, as last
    /// set ([`Tree::set_tenant_limits`]): written when the directory is
    /// made, rewritten at each reload.
    tenant_limits: std::sync::Mutex<Vec<(String, Limits)>>,
    /// The controllers a run's leaf gets (enabled down to the tenants).
    enabled: Vec<String>,
    /// Why the rest are missing, for the mode line.
    missing_why: String,
}

impl Tree {
    /// Finds a writable cgroup v2 hierarchy and prepares `rea` under the
    /// cgroup this process is in. Where that cgroup is not the hierarchy's
    /// root and this process is alone in it (a systemd unit with
    /// `Delegate=yes`), the daemon first moves itself into `rea/daemon`:
    /// cgroup v2 lets a cgroup hand controllers to its children only while
    /// it holds no process itself. Elsewhere (the hierarchy's root, or a
    /// cgroup shared with other processes) it enables no controller in its
    /// own cgroup, which is not its to change. An error says why runs fall
    /// back to process groups.
    pub fn setup() -> Result<Tree, String> {
        let hierarchy = rea_host::cgroup::find()?;
        let base = hierarchy.own.clone();
        // A child moves itself from here into its leaf: that takes write
        // access to the cgroup.procs of both cgroups' common ancestor.
        writable(&base.join("cgroup.procs"))?;
        let root = base.join("rea");
        make_dir(&root).map_err(|e| {
            format!(
                "cannot create {} ({e}): the cgroup v2 hierarchy is not writable here",
                root.display()
            )
        })?;
        let is_root = base == hierarchy.mount;
        let owned = !is_root && alone_in(&base);
        if owned {
            let daemon = root.join("daemon");
            make_dir(&daemon)
                .and_then(|()| std::fs::write(daemon.join("cgroup.procs"), "0"))
                .map_err(|e| {
                    format!(
                        "cannot move the daemon into {} ({e}), as cgroup v2's \
                         no-internal-processes rule requires",
                        daemon.display()
                    )
                })?;
            enable(&base);
        }
        let missing_why = if is_root || owned {
            "controller not enabled".to_string()
        } else {
            format!(
                "controller not enabled ({} holds other processes; run under systemd \
                 with Delegate=yes)",
                base.display()
            )
        };
        let mut tree = Tree::at(root)?;
        tree.missing_why = missing_why;
        Ok(tree)
    }

    /// A subtree at `root` (created if needed), enabling what controllers
    /// its parent offers. For tests, and for [`Tree::setup`].
    pub fn at(root: PathBuf) -> Result<Tree, String> {
        make_dir(&root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        enable(&root);
        // What a tenant's directory can offer its runs.
        let enabled = rea_host::cgroup::enabled(&root)
            .into_iter()
            .filter(|c| CONTROLLERS.contains(&c.as_str()))
            .collect();
        Ok(Tree {
            root,
            tenants: std::sync::Mutex::new(Vec::new()),
            tenant_limits: std::sync::Mutex::new(Vec::new()),
            enabled,
            missing_why: "controller not enabled".to_string(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether runs' leaves get `controller`.
    pub fn has(&self, controller: &str) -> bool {
        self.enabled.iter().any(|c| c == controller)
    }

    /// The controllers runs get.
    pub fn enabled(&self) -> &[String] {
        &self.enabled
    }

    /// What runs get, as one line: `cgroup: contained (…/rea); controllers:
    /// cpu, memory` or `…; memory, io, pids limits unavailable: controller
    /// not enabled`.
    pub fn mode(&self) -> String {
        let missing: Vec<&str> = CONTROLLERS
            .iter()
            .copied()
            .filter(|c| !self.has(c))
            .collect();
        let mut line = format!("cgroup: contained ({})", self.root.display());
        if !self.enabled.is_empty() {
            line.push_str(&format!("; controllers: {}", self.enabled.join(", ")));
        }
        if !missing.is_empty() {
            line.push_str(&format!(
                "; {} limits unavailable: {}",
                missing.join(", "),
                self.missing_why
            ));
        }
        line
    }

    /// Why `controller` is missing (for messages about a limit).
    pub fn missing_why(&self) -> &str {
        &self.missing_why
    }

    /// The directory a tenant's runs go in, created (with the controllers
    /// enabled for them) if needed.
    pub fn tenant(&self, tenant: &str) -> Result<Arc<Path>, String> {
        self.tenant_dir(tenant).map(|d| d.path)
    }

    /// [`Tree::tenant`], with the tenant's pool of leaves.
    fn tenant_dir(&self, tenant: &str) -> Result<TenantDir, String> {
        if !plain_name(tenant) {
            return Err(format!("{tenant:?} cannot name a cgroup"));
        }
        let mut made = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Not checked again: a tenant's directory removed meanwhile is made
        // again by the leaf that finds it missing (`Leaf::create`).
        if let Some((_, dir)) = made.iter().find(|(t, _)| t == tenant) {
            return Ok(dir.clone());
        }
        let dir = self.root.join(tenant);
        make_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        enable(&dir);
        if let Some(limits) = self.limits_of(tenant) {
            write_limits(&dir, &limits, &self.enabled)?;
        }
        let dir = TenantDir {
            path: Arc::from(dir),
            pool: Arc::new(Pool::new(tenant == Tenant::System.key())),
        };
        made.retain(|(t, _)| t != tenant);
        made.push((tenant.to_string(), dir.clone()));
        Ok(dir)
    }

    fn limits_of(&self, tenant: &str) -> Option<Limits> {
        let set = self
            .tenant_limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.iter().find(|(t, _)| t == tenant).map(|(_, l)| *l)
    }

    /// Sets the limits of tenants' whole subtrees (each tenant's directory
    /// by name, e.g. `user-alice`, with the cgroup fields of its limits):
    /// each directory is made if needed and gets every limit file its
    /// controllers have, a limit unset written as the kernel's default
    /// (`max`, weight 100), so a limit removed from the file is lifted;
    /// a tenant set before and not now gets the defaults back. Limits
    /// whose controller is not enabled are skipped (the daemon says so,
    /// [`Containment::unenforceable`]). Returns what the kernel refused,
    /// a sentence each.
    pub fn set_tenant_limits(&self, wanted: &[(String, Limits)]) -> Vec<String> {
        let before = std::mem::replace(
            &mut *self
                .tenant_limits
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            wanted.to_vec(),
        );
        let mut refused = Vec::new();
        for (tenant, _) in before
            .iter()
            .filter(|(t, _)| !wanted.iter().any(|(w, _)| w == t))
        {
            let dir = self.root.join(tenant);
            if dir.is_dir() {
                if let Err(e) = write_limits(&dir, &Limits::NONE, &self.enabled) {
                    refused.push(e);
                }
            }
        }
        for (tenant, limits) in wanted {
            let made = self
                .tenants
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .any(|(t, _)| t == tenant);
            // A directory made now gets its limits as it is made.
            let result = if made {
                write_limits(&self.root.join(tenant), limits, &self.enabled)
            } else {
                self.tenant(tenant).map(|_| ())
            };
            if let Err(e) = result {
                refused.push(format!("tenant {tenant}: {e}"));
            }
        }
        refused
    }

    /// Ends what is left in a previous daemon's run cgroup, if it is still
    /// there: `cgroup.kill`, waits (at most `wait`) for it to empty, and
    /// removes it. The run's cgroup is the one named after it, or the
    /// pooled leaf whose `user.rea.run` names it (never any other: a leaf
    /// names the run the daemon wrote into it before creating its child).
    /// Returns how many processes were in it, or None if there is no such
    /// cgroup.
    pub fn end_leftover(&self, tenant: &str, run: &str, wait: Duration) -> Option<usize> {
        if !plain_name(tenant) || !plain_name(run) {
            return None;
        }
        let named = self.root.join(tenant).join(run);
        let dir = if named.is_dir() {
            named
        } else {
            pooled_leaf_of(&self.root.join(tenant), run)?
        };
        let found = procs(&dir).len();
        if found > 0 {
            kill_dir(&dir);
            let deadline = std::time::Instant::now() + wait;
            while populated_dir(&dir).unwrap_or(false) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let _ = std::fs::remove_dir(&dir);
        Some(found)
    }

    /// Removes run cgroups that are empty and older than `min_age`: those
    /// of a daemon killed before it could remove them, and those that kept
    /// `kill_stragglers = false` leftovers until after their daemon stopped.
    /// A cgroup another daemon sharing the subtree has just made is younger
    /// than that and is used at once; one with processes is refused by
    /// rmdir. Pooled leaves (`pool.<pid>.<n>`) belong to the daemon of that
    /// pid while it lives, however long they wait for a run: those are left
    /// alone; a dead daemon's empty ones go whatever their age. Called at
    /// start, before this daemon has made any, so a leaf named with this
    /// process's pid is a predecessor's. Returns how many were removed.
    pub fn sweep(&self, min_age: Duration) -> usize {
        let mut removed = 0;
        let tenants = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten();
        for tenant in tenants.filter(|t| t.file_name() != OsStr::new("daemon")) {
            let leaves = std::fs::read_dir(tenant.path())
                .into_iter()
                .flatten()
                .flatten();
            for leaf in leaves {
                if let Some(owner) = pool_owner(&leaf.file_name()) {
                    if !owner_alive(owner)
                        && populated_dir(&leaf.path()).is_ok_and(|p| !p)
                        && std::fs::remove_dir(leaf.path()).is_ok()
                    {
                        removed += 1;
                    }
                    continue;
                }
                let old = leaf
                    .metadata()
                    .ok()
                    .filter(|m| m.is_dir())
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= min_age);
                if old
                    && populated_dir(&leaf.path()).is_ok_and(|p| !p)
                    && std::fs::remove_dir(leaf.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Removes the tenants' directories and the root if they are empty
    /// (another daemon's runs, or leftovers of `kill_stragglers = false`,
    /// keep them: rmdir refuses a cgroup with children).
    pub fn tidy(&self) {
        let dirs: Vec<TenantDir> = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(_, d)| d.clone())
            .collect();
        for dir in dirs {
            dir.pool.drain();
        }
        removals::flush(Duration::from_secs(1));
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for e in entries.flatten() {
                if e.path().is_dir() && e.file_name() != OsStr::new("daemon") {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&self.root);
    }
}

/// Where a run's cgroup goes (its limits are [`crate::RunSpec::limits`]).
#[derive(Debug, Clone)]
pub struct CgroupSpec {
    /// The tenant's directory ([`Tree::tenant`]).
    pub parent: Arc<Path>,
    /// The leaf's name: the run's id.
    pub name: String,
    /// The controllers the leaf gets ([`Tree::enabled`]): only their
    /// figures are read at the run's end.
    pub controllers: Arc<[String]>,
    /// The tenant's pool, for a run: its leaf is taken from it (or made for
    /// it) and given back once empty, where that keeps its figures right
    /// ([`Containment::place_run`]). None: a leaf named `name`, removed
    /// after.
    pub pool: Option<Arc<Pool>>,
}

/// A tenant's directory and its pool of leaves.
#[derive(Debug, Clone)]
struct TenantDir {
    path: Arc<Path>,
    pool: Arc<Pool>,
}

/// At most this many empty leaves wait per tenant; more are removed.
const POOL_MAX: usize = 64;

/// At most this many keepers per daemon (each is a task of the kernel's,
/// some 20 KiB of its memory, and a pid)...
const KEEPERS_MAX: usize = 256;

/// ...of which this many are for root's tenant only.
const KEEPERS_FOR_ROOT: usize = 64;

/// A leaf's keeper, counted in its tenant's share until it is reaped.
#[derive(Debug)]
struct Kept {
    keeper: crate::process::Keeper,
    pool: Arc<Pool>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        // Reaped first (the keeper's own drop, after this), counted off
        // now: the share is only ever a little generous.
        self.pool.keepers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How a pooled leaf's name starts: `pool.<daemon pid>.<n>`. A run id is
/// never that (it is 14 letters and digits, then maybe `-<node>`), nor a
/// hook's or mail's leaf (`<run>.<hook>`).
const POOL_PREFIX: &str = "pool.";

/// The extended attribute that names the run in a pooled leaf.
const RUN_XATTR: &str = "user.rea.run";

/// A tenant's run cgroups that have no process, kept for its next runs
/// (see the module documentation). Used from the daemon's loop thread;
/// the lock is never contended there.
#[derive(Debug)]
pub struct Pool {
    idle: std::sync::Mutex<Vec<Arc<Leaf>>>,
    /// The `<n>` of the next leaf's name.
    next: std::sync::atomic::AtomicU64,
    /// Cleared if the kernel refuses `user.rea.run` (before Linux 5.7, or
    /// a filesystem without user attributes): runs get leaves named after
    /// them again, as recovery could not find a pooled one.
    usable: AtomicBool,
    /// The keepers of its leaves (at most [`POOL_MAX`]).
    keepers: std::sync::atomic::AtomicUsize,
    /// Root's tenant: may take the keepers held back from the others.
    root: bool,
}

impl Pool {
    fn new(root: bool) -> Pool {
        Pool {
            idle: std::sync::Mutex::new(Vec::new()),
            next: std::sync::atomic::AtomicU64::new(1),
            usable: AtomicBool::new(true),
            keepers: std::sync::atomic::AtomicUsize::new(0),
            root,
        }
    }

    /// A keeper for one of its leaves, whose directory is open as `dir`,
    /// within its share: [`POOL_MAX`] per tenant, [`KEEPERS_MAX`] in all,
    /// of which the last [`KEEPERS_FOR_ROOT`] only for root's tenant.
    fn keeper(self: &Arc<Pool>, dir: std::os::fd::BorrowedFd<'_>) -> Option<Kept> {
        let all = if self.root {
            KEEPERS_MAX
        } else {
            KEEPERS_MAX - KEEPERS_FOR_ROOT
        };
        if self.keepers.load(Ordering::Relaxed) >= POOL_MAX
            || crate::process::Keeper::count() >= all
        {
            return None;
        }
        let keeper = crate::process::Keeper::start(dir)?;
        self.keepers.fetch_add(1, Ordering::Relaxed);
        Some(Kept {
            keeper,
            pool: self.clone(),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Leaf>>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A name no leaf of this daemon has had.
    fn fresh_name(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{POOL_PREFIX}{}.{n}", std::process::id())
    }

    /// Takes the leaf back if there is room.
    fn put(&self, leaf: Arc<Leaf>) -> Result<(), Arc<Leaf>> {
        let mut idle = self.idle();
        if idle.len() >= POOL_MAX {
            return Err(leaf);
        }
        idle.push(leaf);
        Ok(())
    }

    /// Removes every idle leaf (the daemon is stopping).
    fn drain(&self) {
        let leaves = std::mem::take(&mut *self.idle());
        for leaf in leaves {
            leaf.remove();
        }
    }

    /// How many leaves wait (for tests).
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.idle().len()
    }
}

/// The daemon pid in a pooled leaf's name.
fn pool_owner(name: &OsStr) -> Option<i32> {
    let rest = name.to_str()?.strip_prefix(POOL_PREFIX)?;
    let (pid, n) = rest.split_once('.')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether the daemon that named a pooled leaf still runs (as far as this
/// pid namespace tells; this process's own pid is a predecessor's, see
/// [`Tree::sweep`]).
fn owner_alive(pid: i32) -> bool {
    if u32::try_from(pid).is_ok_and(|p| p == std::process::id()) {
        return false;
    }
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH),
        None => false,
    }
}

/// The pooled leaf under `tenant_dir` whose `user.rea.run` is `run`.
fn pooled_leaf_of(tenant_dir: &Path, run: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(tenant_dir).ok()?;
    entries.flatten().map(|e| e.path()).find(|path| {
        path.file_name().and_then(pool_owner).is_some() && {
            let mut buf = [0u8; 256];
            rustix::fs::getxattr(path, RUN_XATTR, &mut buf)
                .is_ok_and(|n| buf.get(..n) == Some(run.as_bytes()))
        }
    })
}

/// Whether this process may write to `path` (a cgroup directory or file).
fn writable(path: &Path) -> Result<(), String> {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK)
        .map_err(|e| format!("{} is not writable by this user ({e})", path.display()))
}

/// A name that is one path component and no special file's.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.starts_with("cgroup.")
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Enables, for `dir`'s children, every controller of [`CONTROLLERS`] that
/// `dir` offers; one at a time, so one refused does not stop the others.
fn enable(dir: &Path) {
    let offered = rea_host::cgroup::controllers(dir);
    let on = rea_host::cgroup::enabled(dir);
    for c in CONTROLLERS {
        if offered.iter().any(|o| o == c) && !on.iter().any(|o| o == c) {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        }
    }
}

/// Whether this process is the only one in the cgroup at `dir`.
fn alone_in(dir: &Path) -> bool {
    let me = std::process::id();
    let pids = procs(dir);
    !pids.is_empty() && pids.iter().all(|p| *p == me)
}

/// The pids in a cgroup (`cgroup.procs`).
fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// `populated` from `cgroup.events`.
fn populated_dir(dir: &Path) -> io::Result<bool> {
    let text = std::fs::read_to_string(dir.join("cgroup.events"))?;
    Ok(populated(&text))
}

fn populated(events: &str) -> bool {
    events
        .lines()
        .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["populated", "1"])
}

/// `cgroup.kill` (Linux 5.14); before it, SIGKILL to every process listed,
/// until none is left (at most a few rounds: processes forking meanwhile
/// are caught by the next).
fn kill_dir(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    for _ in 0..16 {
        let pids = procs(dir);
        if pids.is_empty() {
            return;
        }
        signal_pids(&pids, rustix::process::Signal::KILL);
    }
}

fn signal_pids(pids: &[u32], signal: rustix::process::Signal) {
    for pid in pids {
        if let Some(pid) = i32::try_from(*pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            // ESRCH: it exited meanwhile.
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Writes the limit files of `dir` whose controller is among `enabled`:
/// `limits`'s values, and the kernel's default for each one unset (`max`,
/// a weight of 100). A file the cgroup lacks is skipped.
fn write_limits(dir: &Path, limits: &Limits, enabled: &[String]) -> Result<(), String> {
    let set = limit_files(limits);
    let all = limit_files(&Limits {
        memory_max: Some(0),
        memory_high: Some(0),
        cpu_max_percent: Some(0),
        cpu_weight: Some(0),
        io_weight: Some(0),
        tasks_max: Some(0),
        ..Limits::NONE
    });
    for (controller, file, _) in all {
        if !enabled.iter().any(|c| c == controller) {
            continue;
        }
        let value = match set.iter().find(|(_, f, _)| *f == file) {
            Some((_, _, v)) => v.clone(),
            None => match file {
                "cpu.max" => "max 100000".to_string(),
                "cpu.weight" => "100".to_string(),
                "io.weight" => "default 100".to_string(),
                _ => "max".to_string(),
            },
        };
        match std::fs::write(dir.join(file), &value) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "cannot set {}/{file} to {value}: {e}",
                    dir.display()
                ))
            }
        }
    }
    Ok(())
}

/// The limit files a leaf gets for `limits`, with the controller each needs.
fn limit_files(limits: &Limits) -> Vec<(&'static str, &'static str, String)> {
    let mut files = Vec::new();
    if let Some(v) = limits.memory_max {
        files.push(("memory", "memory.max", v.to_string()));
    }
    if let Some(v) = limits.memory_high {
        files.push(("memory", "memory.high", v.to_string()));
    }
    if let Some(pct) = limits.cpu_max_percent {
        // A quota per 100 ms period: 50% is 50 ms of CPU time in every 100.
        files.push((
            "cpu",
            "cpu.max",
            format!("{} 100000", u64::from(pct) * 1000),
        ));
    }
    if let Some(v) = limits.cpu_weight {
        files.push(("cpu", "cpu.weight", v.to_string()));
    }
    if let Some(v) = limits.io_weight {
        files.push(("io", "io.weight", format!("default {v}")));
    }
    if let Some(v) = limits.tasks_max {
        files.push(("pids", "pids.max", v.to_string()));
    }
    files
}

/// One run's cgroup.
#[derive(Debug)]
pub(crate) struct Leaf {
    dir: PathBuf,
    /// The directory, open (read-only, so its extended attribute can be
    /// set through it) while a run has the leaf: for `clone3`'s
    /// `CLONE_INTO_CGROUP`, and the leaf's files are opened relative to it
    /// (a path walk of six kernfs components per file was a tenth of the
    /// daemon's time per run in `rea-bench governed`). Closed while the
    /// leaf waits in its pool: every descriptor the daemon holds is copied
    /// into each child it creates and closed there again, and 128 of them
    /// (two per leaf of 64 waiting) made a spawn measurably slower.
    dir_fd: std::sync::Mutex<Option<OwnedFd>>,
    controllers: Arc<[String]>,
    /// `cgroup.events`, open and registered with the runtime for
    /// `EPOLLPRI`, which the kernel raises when the file changes; reading it
    /// (from offset 0) re-arms that. An inotify watch would tell the same,
    /// but closing an inotify instance waits for an SRCU grace period
    /// (measured: about 10 ms, on the loop thread, per run); closing a file
    /// costs nothing. Registered only once someone waits for a change (most
    /// runs are empty when their leader is reaped, and need none), and
    /// closed with the directory.
    events: std::sync::Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    /// Set if `cgroup.events` could not be registered: emptiness is then
    /// looked at every 25 ms.
    unwatchable: AtomicBool,
    /// The pool it goes back to once empty; None: removed after its run.
    pool: Option<Arc<Pool>>,
    /// A pooled leaf's keeper (see the module documentation), if it has
    /// one.
    keeper: std::sync::Mutex<Option<Kept>>,
    /// The run in it now: which one (a count of runs, so a handle kept by
    /// an earlier run reads nothing of a later one's), and `cpu.stat`'s
    /// user and system microseconds when it took the leaf.
    turn: std::sync::Mutex<Turn>,
    /// Set once `cgroup.kill` was written: such a leaf is never reused.
    /// Linux 6.18 here (and any kernel with the `kill_seq` of 6.14's fork
    /// race fix that compares the destination cgroup's count with the
    /// parent's own) kills every process later created in a cgroup that
    /// was once killed, at birth, when it is created there by `clone3`
    /// with `CLONE_INTO_CGROUP`: every later run in the leaf would have
    /// died of SIGKILL before its first instruction (found, and measured
    /// with the `signal_generate` tracepoint, in stop 32). Also set where
    /// the leaf may have been killed from outside ([`Leaf::retire`]); a
    /// waiting leaf killed from outside is found by its dead keeper at the
    /// next take, or, without a keeper, by the next child dying before its
    /// first instruction, which `spawn` then creates again in a new leaf.
    killed: AtomicBool,
    removed: AtomicBool,
}

/// See [`Leaf::turn`].
#[derive(Debug, Default, Clone, Copy)]
struct Turn {
    run: u64,
    user_usec: u64,
    system_usec: u64,
    /// While the leaf waits in its pool: `cpu.stat` as read at the end of
    /// its last run, once it was empty (nothing can run in an empty leaf,
    /// so it is the next run's start), or zero for a new leaf; saves a
    /// read per run.
    idle_base: Option<(u64, u64)>,
}

impl Leaf {
    /// The leaf for a run: one of its tenant's pool where the spec has a
    /// pool and the run's figures can be told apart in a reused leaf (no
    /// memory, io or pids controller, no limit of its own), else a new one
    /// named after it ([`Leaf::create`]). A pooled leaf names `run` in its
    /// `user.rea.run` before it is returned, so before any child is in it.
    pub(crate) fn take(spec: &CgroupSpec, limits: &Limits) -> Result<Arc<Leaf>, String> {
        let reusable = !spec
            .controllers
            .iter()
            .any(|c| matches!(c.as_str(), "memory" | "io" | "pids"))
            && limit_files(limits).is_empty();
        if let Some(pool) = spec
            .pool
            .as_ref()
            .filter(|p| reusable && p.usable.load(Ordering::Relaxed))
        {
            if !plain_name(&spec.name) {
                return Err(format!("{:?} cannot name a cgroup", spec.name));
            }
            loop {
                let Some(leaf) = pool.idle().pop() else {
                    break;
                };
                // A leaf whose keeper died while it waited was killed
                // from outside (an administrator's `cgroup.kill` of the
                // tenant, or a root job's), which poisons it (see
                // `Leaf::killed`); one that cannot be read any more was
                // removed from outside. Either is dropped, and the next
                // one tried.
                if !leaf.keeper_died() && leaf.begin(&spec.name).is_ok() {
                    return Ok(leaf);
                }
                leaf.remove();
            }
            let leaf = Arc::new(Leaf::make(
                &spec.parent,
                &pool.fresh_name(),
                spec.controllers.clone(),
                limits,
                Some(pool.clone()),
            )?);
            if leaf.keep() {
                // Its keeper's first steps are not the run's CPU.
                leaf.turn().idle_base = None;
            }
            match leaf.begin(&spec.name) {
                Ok(()) => return Ok(leaf),
                Err(e) => {
                    leaf.remove();
                    pool.usable.store(false, Ordering::Relaxed);
                    tracing::warn!(
                        "run cgroups are not reused: {e}; each run gets a new one, named after it"
                    );
                }
            }
        }
        Leaf::create(spec, limits).map(Arc::new)
    }

    /// Creates the leaf `spec.name` with its limits. A limit whose
    /// controller the leaf lacks is skipped (the daemon said so when it
    /// loaded the job); one the kernel refuses fails the spawn.
    pub(crate) fn create(spec: &CgroupSpec, limits: &Limits) -> Result<Leaf, String> {
        if !plain_name(&spec.name) {
            return Err(format!("{:?} cannot name a cgroup", spec.name));
        }
        Leaf::make(
            &spec.parent,
            &spec.name,
            spec.controllers.clone(),
            limits,
            None,
        )
    }

    fn make(
        parent: &Arc<Path>,
        name: &str,
        controllers: Arc<[String]>,
        limits: &Limits,
        pool: Option<Arc<Pool>>,
    ) -> Result<Leaf, String> {
        let dir = parent.join(name);
        let mut made = std::fs::create_dir(&dir);
        if made
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
        {
            // The tenant's directory (or rea's) went away (a daemon sharing
            // it removed it, empty, as it stopped): made again, with the
            // controllers.
            for dir in [parent.parent(), Some(&**parent)].into_iter().flatten() {
                if make_dir(dir).is_ok() {
                    enable(dir);
                }
            }
            made = std::fs::create_dir(&dir);
        }
        made.map_err(|e| format!("cannot create the run's cgroup {}: {e}", dir.display()))?;
        let dir_fd = open(
            &dir,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        );
        let dir_fd = match dir_fd {
            Ok(fd) => fd,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(format!("cannot open {}: {e}", dir.display()));
            }
        };
        // From here on, dropping the leaf removes the directory.
        let leaf = Leaf {
            dir_fd: std::sync::Mutex::new(Some(dir_fd)),
            controllers,
            dir,
            events: std::sync::Mutex::new(None),
            unwatchable: AtomicBool::new(false),
            pool,
            keeper: std::sync::Mutex::new(None),
            killed: AtomicBool::new(false),
            turn: std::sync::Mutex::new(Turn {
                idle_base: Some((0, 0)),
                ..Turn::default()
            }),
            removed: AtomicBool::new(false),
        };
        for (_, file, value) in limit_files(limits) {
            // Without O_CREAT: a file the cgroup lacks (its controller is
            // not enabled) is ENOENT, not EACCES.
            let written = leaf
                .open_file(file, rustix::fs::OFlags::WRONLY)
                .and_then(|fd| Ok(rustix::io::write(&fd, value.as_bytes())?))
                .and_then(|n| {
                    if n == value.len() {
                        Ok(())
                    } else {
                        Err(io::Error::from(io::ErrorKind::WriteZero))
                    }
                });
            match written {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot set {file} to {value}: {e}")),
            }
        }
        Ok(leaf)
    }

    fn dir_fd(&self) -> std::sync::MutexGuard<'_, Option<OwnedFd>> {
        self.dir_fd
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keeper(&self) -> std::sync::MutexGuard<'_, Option<Kept>> {
        self.keeper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The keeper's pid while it keeps the leaf.
    fn keeper_pid(&self) -> Option<u32> {
        self.keeper().as_ref().and_then(|k| k.keeper.keeping())
    }

    /// Whether the keeper, which nobody here killed, is gone (reaped now).
    fn keeper_died(&self) -> bool {
        self.keeper()
            .as_mut()
            .is_some_and(|k| k.keeper.keeping().is_some() && k.keeper.exited())
    }

    /// Gives a pooled leaf a keeper if it has none keeping it (reaping one
    /// that was killed, once it is gone), within its tenant's share
    /// ([`Pool::keeper`]). Its directory must be open. Returns whether a
    /// new one was started.
    fn keep(&self) -> bool {
        let mut keeper = self.keeper();
        if let Some(k) = keeper.as_mut() {
            // One that is gone has just been reaped (a root job can kill
            // it). One that was killed and is not gone yet is reaped on the
            // remover's thread, and the leaf waits without a keeper until
            // its next run ends, rather than have the next run's end wait
            // on a keeper that is still leaving it.
            if !k.keeper.exited() {
                if k.keeper.keeping().is_none() {
                    removals::later(None, keeper.take());
                }
                return false;
            }
            *keeper = None;
        }
        if let (Some(pool), Some(dir)) = (&self.pool, self.dir_fd().as_ref()) {
            *keeper = pool.keeper(dir.as_fd());
        }
        keeper.is_some()
    }

    /// The run's leader died of a SIGKILL the run's supervisor did not send
    /// through this leaf (the OOM killer, a root job's or an operator's
    /// `cgroup.kill`): the leaf may have been killed, and is not reused.
    pub(crate) fn retire(&self) {
        self.killed.store(true, Ordering::Relaxed);
    }

    /// Kills the keeper: from now on `cgroup.events` tells whether the run
    /// left processes behind.
    fn release(&self) {
        if let Some(k) = self.keeper().as_mut() {
            k.keeper.kill();
        }
    }

    /// Whether the leaf holds a process other than its keeper (`pid`).
    fn others_than(&self, pid: u32) -> Option<bool> {
        let fd = self
            .open_file("cgroup.procs", rustix::fs::OFlags::RDONLY)
            .ok()?;
        let mut buf = [0u8; 512];
        loop {
            let n = rustix::io::read(&fd, &mut buf).ok()?;
            if n == 0 {
                return Some(false);
            }
            let text = std::str::from_utf8(buf.get(..n)?).ok()?;
            // A pid is at most 7 digits: a read of 512 bytes may split one,
            // but never one equal to the keeper's into a false match of
            // another: any line that is not exactly the keeper's counts.
            if text
                .split('\n')
                .any(|l| !l.is_empty() && l.parse::<u32>().ok() != Some(pid))
            {
                return Some(true);
            }
        }
    }

    fn events(&self) -> std::sync::MutexGuard<'_, Option<Arc<AsyncFd<OwnedFd>>>> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A file of the leaf, opened relative to its directory while that is
    /// open, else by its path.
    fn open_file(&self, file: &str, flags: rustix::fs::OFlags) -> io::Result<OwnedFd> {
        match &*self.dir_fd() {
            Some(dir) => open_at(dir, file, flags),
            None => open(&self.dir.join(file), flags),
        }
    }

    /// Closes the leaf's descriptors (it waits in its pool, or goes).
    fn close(&self) {
        self.events().take();
        self.dir_fd().take();
    }

    /// A pooled leaf's next run: `run` written in `user.rea.run` (so a
    /// daemon started after this one is killed finds the run's processes
    /// here), and the CPU its earlier runs used, to be taken off this one's.
    fn begin(&self, run: &str) -> Result<(), String> {
        {
            let mut dir_fd = self.dir_fd();
            if dir_fd.is_none() {
                *dir_fd = Some(
                    open(
                        &self.dir,
                        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
                    )
                    .map_err(|e| format!("cannot open {}: {e}", self.dir.display()))?,
                );
            }
        }
        let known = self.turn().idle_base.take();
        let (user_usec, system_usec) = match known {
            Some(base) => base,
            None => self
                .cpu_usec()
                .ok_or_else(|| format!("cannot read {}/cpu.stat", self.dir.display()))?,
        };
        let dir_fd = self.dir_fd();
        let dir = dir_fd
            .as_ref()
            .ok_or_else(|| format!("{} is not open", self.dir.display()))?;
        rustix::fs::fsetxattr(
            dir,
            RUN_XATTR,
            run.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| format!("cannot set {RUN_XATTR} on {}: {e}", self.dir.display()))?;
        drop(dir_fd);
        let mut turn = self.turn();
        *turn = Turn {
            run: turn.run + 1,
            user_usec,
            system_usec,
            idle_base: None,
        };
        Ok(())
    }

    fn turn(&self) -> std::sync::MutexGuard<'_, Turn> {
        self.turn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Which run of the leaf is the current one (see [`Leaf::usage_of`]).
    pub(crate) fn current(&self) -> u64 {
        self.turn().run
    }

    /// `cpu.stat`'s `user_usec` and `system_usec` (all the leaf's runs).
    fn cpu_usec(&self) -> Option<(u64, u64)> {
        let stat = self.read("cpu.stat")?;
        Some((keyed(&stat, "user_usec")?, keyed(&stat, "system_usec")?))
    }

    /// What the clone needs to put the child in the leaf: the directory
    /// (the child is created in it, or writes "0" to its `cgroup.procs`);
    /// -1 if it is not open (then the clone fails, as for a leaf that
    /// cannot be entered). Open from [`Leaf::take`] until the run is over.
    pub(crate) fn fds(&self) -> crate::process::CgroupFds {
        crate::process::CgroupFds {
            dir: self.dir_fd().as_ref().map_or(-1, AsRawFd::as_raw_fd),
        }
    }

    /// Whether any process is in the cgroup; `None` if that cannot be read.
    /// Reads the watched descriptor if there is one, which re-arms its
    /// change notification.
    pub(crate) fn populated(&self) -> Option<bool> {
        if let Some(pid) = self.keeper_pid() {
            if self.others_than(pid) == Some(false) {
                return Some(false);
            }
            // Somebody outlived the run's leader: the keeper goes, so the
            // leaf empties (and `cgroup.events` says so) when they do.
            self.release();
        }
        let Some(events) = self.events().clone() else {
            return self.read("cgroup.events").map(|t| populated(&t));
        };
        let mut buf = [0u8; 256];
        let n = rustix::io::pread(events.get_ref().as_fd(), &mut buf, 0).ok()?;
        let text = std::str::from_utf8(buf.get(..n)?).ok()?;
        Some(populated(text))
    }

    /// Returns when `cgroup.events` may have changed (`EPOLLPRI`), or after
    /// a short pause if it cannot be watched. The caller then looks at the
    /// file ([`Leaf::populated`]). The first call registers the watch and
    /// returns at once: a change made before it would not wake it.
    pub(crate) async fn changed(&self) {
        let watched = self.events().clone();
        let events = match watched {
            Some(events) => events,
            None if self.unwatchable.load(Ordering::Relaxed) => {
                tokio::time::sleep(Duration::from_millis(25)).await;
                return;
            }
            None => {
                let registered = self
                    .open_file("cgroup.events", rustix::fs::OFlags::RDONLY)
                    .and_then(watch_events);
                match registered {
                    Ok(events) => *self.events() = Some(Arc::new(events)),
                    Err(_) => self.unwatchable.store(true, Ordering::Relaxed),
                }
                return;
            }
        };
        match events.ready(Interest::PRIORITY).await {
            Ok(mut guard) => guard.clear_ready(),
            Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }

    /// Sends `signal` to every process in the cgroup. A pid is read from
    /// `cgroup.procs` and signalled right after; it is a member's until
    /// its parent reaps it, so the window for a recycled pid is the one
    /// every cgroup manager accepts (systemd's too).
    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        let mut pids = procs(&self.dir);
        if let Some(keeper) = self.keeper_pid() {
            pids.retain(|p| *p != keeper);
        }
        signal_pids(&pids, signal);
    }

    /// SIGKILL to the whole cgroup at once (`cgroup.kill`), the keeper too.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        kill_dir(&self.dir);
        if let Some(k) = self.keeper().as_mut() {
            k.keeper.mark_killed();
        }
    }

    /// A small file of the leaf (at most 4 KiB is read: every file read
    /// here is a few lines).
    fn read(&self, file: &str) -> Option<String> {
        let fd = self.open_file(file, rustix::fs::OFlags::RDONLY).ok()?;
        let mut buf = [0u8; 4096];
        let n = rustix::io::read(&fd, &mut buf).ok()?;
        Some(String::from_utf8_lossy(buf.get(..n)?).into_owned())
    }

    /// Whether the leaf has `controller` (only then are its files read).
    fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// What the cgroup measured for run `run` of the leaf ([`Leaf::current`]
    /// when it started); nothing if the leaf has moved on to a later run.
    pub(crate) fn usage_of(&self, run: u64, usage: &mut Usage) {
        if self.current() == run {
            self.usage(usage);
        }
    }

    /// What the cgroup measured for its current run; returns `cpu.stat`'s
    /// own figures (see [`Turn::idle_base`]).
    pub(crate) fn usage(&self, usage: &mut Usage) -> Option<(u64, u64)> {
        let read =
            |controller: &str, file: &str| self.has(controller).then(|| self.read(file)).flatten();
        // cpu.stat is there without the cpu controller (usage only).
        let cpu = self.cpu_usec();
        if let Some((user, system)) = cpu {
            let base = *self.turn();
            usage.user_ms = user.saturating_sub(base.user_usec) / 1000;
            usage.sys_ms = system.saturating_sub(base.system_usec) / 1000;
            usage.from_cgroup = true;
        }
        usage.memory_peak_kb = read("memory", "memory.peak")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map(|b| b / 1024);
        usage.tasks_peak = read("pids", "pids.peak").and_then(|t| t.trim().parse().ok());
        if let Some(io) = read("io", "io.stat") {
            let (r, w) = io_bytes(&io);
            usage.io_read_bytes = Some(r);
            usage.io_write_bytes = Some(w);
        }
        if let Some(events) = read("memory", "memory.events") {
            usage.oom_killed = oom_killed(&events);
        }
        cpu
    }

    /// Removes the (empty) cgroup: at once if the kernel lets it, else on
    /// the remover's thread ([`removals`]), which tries again a few times
    /// as the kernel may still be tearing down the last exited task. Those
    /// tries sleep, which the loop's thread must not (it did: up to 15 ms
    /// per run, under load).
    pub(crate) fn remove(&self) {
        let keeper = self.keeper().take();
        self.close();
        match keeper {
            // The leaf empties once its keeper is gone, which the loop does
            // not wait for.
            Some(mut kept) => {
                kept.keeper.kill();
                removals::later(Some(self.dir.clone()), Some(kept));
            }
            None => match std::fs::remove_dir(&self.dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(_) => removals::later(Some(self.dir.clone()), None),
            },
        }
        self.removed.store(true, Ordering::Relaxed);
    }

    /// The run is over: its figures, read into `usage`; then a pooled leaf
    /// seen `empty` (by its supervisor, just before) goes back to its pool,
    /// any other is removed ([`Leaf::remove`]).
    pub(crate) fn finish(self: Arc<Self>, usage: &mut Usage, empty: bool) {
        let cpu = self.usage(usage);
        let reusable = empty && !self.killed.load(Ordering::Relaxed);
        if let (Some(pool), true, Some(cpu)) = (&self.pool, reusable, cpu) {
            // A keeper started now uses a little CPU in the leaf as it
            // settles: the next run's base is then read when it takes it.
            let fresh = self.keep();
            self.turn().idle_base = (!fresh).then_some(cpu);
            self.close();
            match pool.put(self.clone()) {
                Ok(()) => return,
                Err(leaf) => drop(leaf),
            }
        }
        self.remove();
    }

    /// Keeps the cgroup (and what is left in it) until it empties, then
    /// removes it; a task of its own, watching `cgroup.events`. For the
    /// leftovers of `kill_stragglers = false`.
    pub(crate) fn remove_when_empty(self: Arc<Self>) {
        tokio::spawn(async move {
            while self.populated() == Some(true) {
                self.changed().await;
            }
            self.remove();
        });
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        if self.removed.load(Ordering::Relaxed) {
            return;
        }
        // A keeper is ended (and the leaf removed after it) on the
        // remover's thread, never waited for here: this can be the loop's
        // thread (a spawn that failed after taking the leaf).
        if let Some(mut kept) = self.keeper().take() {
            kept.keeper.kill();
            removals::later(Some(self.dir.clone()), Some(kept));
            return;
        }
        // Refused while processes are in it: those are left alone.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Run cgroups whose first rmdir was refused (`EBUSY`: a task that has
/// exited is still being torn down), removed by one thread of their own.
/// The queue is bounded; past it, or without a thread, the caller removes
/// inline as before. [`Tree::tidy`] waits for it before removing the
/// tenants' directories.
mod removals {
    use std::path::PathBuf;

    use super::Kept;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::{sync_channel, SyncSender};
    use std::sync::{Mutex, OnceLock};
    use std::time::{Duration, Instant};

    /// Directories waiting at most (a run's leaf is about 100 bytes here).
    const QUEUE: usize = 4096;

    /// A directory, and the keeper to end (and reap) before it can go; or
    /// a keeper alone, killed, to reap.
    type Removal = (Option<PathBuf>, Option<Kept>);

    static SENDER: OnceLock<Option<Mutex<SyncSender<Removal>>>> = OnceLock::new();
    /// Handed over and not yet done.
    static PENDING: AtomicUsize = AtomicUsize::new(0);

    fn sender() -> Option<&'static Mutex<SyncSender<Removal>>> {
        SENDER
            .get_or_init(|| {
                let (tx, rx) = sync_channel::<Removal>(QUEUE);
                std::thread::Builder::new()
                    .name("rea-cgroup-rm".into())
                    .spawn(move || {
                        for removal in rx {
                            remove(removal);
                            PENDING.fetch_sub(1, Ordering::Release);
                        }
                    })
                    .ok()
                    .map(|_| Mutex::new(tx))
            })
            .as_ref()
    }

    /// Ends the keeper (killed already), then removes the directory.
    fn remove((dir, keeper): Removal) {
        drop(keeper);
        if let Some(dir) = dir {
            super::remove_dir(&dir);
        }
    }

    /// Removes `dir` (after ending `keeper`) on the remover's thread, or
    /// here if it cannot take it.
    pub(super) fn later(dir: Option<PathBuf>, keeper: Option<Kept>) {
        if let Some(tx) = sender() {
            PENDING.fetch_add(1, Ordering::Acquire);
            let sent = tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .try_send((dir, keeper));
            match sent {
                Ok(()) => {}
                Err(e) => {
                    PENDING.fetch_sub(1, Ordering::Release);
                    let (std::sync::mpsc::TrySendError::Full(removal)
                    | std::sync::mpsc::TrySendError::Disconnected(removal)) = e;
                    remove(removal);
                }
            }
        } else {
            remove((dir, keeper));
        }
    }

    /// Waits (at most `limit`) until every directory handed over is done.
    pub(super) fn flush(limit: Duration) {
        let deadline = Instant::now() + limit;
        while PENDING.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn remove_dir(dir: &Path) -> bool {
    for attempt in 0..5 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
            Err(_) if attempt < 4 => std::thread::sleep(Duration::from_millis(1 << attempt)),
            Err(_) => {}
        }
    }
    false
}

fn open(path: &Path, flags: rustix::fs::OFlags) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        flags | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// A file of the cgroup open as `dir`.
fn open_at(dir: &OwnedFd, file: &str, flags: rustix::fs::OFlags) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        file,
        flags | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// `cgroup.events`, open, registered with the runtime for `EPOLLPRI`.
fn watch_events(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd owns the OwnedFd, which stays open (and the same
    // file) until the AsyncFd, and with it the registration, is dropped.
    unsafe { AsyncFd::register_with_interest(fd, Interest::PRIORITY) }.map_err(|e| e.into_parts().1)
}

/// `name value` from a flat-keyed cgroup file.
/// Whether a leaf's `memory.events` says the out-of-memory killer killed
/// one of its processes: `oom_kill` (a process chosen; counted in the
/// victim's cgroup and its ancestors, so a kill forced by the tenant's
/// `memory.max` counts in the run's leaf too) or `oom_group_kill` (the
/// whole group, `memory.oom.group`). `oom` alone (the limit was reached,
/// the kernel reclaimed or the allocation failed, nobody was killed) and
/// `max` (the limit was hit) are not.
pub(crate) fn oom_killed(events: &str) -> bool {
    ["oom_kill", "oom_group_kill"]
        .iter()
        .any(|k| keyed(events, k).is_some_and(|n| n > 0))
}

fn keyed(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next()? == name).then(|| parts.next()?.parse().ok())?
    })
}

/// Bytes read and written over every device of `io.stat`
/// (`8:0 rbytes=1 wbytes=2 rios=…`).
fn io_bytes(stat: &str) -> (u64, u64) {
    let mut read = 0u64;
    let mut written = 0u64;
    for field in stat.split_whitespace() {
        if let Some(v) = field.strip_prefix("rbytes=") {
            read = read.saturating_add(v.parse().unwrap_or(0));
        } else if let Some(v) = field.strip_prefix("wbytes=") {
            written = written.saturating_add(v.parse().unwrap_or(0));
        }
    }
    (read, written)
}

#[cfg(test)]
pub(crate) mod tests;
