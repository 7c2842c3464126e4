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
            changed |= self.load_part(path, kind, force, &mut good, &mut refused);
        }
        // A part that is gone takes its jobs with it.
        if self
            .parts
            .keys()
            .any(|p| !good.contains_key(p) && !present.iter().any(|(q, _)| q == p))
        {
            changed = true;
        }
        self.put_together(main, good, refused, changed)
    }

    /// Reads only the parts `paths` (drop-ins or users' files, as the
    /// watcher names them: absolute), keeping the main file and every other
    /// part as last loaded: a user's edit reads her file and nothing else
    /// (but the parts refused at the last load, which are read again: one
    /// left out for a name it shared with a part that changed may now
    /// fit). `Ok(None)`: nothing changed. Before a first load of the main
    /// file, a whole load.
    pub fn load_parts(
        &mut self,
        paths: &[PathBuf],
        force: bool,
    ) -> Result<Option<Loaded>, Vec<Diagnostic>> {
        let Some(main) = self.main.clone() else {
            return self.load(force);
        };
        let mut todo: Vec<(PathBuf, FileKind)> = Vec::new();
        let again = self.refused.iter().map(|(p, _)| p);
        for (path, kind) in paths.iter().chain(again).filter_map(|p| self.part_of(p)) {
            if !todo.iter().any(|(p, _)| *p == path) {
                todo.push((path, kind));
            }
        }
        let mut good = self.parts.clone();
        let mut refused: Vec<(PathBuf, Vec<Diagnostic>)> = Vec::new();
        let mut changed = false;
        for (path, kind) in &todo {
            good.remove(path);
            if std::fs::symlink_metadata(path).is_ok() {
                changed |= self.load_part(path, kind, force, &mut good, &mut refused);
            } else {
                // Gone: its jobs with it.
                changed |= self.parts.contains_key(path);
            }
        }
        self.put_together(main, good, refused, changed)
    }

    /// The part of this set that the path `changed` (absolute, as the
    /// watcher reports it) names, spelt as the set spells it.
    fn part_of(&self, changed: &Path) -> Option<(PathBuf, FileKind)> {
        let name = changed.file_name()?;
        let dir = changed.parent()?;
        let same = |d: &Path| d == dir || std::path::absolute(d).is_ok_and(|a| a == dir);
        let path = if same(&self.set.dropins) {
            self.set.dropins.join(name)
        } else {
            self.set.users.as_deref().filter(|d| same(d))?.join(name)
        };
        let kind = self.set.kind_of(&path)?;
        Some((path, kind))
    }

    /// How many jobs the part `path` (as the watcher names it) had at the
    /// last load.
    pub fn part_jobs(&self, changed: &Path) -> usize {
        self.part_of(changed)
            .and_then(|(p, _)| self.parts.get(&p))
            .map_or(0, |c| c.jobs.len())
    }

    /// Reads one part into `good` (or its last good version, with its
    /// refusal in `refused`). Whether anything changed.
    fn load_part(
        &self,
        path: &Path,
        kind: &FileKind,
        force: bool,
        good: &mut BTreeMap<PathBuf, Config>,
        refused: &mut Vec<(PathBuf, Vec<Diagnostic>)>,
    ) -> bool {
        // A user denied a file (users.allow, users.deny) loses her jobs,
        // not only her edits.
        if let FileKind::User(user) = kind {
            if let Err(why) = user_allowed(&self.set, user) {
                let diags = vec![Diagnostic {
                    file: path.display().to_string(),
                    line: None,
                    col: None,
                    severity: rea_config::Severity::Error,
                    message: format!("{why}: its jobs do not run"),
                    hint: Some(ALLOW_HINT.to_string()),
                }];
                let changed = self.parts.contains_key(path)
                    || !self.refused.iter().any(|(p, d)| p == path && *d == diags);
                refused.push((path.to_path_buf(), diags));
                return changed;
            }
        }
        let last = self.parts.get(path);
        let known = if force { None } else { last.map(|c| c.digest) };
        let loaded = check_user_file(path, kind)
            .and_then(|()| rea_config::load_as_if_changed(path, kind, self.options, known, last))
            .and_then(|c| c.map(|c| self.checks.apply(c)).transpose());
        match loaded {
            Ok(Some(cfg)) => {
                good.insert(path.to_path_buf(), cfg);
                true
            }
            Ok(None) => {
                if let Some(cfg) = last {
                    good.insert(path.to_path_buf(), cfg.clone());
                }
                false
            }
            Err(diags) => {
                // Refused again for the same reasons: nothing new.
                let changed = !self.refused.iter().any(|(p, d)| p == path && *d == diags);
                refused.push((path.to_path_buf(), diags));
                if let Some(cfg) = last {
                    good.insert(path.to_path_buf(), cfg.clone());
                }
                changed
            }
        }
    }

    /// The main file with the good parts, once they are read.
    fn put_together(
        &mut self,
        main: Config,
        mut good: BTreeMap<PathBuf, Config>,
        mut refused: Vec<(PathBuf, Vec<Diagnostic>)>,
        mut changed: bool,
    ) -> Result<Option<Loaded>, Vec<Diagnostic>> {
        let had_refusals = !self.refused.is_empty();
        if !changed && !had_refusals {
            return Ok(None);
        }
        let (config, clashes) = rea_config::combine(main, good.values().cloned().collect());
        for clash in clashes {
            good.remove(&clash.0);
            if !refused.contains(&clash) {
                refused.push(clash);
            }
        }
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

/// Who may have a job file of her own, as cron.allow and cron.deny say
/// who may have a crontab: `users.allow` and `users.deny` beside the main
/// file, one user name a line (`#` comments). If `users.allow` exists,
/// only the users it lists; else if `users.deny` exists, every user but
/// those it lists; with neither, every user. A list that cannot be read
/// allows no one (as cron, when it cannot tell).
pub fn user_allowed(set: &FileSet, user: &str) -> Result<(), String> {
    let dir = set
        .main
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (allow, deny) = (dir.join(ALLOW), dir.join(DENY));
    let unreadable = |path: &Path, e: std::io::Error| {
        format!(
            "{user} may not have jobs of their own here: {} cannot be read ({e})",
            path.display()
        )
    };
    match names_in(&allow) {
        Ok(Some(names)) if names.iter().any(|n| n == user) => return Ok(()),
        Ok(Some(_)) => {
            return Err(format!(
                "{user} may not have jobs of their own here: {} does not list {user}",
                allow.display()
            ))
        }
        Ok(None) => {}
        Err(e) => return Err(unreadable(&allow, e)),
    }
    match names_in(&deny) {
        Ok(Some(names)) if names.iter().any(|n| n == user) => Err(format!(
            "{user} may not have jobs of their own here: {} lists {user}",
            deny.display()
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(unreadable(&deny, e)),
    }
}

/// The list of who may have a file of her own (see [`user_allowed`]).
pub const ALLOW: &str = "users.allow";
/// The list of who may not (see [`user_allowed`]).
pub const DENY: &str = "users.deny";
/// What a user denied a file is told to do.
pub const ALLOW_HINT: &str =
    "root decides who may have jobs of their own (users.allow, users.deny beside the job file)";

/// The user names a list holds; None when there is no list. A list that
/// is not the daemon's own (root's), or that group or others may write,
/// is an error: whoever could edit it could give herself jobs.
fn names_in(path: &Path) -> std::io::Result<Option<Vec<String>>> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) if m.uid() != rea_host::user::own_uid() || m.mode() & 0o022 != 0 => {
            return Err(std::io::Error::other(format!(
                "it must be {}'s and writable by nobody else",
                rea_host::user::current_user_name().unwrap_or_else(|| "root".into())
            )))
        }
        _ => {}
    }
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
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
