//! Reading the job file: a size limit (so `--file /dev/zero` fails fast),
//! only regular files (a FIFO at the path must not freeze a daemon: the
//! file is opened non-blocking and checked before it is read), the
//! ownership and permission checks cron also makes, and a digest of the
//! bytes so a reload can skip a file that did not change.
//!
//! Whoever can change the job file, or replace it, runs commands as rea's
//! user (root, for a system daemon). So the file must be owned by root or
//! by rea's own user and writable by nobody else, and so must every
//! directory on its path (a directory that others may write is fine only
//! with the sticky bit, as `/tmp` has it: then they cannot replace a file
//! they do not own). `--allow-insecure` turns these checks off.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rea_core::trust::{self, Distrust};
use rustix::fs::{FileType, Mode, OFlags};

use crate::{Config, Diagnostic, FileKind, LoadOptions};

/// Job files larger than this are refused before parsing, so that pointing
/// `--file` at `/dev/zero` or a log file fails fast instead of eating memory.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads and validates the file at `path`, refusing it if group or others
/// may write it (see [`check_permissions`]).
pub fn load(path: &Path) -> Result<Config, Vec<Diagnostic>> {
    load_with(path, LoadOptions::default())
}

/// [`load`] with options. Every problem is reported at once: a permission
/// problem does not hide problems in the contents.
pub fn load_with(path: &Path, options: LoadOptions) -> Result<Config, Vec<Diagnostic>> {
    let (bytes, facts) = read_limited(path)?;
    let d = digest(&bytes);
    finish_load(path, &bytes, d, &facts, &FileKind::Main, options, None)
}

/// `load_with`, reading the file once: `Ok(None)` when its bytes are those
/// `known` (a `Config::digest`) was computed from, so nothing is parsed.
/// Jobs equal to one of `previous` (the configuration in force) are that
/// job's `Arc`: a reload keeps the memory of what did not change, and the
/// new copies are freed as soon as they are compared.
pub fn load_if_changed(
    path: &Path,
    options: LoadOptions,
    known: Option<u64>,
    previous: Option<&Config>,
) -> Result<Option<Config>, Vec<Diagnostic>> {
    load_as_if_changed(path, &FileKind::Main, options, known, previous)
}

/// [`load_if_changed`] for a job file of any kind (a drop-in, a user's).
pub fn load_as_if_changed(
    path: &Path,
    kind: &FileKind,
    options: LoadOptions,
    known: Option<u64>,
    previous: Option<&Config>,
) -> Result<Option<Config>, Vec<Diagnostic>> {
    let (bytes, facts) = read_limited(path)?;
    let d = digest(&bytes);
    if known == Some(d)
        && (options.allow_insecure_permissions || check_ownership(path, &facts).is_empty())
    {
        return Ok(None);
    }
    finish_load(path, &bytes, d, &facts, kind, options, previous).map(Some)
}

/// A hash of a job file's bytes (see `Config::digest`).
pub fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn finish_load(
    path: &Path,
    bytes: &[u8],
    bytes_digest: u64,
    facts: &FileFacts,
    kind: &FileKind,
    options: LoadOptions,
    previous: Option<&Config>,
) -> Result<Config, Vec<Diagnostic>> {
    let mut denied = if options.allow_insecure_permissions {
        Vec::new()
    } else {
        check_ownership(path, facts)
    };
    match crate::walk::parse_reusing(bytes, bytes_digest, path, kind, previous) {
        Ok(config) if denied.is_empty() => Ok(config),
        Ok(_) => Err(denied),
        Err(diags) => {
            denied.extend(diags);
            Err(denied)
        }
    }
}

/// What the checks need to know of the opened file.
#[derive(Debug, Clone, Copy)]
struct FileFacts {
    uid: u32,
    mode: u32,
}

/// A job file's bytes, read as every reader of job files reads them
/// (see `read_limited`), for a command that looks at the file without
/// loading it.
pub fn read_file(path: &Path) -> Result<Vec<u8>, Vec<Diagnostic>> {
    read_limited(path).map(|(bytes, _)| bytes)
}

/// Opens without blocking (a FIFO, a device), refuses anything but a
/// regular file, and reads at most `MAX_FILE_BYTES`.
fn read_limited(path: &Path) -> Result<(Vec<u8>, FileFacts), Vec<Diagnostic>> {
    let fail = |message: String, hint: Option<String>| vec![file_diagnostic(path, message, hint)];
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        fail(
            format!("cannot read the job file: {}", std::io::Error::from(e)),
            None,
        )
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| {
        fail(
            format!("cannot read the job file: {}", std::io::Error::from(e)),
            None,
        )
    })?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(fail(
            format!(
                "the job file is not a regular file (it is {})",
                describe(kind)
            ),
            Some("point --file at a jobs.toml; a FIFO or a device is never read".into()),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read the job file: {e}"), None))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(
            format!(
                "the job file is larger than {} MiB; is it the right file?",
                MAX_FILE_BYTES >> 20
            ),
            None,
        ));
    }
    let facts = FileFacts {
        uid: stat.st_uid,
        mode: stat.st_mode & 0o7777,
    };
    Ok((bytes, facts))
}

fn describe(kind: FileType) -> &'static str {
    match kind {
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "not a regular file",
    }
}

/// The user rea runs commands as, for messages.
fn whom() -> &'static str {
    if rustix::process::geteuid().is_root() {
        "root"
    } else {
        "rea's user"
    }
}

/// Refuses a job file (or a directory above it) that someone other than
/// root or rea's user owns or may write, as cron refuses such crontabs:
/// whoever can edit or replace it can run commands as rea's user (the
/// rule itself is `rea_core::trust`).
fn check_ownership(path: &Path, facts: &FileFacts) -> Vec<Diagnostic> {
    let me = rustix::process::geteuid().as_raw();
    let shown = shell_quote(&path.display().to_string());
    let mut out = Vec::new();
    match trust::file(facts.uid, facts.mode, me) {
        None => {}
        Some(Distrust::Owner(uid)) => out.push(file_diagnostic(
            path,
            format!(
                "refusing a job file owned by uid {uid}: its owner can make it run commands as {}",
                whom()
            ),
            Some(format!(
                "run: chown {me} {shown} (and keep it writable by its owner only)"
            )),
        )),
        Some(Distrust::Writable { mode }) => out.push(file_diagnostic(
            path,
            format!(
                "refusing a job file writable by {} (mode {:04o}): whoever can edit it can run commands as rea's user",
                Distrust::who(mode),
                mode & 0o7777
            ),
            Some(format!("run: chmod go-w {shown}")),
        )),
    }
    for dir in directories(path) {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        if let Some(problem) = trust::directory(meta.uid(), meta.mode(), me) {
            let d = shell_quote(&dir.display().to_string());
            out.push(file_diagnostic(
                path,
                format!(
                    "refusing a job file in directory {}, which {problem}: whoever can write it can replace the file and run commands as {}",
                    dir.display(),
                    whom()
                ),
                Some(format!(
                    "run: chmod go-w {d} (or move the job file to a directory only root or rea's user can write, e.g. /etc/rea)"
                )),
            ));
            break;
        }
    }
    out
}

/// Every directory that leads to the job file: the ones on the path as
/// given (made absolute) and the ones on its real path (symlinks
/// resolved), nearest first, without repeats.
fn directories(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let given = if path.is_absolute() {
        Some(path.to_path_buf())
    } else {
        std::env::current_dir().ok().map(|cwd| cwd.join(path))
    };
    let real = std::fs::canonicalize(path).ok();
    for p in [given, real].into_iter().flatten() {
        for dir in p.ancestors().skip(1) {
            if !dir.as_os_str().is_empty() && !out.iter().any(|d| d == dir) {
                out.push(dir.to_path_buf());
            }
        }
    }
    out
}

/// Refuses a job file that group or others may write, or that someone
/// other than root or rea's user owns (or whose directories they may
/// write): see the module documentation.
pub fn check_permissions(path: &Path) -> Result<(), Vec<Diagnostic>> {
    let (_, facts) = read_limited(path)?;
    let denied = check_ownership(path, &facts);
    if denied.is_empty() {
        Ok(())
    } else {
        Err(denied)
    }
}

fn file_diagnostic(path: &Path, message: String, hint: Option<String>) -> Diagnostic {
    Diagnostic {
        file: path.display().to_string(),
        severity: crate::Severity::Error,
        line: Some(1),
        col: Some(1),
        message,
        hint,
    }
}

/// Quotes a path for a copy-pasteable hint, only when it needs it.
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
