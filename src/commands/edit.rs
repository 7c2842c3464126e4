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
    Bad(Vec<String>),
}

/// Edits `original` in the editor until `check` accepts it or the user
/// gives up. Returns the accepted text, or None when nothing changed.
fn edit_loop(
    name: &str,
    original: &str,
    mut check: impl FnMut(&str) -> Result<Verdict, Failure>,
) -> Result<Option<String>, Failure> {
    let dir = tempfile_dir()?;
    let path = dir.join(name);
    write_private(&path, original)?;
    let mut last_bad: Option<String> = None;
    loop {
        run_editor(&path)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failure::runtime(format!("cannot read back {}: {e}", path.display())))?;
        if text == original {
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("rea: no changes");
            return Ok(None);
        }
        match check(&text)? {
            Verdict::Good => {
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(Some(text));
            }
            Verdict::Bad(errors) => {
                for e in &errors {
                    eprintln!("{e}");
                }
                if last_bad.as_deref() == Some(text.as_str()) {
                    // Saved again unchanged: the user gave up.
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(Failure::new(
                        exit::INVALID,
                        "the job file still has errors; nothing was changed",
                    ));
                }
                eprintln!(
                    "rea: the job file has errors; opening it again (save it unchanged to give up)"
                );
                last_bad = Some(text);
            }
        }
    }
}

/// A private directory for the copy being edited.
fn tempfile_dir() -> Result<PathBuf, Failure> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    for n in 0..100u32 {
        let dir = base.join(format!("rea-edit-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(Failure::runtime(format!(
                    "cannot create a directory in {}: {e}",
                    base.display()
                )))
            }
        }
    }
    Err(Failure::runtime(
        "cannot create a private directory to edit in",
    ))
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
    let edited = edit_loop(&name, &original, |text| {
        Ok(match check_text(text, &path, &FileKind::Main) {
            Ok(_) => Verdict::Good,
            Err(diags) => Verdict::Bad(diags.iter().map(ToString::to_string).collect()),
        })
    })?;
    let Some(text) = edited else {
        return Ok(ExitCode::SUCCESS);
    };
    install_keeping_owner(&path, &text)?;
    eprintln!("rea: installed {}", path.display());
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
