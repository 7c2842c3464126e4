//! The job files the daemon and the commands read: the main file and the
//! files beside it (`jobs.d/*.toml`, and for a root daemon the users'
//! `users/NAME.toml`; see `rea_config::FileSet`). Each file is read,
//! validated and checked against this machine on its own: a bad main file
//! changes nothing, a bad drop-in or user's file is refused alone and keeps
//! its last good version (if it had one) while the other files apply.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rea_config::{Config, Diagnostic, FileKind, FileSet, LoadOptions};

/// The system's main job file (root's default).
pub const SYSTEM_MAIN: &str = "/etc/rea/jobs.toml";

/// The default main job file: `./jobs.toml` if there is one, else for
/// root the system's (`/etc/rea/jobs.toml`: a daemon started by systemd,
/// or `cd / && rea list`, finds it), else `./jobs.toml`.
pub fn default_main() -> PathBuf {
    let here = PathBuf::from("jobs.toml");
    if rea_host::user::is_root() && std::fs::symlink_metadata(&here).is_err() {
        PathBuf::from(SYSTEM_MAIN)
    } else {
        here
    }
}

/// How much of this machine a load checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostChecks {
    /// A job whose user is missing (or that mails without sendmail) is an
    /// error, as the daemon must see it.
    Strict,
    /// Only warnings: for commands that just read the schedule.
    Lenient,
    /// Not looked at (`rea check --no-host-checks`, on a CI runner without
    /// the production users).
    Off,
}

impl HostChecks {
    fn apply(self, cfg: Config) -> Result<Config, Vec<Diagnostic>> {
        match self {
            HostChecks::Strict => crate::host_checks::with_host_checks(cfg),
            HostChecks::Lenient => crate::host_checks::with_lenient_host_checks(cfg),
            HostChecks::Off => Ok(cfg),
        }
    }
}

/// A load of the whole set.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration to put in force: the main file and every part
    /// that is good (or its last good version).
    pub config: Config,
    /// Parts refused this time, with why (each keeps its last good
    /// version in `config`, if it had one).
    pub refused: Vec<(PathBuf, Vec<Diagnostic>)>,
}

/// The set of job files, with the last good version of each part.
#[derive(Debug, Clone)]
pub struct JobFiles {
    set: FileSet,
    options: LoadOptions,
    checks: HostChecks,
    /// The main file's last good configuration.
    main: Option<Config>,
    /// Each part's last good configuration.
    parts: BTreeMap<PathBuf, Config>,
    /// What was refused at the last load (the banner's content until the
    /// files are good again).
    refused: Vec<(PathBuf, Vec<Diagnostic>)>,
}

impl JobFiles {
    /// `users`: read the users' files (a root daemon).
    pub fn new(main: &Path, options: LoadOptions, users: bool) -> JobFiles {
        JobFiles {
            set: FileSet::of(main, users),
            options,
            checks: HostChecks::Strict,
            main: None,
            parts: BTreeMap::new(),
            refused: Vec::new(),
        }
    }

    /// How much of this machine the loads check (strict by default).
    pub fn host_checks(mut self, checks: HostChecks) -> JobFiles {
        self.checks = checks;
        self
    }

    pub fn set(&self) -> &FileSet {
        &self.set
    }

    /// What the last load refused, file by file (still in force: those
    /// files' last good jobs, or none).
    pub fn refused(&self) -> &[(PathBuf, Vec<Diagnostic>)] {
        &self.refused
    }

    /// Reads every file (`force`: parse even unchanged ones). `Ok(None)`:
    /// nothing changed since the last load. `Err`: the main file is
    /// invalid; nothing is applied.
    pub fn load(&mut self, force: bool) -> Result<Option<Loaded>, Vec<Diagnostic>> {
        let known = |c: &Option<Config>| {
            if force {
                None
            } else {
                c.as_ref().map(|c| c.digest)
            }
        };
        // The last good version of each file is passed along: its jobs that
        // did not change are reused instead of copied (see
        // `rea_config::load_if_changed`).
        let main = rea_config::load_if_changed(
            &self.set.main,
            self.options,
            known(&self.main),
            self.main.as_ref(),
        )
        .and_then(|c| c.map(|c| self.checks.apply(c)).transpose())?;
        let mut changed = main.is_some();
        if let Some(main) = main {
            self.main = Some(main);
        }
        let Some(main) = self.main.clone() else {
            return Ok(None);
        };
        let present = self.set.parts();
        let mut refused = Vec::new();
        let mut good: BTreeMap<PathBuf, Config> = BTreeMap::new();
        for (path, kind) in &present {
            let last = self.parts.get(path);
            let known = if force { None } else { last.map(|c| c.digest) };
            let loaded = check_user_file(path, kind)
                .and_then(|()| {
                    rea_config::load_as_if_changed(path, kind, self.options, known, last)
                })
                .and_then(|c| c.map(|c| self.checks.apply(c)).transpose());
            match loaded {
                Ok(Some(cfg)) => {
                    changed = true;
                    good.insert(path.clone(), cfg);
                }
                Ok(None) => {
                    if let Some(cfg) = last {
                        good.insert(path.clone(), cfg.clone());
                    }
                }
                Err(diags) => {
                    // Refused again for the same reasons: nothing new.
                    changed |= !self.refused.iter().any(|(p, d)| p == path && *d == diags);
                    refused.push((path.clone(), diags));
                    if let Some(cfg) = last {
                        good.insert(path.clone(), cfg.clone());
                    }
                }
            }
        }
        // A part that is gone takes its jobs with it.
        if self
            .parts
            .keys()
            .any(|p| !good.contains_key(p) && !present.iter().any(|(q, _)| q == p))
        {
            changed = true;
        }
        let had_refusals = !self.refused.is_empty();
        if !changed && !had_refusals {
            return Ok(None);
        }
        let (config, clashes) = rea_config::combine(main, good.values().cloned().collect());
        for (path, _) in &clashes {
            good.remove(path);
        }
        refused.extend(clashes);
        self.parts = good;
        // Refusals that went away (a bad file fixed or deleted) are a
        // change: the error they raised must clear.
        changed |= self
            .refused
            .iter()
            .any(|(p, _)| !refused.iter().any(|(q, _)| q == p));
        self.refused = refused.clone();
        if !changed {
            return Ok(None);
        }
        Ok(Some(Loaded { config, refused }))
    }
}

/// A job file's text for editing: empty when there is none yet; a file
/// that cannot be read (or is not a regular file, or not text) is an error,
/// never an empty buffer a save would write over it. Read as the daemon
/// reads job files ([`rea_config::read_file`]: a FIFO cannot hang it).
pub fn read_for_edit(path: &Path) -> Result<String, String> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        Ok(_) => {}
    }
    let bytes = rea_config::read_file(path).map_err(|d| {
        d.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

/// Writes `bytes` over the job file `path` atomically: a temporary file
/// beside it (created new, 0600, never through a symlink), given `owner`
/// and `mode`, synced, renamed over, and the directory synced. `rea edit`
/// keeps the original's owner and mode; the daemon writes users' files as
/// root's, 0600.
pub fn install(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.rea-tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)?;
    f.write_all(bytes)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
    }
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// A user's file must be named after a user of this machine: its jobs run
/// as them.
fn check_user_file(path: &Path, kind: &FileKind) -> Result<(), Vec<Diagnostic>> {
    let FileKind::User(name) = kind else {
        return Ok(());
    };
    let problem = if rea_core::job::name_problem(name).is_some() {
        Some(format!("{name:?} is not a user name"))
    } else {
        rea_host::user::user(name).err()
    };
    match problem {
        None => Ok(()),
        Some(why) => Err(vec![Diagnostic {
            file: path.display().to_string(),
            line: None,
            col: None,
            severity: rea_config::Severity::Error,
            message: format!("a user's job file is named after the user its jobs run as: {why}"),
            hint: Some("name it users/NAME.toml for an existing user NAME".into()),
        }]),
    }
}
