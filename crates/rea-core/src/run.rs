//! A run as plain data: what to execute ([`Program`]) and how it went
//! ([`Outcome`]). The executor in the `rea` program produces these from
//! real processes; the engine turns them into history records.

use chrono::{DateTime, Utc};

/// What to execute.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// `shell -c script`.
    Shell { shell: String, script: String },
    /// Executed directly, no shell (one-shot jobs).
    Argv(Vec<String>),
}

/// The child is running.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub pid: u32,
    pub at: DateTime<Utc>,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
}

/// Resource use of the run. Without a cgroup: the leader's rusage from
/// wait4 (its whole tree that was waited for). With one: CPU from the
/// cgroup's `cpu.stat` (every process the run ever had, escapees too), and
/// the figures below where the host's controllers give them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub max_rss_kb: u64,
    pub user_ms: u64,
    pub sys_ms: u64,
    /// The CPU figures are the run's cgroup's.
    pub from_cgroup: bool,
    /// `memory.peak` (memory controller, Linux 5.19).
    pub memory_peak_kb: Option<u64>,
    /// Bytes read and written, from `io.stat` (io controller).
    pub io_read_bytes: Option<u64>,
    pub io_write_bytes: Option<u64>,
    /// `pids.peak` (pids controller).
    pub tasks_peak: Option<u64>,
    /// The kernel's out-of-memory killer killed a process of the run
    /// (`oom_kill` in `memory.events`).
    pub oom_killed: bool,
}

/// Limits on a run, as plain data: what the job file asked for. The
/// cgroup ones need a delegated cgroup v2 controller; the process ones
/// (`nice`, `ionice`, rlimits) are set in the child before it executes the
/// command and work everywhere.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// `memory.max` in bytes.
    pub memory_max: Option<u64>,
    /// `memory.high` in bytes.
    pub memory_high: Option<u64>,
    /// `cpu.max` as a percentage of one CPU (200 = two CPUs).
    pub cpu_max_percent: Option<u32>,
    /// `cpu.weight`, 1–10000.
    pub cpu_weight: Option<u32>,
    /// `io.weight`, 1–10000.
    pub io_weight: Option<u32>,
    /// `pids.max`.
    pub tasks_max: Option<u64>,
    /// The scheduling priority, -20–19.
    pub nice: Option<i32>,
    pub ionice: Option<IoNice>,
    /// RLIMIT_NOFILE, RLIMIT_NPROC, RLIMIT_CORE, RLIMIT_STACK, RLIMIT_AS:
    /// soft and hard limit both.
    pub nofile: Option<u64>,
    pub nproc: Option<u64>,
    pub core: Option<u64>,
    pub stack: Option<u64>,
    pub address_space: Option<u64>,
    /// The rlimits were asked by a user's own file: they are set after the
    /// switch to her uid, where the kernel refuses a hard limit above the
    /// one the daemon passes on (set as root, they could raise it). Root's
    /// jobs, even those run as a user, set them as root.
    pub rlimits_as_user: bool,
}

/// An IO scheduling class and level, as ionice(1) takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoNice {
    Realtime(u8),
    BestEffort(u8),
    Idle,
}

impl Limits {
    /// No limit at all.
    pub const NONE: Limits = Limits {
        memory_max: None,
        memory_high: None,
        cpu_max_percent: None,
        cpu_weight: None,
        io_weight: None,
        tasks_max: None,
        nice: None,
        ionice: None,
        nofile: None,
        nproc: None,
        core: None,
        stack: None,
        address_space: None,
        rlimits_as_user: false,
    };

    /// The cgroup controllers these limits need, each with the limits that
    /// need it (`("memory", ["memory_max"])`).
    pub fn controllers(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let wants: [(&str, &str, bool); 6] = [
            ("memory", "memory_max", self.memory_max.is_some()),
            ("memory", "memory_high", self.memory_high.is_some()),
            ("cpu", "cpu_max", self.cpu_max_percent.is_some()),
            ("cpu", "cpu_weight", self.cpu_weight.is_some()),
            ("io", "io_weight", self.io_weight.is_some()),
            ("pids", "tasks_max", self.tasks_max.is_some()),
        ];
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for (controller, field, set) in wants {
            if !set {
                continue;
            }
            match out.iter_mut().find(|(c, _)| *c == controller) {
                Some((_, fields)) => fields.push(field),
                None => out.push((controller, vec![field])),
            }
        }
        out
    }
}

/// What root's main file sets for a tenant's whole subtree
/// (`[tenants.NAME]`, `[tenants."*"]`): the cgroup limits of the tenant's
/// directory (`rea/user-NAME`, which every run of hers is a leaf of: her
/// runs together get at most these), and caps on each of her runs that
/// need no cgroup. A user's own file can set none of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantLimits {
    /// The cgroup fields only (`memory_max` … `tasks_max`); the process
    /// fields of [`Limits`] are not used here.
    pub cgroup: Limits,
    /// The lowest nice value her runs get: a job asking for less (or for
    /// nothing) runs at this.
    pub min_nice: Option<i32>,
}

impl TenantLimits {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == TenantLimits::default()
    }

    /// `self`'s fields, each falling back to `other`'s where unset (a
    /// tenant's own table over `[tenants."*"]`).
    pub fn or(self, other: TenantLimits) -> TenantLimits {
        let (a, b) = (self.cgroup, other.cgroup);
        TenantLimits {
            cgroup: Limits {
                memory_max: a.memory_max.or(b.memory_max),
                memory_high: a.memory_high.or(b.memory_high),
                cpu_max_percent: a.cpu_max_percent.or(b.cpu_max_percent),
                cpu_weight: a.cpu_weight.or(b.cpu_weight),
                io_weight: a.io_weight.or(b.io_weight),
                tasks_max: a.tasks_max.or(b.tasks_max),
                ..Limits::NONE
            },
            min_nice: self.min_nice.or(other.min_nice),
        }
    }

    /// A run's limits under these caps: its nice raised to `min_nice`.
    pub fn cap(&self, mut run: Limits) -> Limits {
        if let Some(floor) = self.min_nice {
            run.nice = Some(run.nice.map_or(floor, |n| n.max(floor)));
        }
        run
    }
}

/// Every tenant's limits, as root's main file sets them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantPolicy {
    /// `[tenants."*"]`: each user's own subtree, unless her table says
    /// otherwise (each user gets these, not all users together).
    pub every_user: TenantLimits,
    /// `[tenants.NAME]`, by user name.
    pub users: std::collections::BTreeMap<String, TenantLimits>,
}

impl TenantPolicy {
    /// What applies to user `name`'s subtree and runs.
    pub fn for_user(&self, name: &str) -> TenantLimits {
        match self.users.get(name) {
            Some(own) => own.or(self.every_user),
            None => self.every_user,
        }
    }

    /// A run's limits for `job`: its tenant's caps over them and, for a
    /// user's job, its rlimits set as her ([`Limits::rlimits_as_user`]).
    pub fn govern(&self, job: &str, run: Limits) -> Limits {
        let mut run = self.for_job(job).cap(run);
        run.rlimits_as_user = matches!(
            crate::tenant::Tenant::of(job),
            crate::tenant::Tenant::User(_)
        );
        run
    }

    /// What applies to the runs of the tenant owning `job` (a user's job
    /// is `NAME/job`; the system's have no limits of this kind).
    pub fn for_job(&self, job: &str) -> TenantLimits {
        match crate::tenant::Tenant::of(job) {
            crate::tenant::Tenant::User(u) => self.for_user(u),
            crate::tenant::Tenant::System => TenantLimits::default(),
        }
    }
}

/// Captured output: `text` holds the head, a `… N bytes omitted …` marker
/// when needed, and the tail; `total_bytes` is all the child wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub text: String,
    pub total_bytes: u64,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub started: Started,
    /// When the leader exited (stragglers may have been cleaned up after).
    pub ended: DateTime<Utc>,
    pub termination: Termination,
    /// The timeout fired (the group was terminated because of it).
    pub timed_out: bool,
    /// `RunHandle::terminate` or `RunHandle::kill` was called before the
    /// outcome was settled (replace, shutdown, kill).
    pub terminated: bool,
    pub output: Output,
    pub usage: Usage,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_table_overrides_the_star_field_by_field_and_floors_nice() {
        let mut policy = TenantPolicy::default();
        policy.every_user.cgroup.memory_max = Some(1 << 30);
        policy.every_user.cgroup.tasks_max = Some(256);
        policy.every_user.min_nice = Some(5);
        let mut alice = TenantLimits::default();
        alice.cgroup.memory_max = Some(4 << 30);
        alice.cgroup.cpu_max_percent = Some(200);
        policy.users.insert("alice".into(), alice);
        let a = policy.for_job("alice/backup");
        assert_eq!(a.cgroup.memory_max, Some(4 << 30));
        assert_eq!(a.cgroup.cpu_max_percent, Some(200));
        assert_eq!(a.cgroup.tasks_max, Some(256));
        assert_eq!(a.min_nice, Some(5));
        assert_eq!(policy.for_job("bob/x"), policy.every_user);
        assert!(policy.for_job("backup").is_empty(), "the system's");
        let mut job = Limits::NONE;
        assert_eq!(a.cap(job).nice, Some(5), "unset: the floor");
        job.nice = Some(-10);
        assert_eq!(a.cap(job).nice, Some(5), "below: raised");
        job.nice = Some(12);
        assert_eq!(a.cap(job).nice, Some(12), "above: kept");
        assert_eq!(TenantLimits::default().cap(job), job);
    }
}
