//! `rea edit` (crontab -e): opens `$VISUAL` or `$EDITOR` (else `vi`) on a
//! copy of a job file, checks what was saved, opens the editor again while
//! it has errors, and installs it atomically only once it is valid, then
//! has the daemon reload.
//!
//! Root without `--user` edits the main job file in place (owner and mode
//! kept). A user's own file (`users/NAME.toml`, root's) is edited through
//! the daemon: it hands out the current content, validates what comes back
//! as that user's file and installs it; a user can only ever reach their
//! own.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rea_config::{Config, Diagnostic, FileKind};

use crate::cli::{exit, EditArgs, Global};
use crate::failure::{CommandResult, Failure};
use rea_proto::protocol::{EditGetReply, EditPutReply};
use rea_proto::{Request, Response};

pub(crate) fn run(global: &Global, args: &EditArgs) -> CommandResult {
    if rea_host::user::is_root() && args.user.is_none() {
        return edit_main(global);
    }
    edit_through_daemon(global, args.user.clone())
}

/// What a check of the edited text found.
enum Verdict {
    Good,
    /// Each error as shown (`FILE:LINE:COL: message`, a hint on the next
    /// line), with its line counted in the text that was checked.
    Bad(Vec<String>),
}

/// Edits `original` in the editor until `check` accepts it or the user
/// gives up. Returns the accepted text, or None when nothing changed.
///
/// `shown` is the file name the errors start with (`FILE:LINE:`): when the
/// editor opens again, the errors are written as comments at the top of the
/// copy, their line numbers moved down by the comment's own lines so that
/// they point at the lines the editor shows (printed before the editor
/// opens, they would scroll away under it). The comment is taken off again
/// before the text is checked or installed.
fn edit_loop(
    name: &str,
    shown: &str,
    original: &str,
    mut check: impl FnMut(&str) -> Result<Verdict, Failure>,
) -> Result<Option<String>, Failure> {
    let copy = EditCopy::create(name, original)?;
    let mut last_bad: Option<String> = None;
    let mut header: Vec<String> = Vec::new();
    loop {
        run_editor(&copy.path)?;
        let saved = std::fs::read_to_string(&copy.path).map_err(|e| {
            Failure::runtime(format!("cannot read back {}: {e}", copy.path.display()))
        })?;
        let text = without_header(&saved, &header);
        if text == original {
            eprintln!("rea: no changes");
            return Ok(None);
        }
        let verdict = check(&text).map_err(|f| keep(f, name, &text))?;
        match verdict {
            Verdict::Good => return Ok(Some(text)),
            Verdict::Bad(errors) => {
                for e in &errors {
                    eprintln!("{e}");
                }
                if last_bad.as_deref() == Some(text.as_str()) {
                    // Saved again unchanged: the user gave up.
                    return Err(Failure::new(
                        exit::INVALID,
                        "the job file still has errors; nothing was changed",
                    ));
                }
                eprintln!(
                    "rea: the job file has errors; opening it again with them at the top (save it unchanged to give up)"
                );
                header = error_header(&errors, shown);
                let mut reopened = header.join("\n");
                reopened.push('\n');
                reopened.push_str(&text);
                std::fs::write(&copy.path, reopened).map_err(|e| {
                    Failure::runtime(format!("cannot write {}: {e}", copy.path.display()))
                })?;
                last_bad = Some(text);
            }
        }
    }
}

/// The first line of the comment that carries the errors into the editor.
const HEADER_FIRST: &str =
    "# rea: not installed. Fix the errors below and save, or save unchanged to give up.";
/// Its last line.
const HEADER_LAST: &str = "# rea: (these comment lines are removed before the file is checked)";

/// The comment put at the top of the copy when it opens again: `errors`,
/// each line commented, with the line numbers after `shown:` moved down by
/// the comment's length.
fn error_header(errors: &[String], shown: &str) -> Vec<String> {
    let body: Vec<&str> = errors.iter().flat_map(|e| e.lines()).collect();
    let offset = body.len() + 2;
    let mut header = vec![HEADER_FIRST.to_string()];
    header.extend(
        body.iter()
            .map(|line| format!("#   {}", shift_line(line, shown, offset))),
    );
    header.push(HEADER_LAST.to_string());
    header
}

/// `FILE:LINE:...` with LINE moved down by `by` when the line starts with
/// `shown:` and a number; any other line as it is.
fn shift_line(line: &str, shown: &str, by: usize) -> String {
    let Some(rest) = line.strip_prefix(shown).and_then(|r| r.strip_prefix(':')) else {
        return line.to_string();
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    match rest[..digits].parse::<usize>() {
        Ok(n) => format!("{shown}:{}{}", n.saturating_add(by), &rest[digits..]),
        Err(_) => line.to_string(),
    }
}

/// `saved` without the lines of `header` it still starts with (the user may
/// have deleted some or all of them; what they wrote stays).
fn without_header(saved: &str, header: &[String]) -> String {
    let mut rest = saved;
    for line in header {
        match rest.strip_prefix(line.as_str()) {
            Some(after) if after.is_empty() || after.starts_with('\n') => {
                rest = after.strip_prefix('\n').unwrap_or(after);
            }
            _ => break,
        }
    }
    rest.to_string()
}

/// The copy being edited, in a private directory of its own that goes with
/// it: whatever ends the edit (installed, no change, given up, the editor
/// failed) leaves nothing behind in the temporary directory.
struct EditCopy {
    dir: PathBuf,
    path: PathBuf,
}

impl EditCopy {
    fn create(name: &str, text: &str) -> Result<EditCopy, Failure> {
        let dir = private_dir()?;
        let copy = EditCopy {
            path: dir.join(name),
            dir,
        };
        write_private(&copy.path, text)?;
        Ok(copy)
    }
}

impl Drop for EditCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `failure`, after saving the edited `text` (0600) in the temporary
/// directory where the user can find it: it was saved in the editor but
/// could not be checked or installed, and the work is not theirs to lose.
fn keep(failure: Failure, name: &str, text: &str) -> Failure {
    let kept = temp_base().join(format!("{name}.rea-edit-{:016x}", fastrand::u64(..)));
    match write_private(&kept, text) {
        Ok(()) => failure.with_note(format!("your edit is kept in {}", kept.display())),
        Err(_) => failure,
    }
}

/// `$TMPDIR`, else /tmp.
fn temp_base() -> PathBuf {
    std::env::var_os("TMPDIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// A private directory (0700) in `$TMPDIR` or /tmp, under a name no one can
/// guess: others can write there, and a name made of the process id could
/// be taken in advance by anyone (and `rea edit` refused for root).
fn private_dir() -> Result<PathBuf, Failure> {
    let base = temp_base();
    let mut last = None;
    for _ in 0..16 {
        let dir = base.join(format!("rea-edit-{:016x}", fastrand::u64(..)));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(Failure::runtime(format!(
                    "cannot create a directory in {}: {e}",
                    base.display()
                ))
                .hint("set TMPDIR to a directory you can write"))
            }
        }
    }
    Err(Failure::runtime(format!(
        "cannot create a private directory to edit in {}: {}",
        base.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

fn write_private(path: &Path, text: &str) -> Result<(), Failure> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))
}

/// `$VISUAL`, `$EDITOR` or `vi`, through the shell (so `EDITOR="code
/// --wait"` works), on `path`.
fn run_editor(path: &Path) -> Result<(), Failure> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            std::env::var("EDITOR")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "vi".to_string());
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .map_err(|e| Failure::runtime(format!("cannot start the editor {editor:?}: {e}")))?;
    if !status.success() {
        return Err(Failure::runtime(format!(
            "the editor {editor:?} failed ({status}); nothing was changed"
        )));
    }
    Ok(())
}

/// Root: the main job file, checked as the daemon would (with this
/// machine's users), installed over the original keeping its owner and
/// mode.
fn edit_main(global: &Global) -> CommandResult {
    let path = super::job_file_in_use(global);
    let original = rea_daemon::jobfiles::read_for_edit(&path).map_err(Failure::runtime)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "jobs.toml".into());
    let shown = path.display().to_string();
    let edited = edit_loop(&name, &shown, &original, |text| {
        Ok(match check_text(text, &path, &FileKind::Main) {
            Ok(_) => Verdict::Good,
            Err(diags) => Verdict::Bad(diags.iter().map(ToString::to_string).collect()),
        })
    })?;
    let Some(text) = edited else {
        return Ok(ExitCode::SUCCESS);
    };
    // A job file that is a symbolic link (to a file kept under version
    // control, say) stays one: the file it points to is replaced.
    let target = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&path).map_err(|e| {
            keep(
                Failure::runtime(format!("cannot follow the link {shown}: {e}")),
                &name,
                &text,
            )
        })?,
        _ => path.clone(),
    };
    install_keeping_owner(&target, &text).map_err(|f| keep(f, &name, &text))?;
    if target == path {
        eprintln!("rea: installed {shown}");
    } else {
        eprintln!(
            "rea: installed {} (the link {shown} points to it)",
            target.display()
        );
    }
    reload_if_running(global);
    Ok(ExitCode::SUCCESS)
}

fn check_text(text: &str, path: &Path, kind: &FileKind) -> Result<Config, Vec<Diagnostic>> {
    rea_config::parse_as(text.as_bytes(), path, kind)
        .and_then(rea_daemon::host_checks::with_host_checks)
}

/// Writes `text` over `path` atomically, with the original's owner and
/// mode (a new file: root's, 0644 minus what others could write).
fn install_keeping_owner(path: &Path, text: &str) -> Result<(), Failure> {
    let meta = std::fs::metadata(path).ok();
    let mode = meta.as_ref().map_or(0o644, |m| m.mode() & 0o7755);
    let owner = meta.as_ref().map(|m| (m.uid(), m.gid()));
    rea_daemon::jobfiles::install(path, text.as_bytes(), mode, owner)
        .map_err(|e| Failure::runtime(format!("cannot install {}: {e}", path.display())))
}

fn reload_if_running(global: &Global) {
    let Ok(mut client) = super::connect(global) else {
        return;
    };
    match super::ask::<rea_proto::protocol::ReloadReply>(&mut client, &Request::Reload) {
        Ok(r) => eprintln!("rea: the daemon reloaded: {} jobs", r.data.jobs),
        Err(f) => eprintln!("{f}"),
    }
}

/// A user's own file, through the daemon (which alone may write it).
fn edit_through_daemon(global: &Global, user: Option<String>) -> CommandResult {
    let mut client = super::connect(global)?;
    let current =
        super::ask::<EditGetReply>(&mut client, &Request::EditGet { user: user.clone() })?.data;
    let user = Some(current.user.clone());
    let mut installed: Option<EditPutReply> = None;
    let edited = edit_loop(
        &format!("{}.toml", current.user),
        &current.path,
        &current.content,
        |text| {
            let resp = client
                .request(&Request::EditPut {
                    user: user.clone(),
                    content: text.to_string(),
                })
                .map_err(super::client_failure)?;
            verdict(resp, &mut installed)
        },
    )?;
    match (edited, installed) {
        (Some(_), Some(r)) => {
            eprintln!("rea: installed {} ({} jobs)", r.path, r.jobs);
            Ok(ExitCode::SUCCESS)
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The daemon's answer to an edit: installed, invalid (edit again), or a
/// refusal (give up).
fn verdict(resp: Response, installed: &mut Option<EditPutReply>) -> Result<Verdict, Failure> {
    if resp.ok {
        *installed = Some(resp.data_as().map_err(Failure::runtime)?);
        return Ok(Verdict::Good);
    }
    if resp.code.as_deref() == Some("invalid_config") {
        let mut lines = resp.suggestions.clone();
        if let Some(e) = &resp.error {
            lines.push(format!("rea: {e}"));
        }
        return Ok(Verdict::Bad(lines));
    }
    super::answer::<serde_json::Value>(resp).map(|_| Verdict::Good)
}
