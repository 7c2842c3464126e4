//! The daemon's open-file limit and the one its jobs get back.

/// Raises the daemon's soft limit on open files to its hard limit: client
/// connections, history files and every run's pipes and pidfds must not run
/// out of descriptors at 1,024 (systemd's default soft limit).
/// Jobs get the original limit back ([`job_open_files`]), as systemd
/// recommends: programs that still use select(2) break above 1,024.
pub fn raise_open_files() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let original = getrlimit(Resource::Nofile);
    if let Some(soft) = original.current {
        let _ = JOB_OPEN_FILES.set(soft);
    }
    // "Unlimited" is not a value the kernel takes for open files (it caps at
    // fs.nr_open, 1,048,576 by default).
    let hard = original.maximum.unwrap_or(1 << 20);
    if original.current.is_some_and(|soft| soft < hard) {
        let raised = Rlimit {
            current: Some(hard),
            maximum: original.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// The soft open-file limit the daemon started with (unset: unlimited, or
/// [`raise_open_files`] was not called).
static JOB_OPEN_FILES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// The soft open-file limit a job starts with: the daemon's before
/// [`raise_open_files`] raised it; `None` keeps the daemon's.
pub fn job_open_files() -> Option<u64> {
    JOB_OPEN_FILES.get().copied()
}
