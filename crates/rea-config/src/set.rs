//! A main job file with the files beside it: the drop-in directory
//! `jobs.d/` (what packages and configuration management write, cron.d's
//! role) and, for a root daemon, the users' own files `users/NAME.toml`
//! (cron's user crontabs). Each file is read and validated on its own, so
//! one bad file is refused alone; [`combine`] puts the good ones together.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{digest, Config, Diagnostic, FileKind};

/// The files of one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSet {
    pub main: PathBuf,
    /// `jobs.d` beside the main file.
    pub dropins: PathBuf,
    /// `users` beside the main file, when users' files are read at all.
    pub users: Option<PathBuf>,
}

impl FileSet {
    /// The set around `main`; `users`: read the users' files too (only a
    /// root daemon runs jobs as other users).
    pub fn of(main: &Path, users: bool) -> FileSet {
        let dir = main.parent().unwrap_or(Path::new("."));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        FileSet {
            main: main.to_path_buf(),
            dropins: dir.join("jobs.d"),
            users: users.then(|| dir.join("users")),
        }
    }

    /// The files besides the main one, in the order their jobs are listed:
    /// the drop-ins by name, then the users' files by name. Only `*.toml`
    /// files count (editor backups, `.swp` files and hidden files do not);
    /// a missing directory is an empty one.
    pub fn parts(&self) -> Vec<(PathBuf, FileKind)> {
        let mut out: Vec<(PathBuf, FileKind)> = toml_files(&self.dropins)
            .into_iter()
            .map(|p| (p, FileKind::DropIn))
            .collect();
        if let Some(users) = &self.users {
            for p in toml_files(users) {
                let user = p
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.push((p, FileKind::User(user)));
            }
        }
        out
    }

    /// What `path` is in this set, if it is one of the files beside the
    /// main one (present or not): a drop-in, or a user's file.
    pub fn kind_of(&self, path: &Path) -> Option<FileKind> {
        let name = path.file_name().filter(|n| is_job_file_name(n))?;
        let dir = path.parent()?;
        if dir == self.dropins {
            return Some(FileKind::DropIn);
        }
        if self.users.as_deref() == Some(dir) {
            let user = Path::new(name).file_stem()?.to_string_lossy().into_owned();
            return Some(FileKind::User(user));
        }
        None
    }

    /// The file of `user`'s own jobs, if users' files are read.
    pub fn user_file(&self, user: &str) -> Option<PathBuf> {
        self.users.as_ref().map(|d| d.join(format!("{user}.toml")))
    }
}

pub fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| is_job_file_name(&e.file_name()))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// Whether a file of `jobs.d/` or `users/` named so is a job file: `*.toml`,
/// not hidden (an editor's or a package manager's temporary file).
pub fn is_job_file_name(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    !name.starts_with('.') && name.ends_with(".toml")
}

/// The main file's configuration with the jobs of `parts` added, in order.
/// A part that defines a job name already taken (by the main file or an
/// earlier part) is left out whole, with a diagnostic per clash: it is
/// refused alone, like a part that does not parse. Returns the combined
/// configuration and the parts left out.
pub fn combine(main: Config, parts: Vec<Config>) -> (Config, Vec<(PathBuf, Vec<Diagnostic>)>) {
    let mut combined = main;
    if parts.is_empty() {
        return (combined, Vec::new());
    }
    let mut owner_of: HashMap<String, Arc<Path>> = HashMap::new();
    let main_path: Arc<Path> = Arc::from(combined.path.as_path());
    for job in &combined.jobs {
        owner_of.insert(job.name.clone(), main_path.clone());
    }
    let mut refused = Vec::new();
    for part in parts {
        let clashes: Vec<Diagnostic> = part
            .jobs
            .iter()
            .filter_map(|job| {
                let other = owner_of.get(&job.name)?;
                Some(part.diagnostic_at(
                    &job.name,
                    "",
                    format!(
                        "job {:?} is also defined in {}; job names are unique across the system's job files",
                        job.name,
                        other.display()
                    ),
                    Some("rename one of them".to_string()),
                ))
            })
            .collect();
        if !clashes.is_empty() {
            refused.push((part.path.clone(), clashes));
            continue;
        }
        let path: Arc<Path> = Arc::from(part.path.as_path());
        for job in &part.jobs {
            owner_of.insert(job.name.clone(), path.clone());
            combined.other_files.insert(job.name.clone(), path.clone());
        }
        combined.jobs.extend(part.jobs);
        combined.positions.extend(part.positions);
        combined.warnings.extend(part.warnings);
        combined.files.extend(part.files);
    }
    let mut all: Vec<u8> = Vec::new();
    for (path, d) in &combined.files {
        all.extend_from_slice(path.to_string_lossy().as_bytes());
        all.extend_from_slice(&d.to_le_bytes());
    }
    if combined.files.len() > 1 {
        combined.digest = digest(&all);
    }
    (combined, refused)
}

/// Which file each job of a combined configuration comes from.
pub fn files_of(config: &Config) -> BTreeMap<&str, &Path> {
    config
        .jobs
        .iter()
        .map(|j| {
            let file = config
                .other_files
                .get(&j.name)
                .map(|p| &**p)
                .unwrap_or(config.path.as_path());
            (j.name.as_str(), file)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str, kind: FileKind, text: &str) -> Config {
        crate::parse_as(text.as_bytes(), Path::new(path), &kind).expect("valid")
    }

    #[test]
    fn parts_add_their_jobs_and_a_clash_refuses_the_later_file_alone() {
        let main = parse(
            "jobs.toml",
            FileKind::Main,
            "[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n",
        );
        let pkg = parse(
            "jobs.d/pkg.toml",
            FileKind::DropIn,
            "[jobs.b]\nschedule = \"@daily\"\ncommand = \"true\"\n",
        );
        let clash = parse(
            "jobs.d/zz.toml",
            FileKind::DropIn,
            "[jobs.c]\nschedule = \"@daily\"\ncommand = \"true\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n",
        );
        let alice = parse(
            "users/alice.toml",
            FileKind::User("alice".into()),
            "[jobs.mine]\nschedule = \"@daily\"\ncommand = \"true\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n",
        );
        let (cfg, refused) = combine(main, vec![pkg, clash, alice]);
        let names: Vec<&str> = cfg.jobs.iter().map(|j| j.name.as_str()).collect();
        // A user's names are her own: her "a" is not the system's.
        assert_eq!(names, ["a", "b", "alice/mine", "alice/a"]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, Path::new("jobs.d/zz.toml"));
        assert!(refused[0].1[0]
            .to_string()
            .contains("job \"a\" is also defined in jobs.toml"));
        let files = files_of(&cfg);
        assert_eq!(files["b"], Path::new("jobs.d/pkg.toml"));
        assert_eq!(files["a"], Path::new("jobs.toml"));
        let mine = cfg
            .jobs
            .iter()
            .find(|j| j.name == "alice/mine")
            .expect("mine");
        assert_eq!(mine.user.as_deref(), Some("alice"));
        assert_eq!(mine.owner.as_deref(), Some("alice"));
        assert_eq!(cfg.files.len(), 3);
    }

    #[test]
    fn what_a_part_may_not_say() {
        let daemon = crate::parse_as(
            b"[daemon]\nmax_concurrent = 3\n",
            Path::new("jobs.d/x.toml"),
            &FileKind::DropIn,
        )
        .unwrap_err();
        assert!(daemon[0]
            .message
            .contains("[daemon] belongs in the main job file"));
        let other_user = crate::parse_as(
            b"[jobs.x]\nschedule = \"@daily\"\ncommand = \"true\"\nuser = \"root\"\n",
            Path::new("users/alice.toml"),
            &FileKind::User("alice".into()),
        )
        .unwrap_err();
        assert_eq!(
            other_user[0].to_string(),
            "users/alice.toml:4:1: the jobs of alice's file run as alice, not as \"root\"\n  hint: remove \"user\": it is implied by the file"
        );
    }

    #[test]
    fn the_set_lists_toml_files_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let main = dir.path().join("jobs.toml");
        std::fs::create_dir(dir.path().join("jobs.d")).expect("mkdir");
        std::fs::create_dir(dir.path().join("users")).expect("mkdir");
        for f in [
            "jobs.d/b.toml",
            "jobs.d/a.toml",
            "jobs.d/a.toml~",
            "jobs.d/.a.toml.swp",
            "users/bob.toml",
        ] {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        let set = FileSet::of(&main, true);
        let parts: Vec<(String, FileKind)> = set
            .parts()
            .into_iter()
            .map(|(p, k)| (p.strip_prefix(dir.path()).unwrap().display().to_string(), k))
            .collect();
        assert_eq!(
            parts,
            [
                ("jobs.d/a.toml".to_string(), FileKind::DropIn),
                ("jobs.d/b.toml".to_string(), FileKind::DropIn),
                ("users/bob.toml".to_string(), FileKind::User("bob".into())),
            ]
        );
        assert!(FileSet::of(&main, false).parts().len() == 2);
    }
}
