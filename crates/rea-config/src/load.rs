//! Reading the job file: a size limit (so `--file /dev/zero` fails fast),
//! the permission check cron also makes, and a digest of the bytes so a
//! reload can skip a file that did not change.

use std::io::Read;
use std::path::Path;

use crate::{Config, Diagnostic, LoadOptions};

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
    let bytes = read_limited(path).map_err(|message| vec![file_diagnostic(path, message, None)])?;
    finish_load(path, &bytes, options)
}

/// `load_with`, reading the file once: `Ok(None)` when its bytes are those
/// `known` (a `Config::digest`) was computed from, so nothing is parsed.
pub fn load_if_changed(
    path: &Path,
    options: LoadOptions,
    known: Option<u64>,
) -> Result<Option<Config>, Vec<Diagnostic>> {
    let bytes = read_limited(path).map_err(|message| vec![file_diagnostic(path, message, None)])?;
    if known == Some(digest(&bytes)) {
        return Ok(None);
    }
    finish_load(path, &bytes, options).map(Some)
}

/// A hash of a job file's bytes (see `Config::digest`).
pub fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn finish_load(path: &Path, bytes: &[u8], options: LoadOptions) -> Result<Config, Vec<Diagnostic>> {
    let permissions = if options.allow_insecure_permissions {
        Ok(())
    } else {
        check_permissions(path)
    };
    let parsed = crate::parse(bytes, path);
    match (permissions, parsed) {
        (Ok(()), parsed) => parsed,
        (Err(denied), Ok(_)) => Err(vec![denied]),
        (Err(denied), Err(mut diags)) => {
            diags.insert(0, denied);
            Err(diags)
        }
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the job file: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the job file: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "the job file is larger than {} MiB; is it the right file?",
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(bytes)
}

/// Refuses a job file that group or others may write, as cron does: anyone
/// who can edit it can run commands as the user rea runs as.
pub fn check_permissions(path: &Path) -> Result<(), Diagnostic> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        file_diagnostic(
            path,
            format!("cannot read the job file's permissions: {e}"),
            None,
        )
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => return Ok(()),
        (true, false) => "group",
        (false, true) => "others",
        (true, true) => "group and others",
    };
    Err(file_diagnostic(
        path,
        format!(
            "refusing a job file writable by {who} (mode {mode:04o}): whoever can edit it can run commands as rea's user"
        ),
        Some(format!("run: chmod go-w {}", shell_quote(&path.display().to_string()))),
    ))
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
