//! `rea complete --index N -- WORDS...` (hidden): the dynamic half of the
//! shell completions. The scripts in `completions/` are clap_complete's
//! static ones (subcommands, options, their fixed values) plus a few lines
//! per shell ([`BASH`], [`ZSH`], [`FISH`]) that first ask this command
//! about the word under the cursor. If it is a job name, a one-shot id or
//! a tag, this prints the candidates that start with it, one per line, and
//! exits 0; otherwise it prints nothing and exits 1, and the static
//! completion takes over. So the shell code stays a few lines, the same in
//! every shell, and which argument takes what is decided here, next to
//! the clap definitions it reads.
//!
//! Names come from the job file (`-f`/`--file` on the line being
//! completed, else `$REA_FILE`, else the default), read without the
//! machine's checks; one-shot ids and their tags from the daemon of the
//! state directory (`--state-dir` on the line, else the default), asked
//! with a short timeout. Either may be missing: completion then offers
//! what the other knows. Nothing is ever printed on stderr (it would land
//! in the middle of the user's command line).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;
use rea_config::LoadOptions;

use crate::cli::{Cli, CompleteArgs, Global};
use crate::failure::{self, CommandResult, Failure};
use rea_proto::protocol::{PendingReply, StatusReply};
use rea_proto::{Client, Request};

/// How long completion waits for the daemon: a TAB must not hang.
const PATIENCE: Duration = Duration::from_millis(1500);

/// What the word under the cursor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Jobs,
    /// `rea status` takes a job or a pending one-shot.
    JobsAndOneShots,
    OneShots,
    Tags,
}

/// The word to complete: what it is, and text before the value in the
/// same word (`--tag=`), kept in the candidates.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    kind: Kind,
    prefix: String,
    partial: String,
}

/// What `kind_of` needs to know of the command line: options taking a
/// value (so their value is not a positional), the subcommand, and the
/// file and state directory named on the line.
#[derive(Debug, Default, PartialEq, Eq)]
struct Line {
    file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    target: Option<Target>,
}

/// Which positional argument (or option value) of which subcommand takes
/// names: the one table of this file.
fn kind_of(subcommand: &str, positional: usize, option: Option<&str>) -> Option<Kind> {
    match (subcommand, option) {
        ("pause" | "resume" | "pending" | "submit" | "at", Some("tag" | "tags")) => {
            Some(Kind::Tags)
        }
        (_, Some(_)) => None,
        ("trigger" | "history" | "logs" | "next" | "kill", None) if positional == 0 => {
            Some(Kind::Jobs)
        }
        ("status", None) if positional == 0 => Some(Kind::JobsAndOneShots),
        ("pause" | "resume", None) => Some(Kind::Jobs),
        ("cancel", None) => Some(Kind::OneShots),
        _ => None,
    }
}

/// The option of `cmd` (or a global one of `root`) a word names, if it
/// takes a value: its id.
fn value_option(root: &clap::Command, cmd: &clap::Command, word: &str) -> Option<Option<String>> {
    let find = |c: &clap::Command| -> Option<clap::Arg> {
        c.get_arguments()
            .find(|a| {
                if let Some(long) = word.strip_prefix("--") {
                    a.get_long() == Some(long)
                } else {
                    let mut chars = word.chars().skip(1);
                    word.len() == 2 && a.get_short() == chars.next()
                }
            })
            .cloned()
    };
    let arg = find(cmd).or_else(|| find(root))?;
    let takes = arg.get_action().takes_values();
    Some(takes.then(|| arg.get_id().to_string()))
}

/// Reads the words up to `index` (the word under the cursor).
fn read_line(words: &[String], index: usize) -> Line {
    let root = Cli::command();
    let mut line = Line::default();
    let mut sub: Option<clap::Command> = None;
    let mut positional = 0usize;
    // The option whose value the next word is (id), and its spelling.
    let mut pending: Option<(String, String)> = None;
    let mut options_done = false;
    let current = words.get(index).cloned().unwrap_or_default();
    for word in words.iter().take(index).skip(1) {
        if let Some((id, _)) = pending.take() {
            // bash splits `--tag=x` into `--tag`, `=`, `x`.
            if word == "=" {
                pending = Some((id, String::new()));
                continue;
            }
            match id.as_str() {
                "file" => line.file = Some(PathBuf::from(word)),
                "state_dir" => line.state_dir = Some(PathBuf::from(word)),
                _ => {}
            }
            continue;
        }
        if word == "--" {
            options_done = true;
            continue;
        }
        if word.starts_with('-') && word.len() > 1 && !options_done {
            let (name, inline) = match word.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (word.as_str(), None),
            };
            let cmd = sub.as_ref().unwrap_or(&root);
            // In `rea logs`, -f is --follow (main's rewrite), a flag.
            let follow = name == "-f" && cmd.get_name() == "logs";
            if let Some(Some(id)) = value_option(&root, cmd, name).filter(|_| !follow) {
                match inline {
                    Some(v) => match id.as_str() {
                        "file" => line.file = Some(PathBuf::from(v)),
                        "state_dir" => line.state_dir = Some(PathBuf::from(v)),
                        _ => {}
                    },
                    None => pending = Some((id, name.to_string())),
                }
            }
            continue;
        }
        match &sub {
            None => sub = root.find_subcommand(word).cloned(),
            Some(_) => positional += 1,
        }
    }
    let Some(sub) = sub else {
        return line;
    };
    let name = sub.get_name();
    // After `--` come a one-shot's command and its arguments.
    if options_done && matches!(name, "submit" | "at") {
        return line;
    }
    let (option, prefix, partial) = match pending {
        Some((id, _)) => (Some(id), String::new(), current),
        None if current.starts_with('-') && !options_done => {
            let Some((opt, value)) = current.split_once('=') else {
                return line;
            };
            match value_option(&root, &sub, opt) {
                Some(Some(id)) => (Some(id), format!("{opt}="), value.to_string()),
                _ => return line,
            }
        }
        None => (None, String::new(), current),
    };
    line.target = kind_of(name, positional, option.as_deref()).map(|kind| Target {
        kind,
        prefix,
        partial,
    });
    line
}

pub(crate) fn run(global: &Global, args: &CompleteArgs) -> CommandResult {
    let line = read_line(&args.words, args.index);
    let Some(target) = line.target else {
        return Err(Failure::silent(1));
    };
    let mut global = global.clone();
    if line.file.is_some() {
        global.file = line.file;
    }
    if line.state_dir.is_some() {
        global.state_dir = line.state_dir;
    }
    let mut out: Vec<String> = Vec::new();
    let wants_jobs = matches!(target.kind, Kind::Jobs | Kind::JobsAndOneShots);
    let wants_oneshots = matches!(target.kind, Kind::OneShots | Kind::JobsAndOneShots);
    let mut tags = BTreeSet::new();
    // Every job file, as the daemon reads them (drop-ins and users' files
    // too); those that do not load are left out.
    let file = (wants_jobs || target.kind == Kind::Tags).then(|| {
        let options = LoadOptions {
            allow_insecure_permissions: true,
        };
        rea_daemon::jobfiles::JobFiles::new(
            &super::job_file(&global),
            options,
            rea_host::user::is_root(),
        )
        .host_checks(rea_daemon::jobfiles::HostChecks::Off)
        .load(true)
        .ok()
        .flatten()
        .map(|loaded| loaded.config)
    });
    let mut client = super::state_dir(&global)
        .ok()
        .and_then(|dir| Client::connect(&dir, PATIENCE).ok());
    match file.flatten() {
        Some(cfg) => {
            for job in &cfg.jobs {
                if wants_jobs {
                    out.push(job.name.clone());
                }
                tags.extend(job.tags.iter().cloned());
            }
        }
        // An invalid file: the daemon knows the jobs it runs.
        None if wants_jobs => {
            if let Some(c) = client.as_mut() {
                let request = Request::Status { job: None };
                if let Ok(a) = super::ask::<StatusReply>(c, &request) {
                    out.extend(a.data.jobs.into_iter().map(|j| j.name));
                }
            }
        }
        None => {}
    }
    if wants_oneshots || target.kind == Kind::Tags {
        if let Some(c) = client.as_mut() {
            let request = Request::Pending {
                tag: None,
                limit: None,
            };
            if let Ok(a) = super::ask::<PendingReply>(c, &request) {
                for o in a.data.oneshots {
                    tags.extend(o.tags.iter().cloned());
                    if wants_oneshots {
                        out.push(o.id);
                    }
                }
            }
        }
    }
    if target.kind == Kind::Tags {
        out = tags.into_iter().collect();
    }
    let mut seen = BTreeSet::new();
    for name in out {
        if name.starts_with(&target.partial) && seen.insert(name.clone()) {
            println!("{}{name}", target.prefix);
        }
    }
    failure::ok()
}

/// Added to clap's bash script: `_rea_names` asks `rea complete`, else
/// calls clap's `_rea`; it replaces `_rea` in the `complete` lines.
pub(crate) const BASH: &str = r#"
# Job names, one-shot ids and tags come from the job file and the daemon:
# `rea complete` answers for the word under the cursor, or exits 1 when it
# is not a name, and the completion above takes over.
_rea_names() {
    local found
    if found=$(command "${COMP_WORDS[0]}" complete --index "$COMP_CWORD" -- "${COMP_WORDS[@]}" 2>/dev/null); then
        local IFS=$'\n'
        COMPREPLY=($found)
        # No name matches: offer nothing rather than file names.
        [[ ${#COMPREPLY[@]} -gt 0 ]] || compopt +o default +o bashdefault 2>/dev/null
        return 0
    fi
    _rea "$@"
}

"#;

/// Replaces the dispatch at the end of clap's zsh script: `_rea_names` asks
/// `rea complete` first, then falls back to clap's `_rea`.
pub(crate) const ZSH: &str = r#"# Job names, one-shot ids and tags come from the job file and the daemon:
# `rea complete` answers for the word under the cursor, or exits 1 when it
# is not a name, and the completion above takes over.
_rea_names() {
    local out
    if out=$("${words[1]}" complete --index $((CURRENT - 1)) -- "${words[@]}" 2>/dev/null); then
        local -a found
        found=("${(@f)out}")
        found=(${found:#})
        compadd -Q -a found
        return
    fi
    _rea "$@"
}

if [ "$funcstack[1]" = "_rea" ]; then
    # Autoloaded as _rea: from now on, complete through _rea_names.
    compdef _rea_names rea
    _rea_names "$@"
else
    compdef _rea_names rea
fi
"#;

/// Added to clap's fish script.
pub(crate) const FISH: &str = r#"
# Job names, one-shot ids and tags come from the job file and the daemon:
# `rea complete` answers for the word under the cursor, or exits 1 when it
# is not a name (and the completions above apply).
function __rea_names
    set -l words (commandline -opc) (commandline -ct)
    command $words[1] complete --index (math (count $words) - 1) -- $words 2>/dev/null
end
complete -c rea -f -n '__rea_names >/dev/null' -a '(__rea_names)'
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn target(line: &str) -> Option<(Kind, String, String)> {
        let mut words: Vec<String> = line.split(' ').map(str::to_string).collect();
        let index = words.len() - 1;
        if words[index] == "_" {
            words[index] = String::new();
        }
        read_line(&words, index)
            .target
            .map(|t| (t.kind, t.prefix, t.partial))
    }

    fn kind(line: &str) -> Option<Kind> {
        target(line).map(|t| t.0)
    }

    #[test]
    fn names_where_the_command_line_takes_them() {
        assert_eq!(kind("rea trigger _"), Some(Kind::Jobs));
        assert_eq!(kind("rea trigger ba"), Some(Kind::Jobs));
        assert_eq!(kind("rea trigger backup _"), None);
        assert_eq!(kind("rea trigger --wait _"), Some(Kind::Jobs));
        assert_eq!(kind("rea -f jobs.toml trigger _"), Some(Kind::Jobs));
        assert_eq!(kind("rea --client-timeout 5s logs _"), Some(Kind::Jobs));
        assert_eq!(kind("rea logs --run _"), None);
        assert_eq!(kind("rea logs -f _"), Some(Kind::Jobs));
        assert_eq!(kind("rea pause a b _"), Some(Kind::Jobs));
        assert_eq!(kind("rea pause --tag _"), Some(Kind::Tags));
        assert_eq!(kind("rea status _"), Some(Kind::JobsAndOneShots));
        assert_eq!(kind("rea cancel x _"), Some(Kind::OneShots));
        assert_eq!(kind("rea pending --tag _"), Some(Kind::Tags));
        assert_eq!(kind("rea submit --in 5m --tag _"), Some(Kind::Tags));
        assert_eq!(kind("rea submit --in 5m -- _"), None);
        assert_eq!(kind("rea at 14:30 -- x --tag _"), None);
        assert_eq!(kind("rea _"), None);
        assert_eq!(kind("rea tri"), None);
        assert_eq!(kind("rea trigger --"), None);
        assert_eq!(
            target("rea pause --tag=bi"),
            Some((Kind::Tags, "--tag=".into(), "bi".into()))
        );
        // bash's split of --tag=bi.
        assert_eq!(
            target("rea pause --tag = bi"),
            Some((Kind::Tags, String::new(), "bi".into()))
        );
    }

    #[test]
    fn the_file_and_state_directory_on_the_line_are_used() {
        let words: Vec<String> = "rea --file=/a.toml --state-dir /s trigger x"
            .split(' ')
            .map(str::to_string)
            .collect();
        let line = read_line(&words, 5);
        assert_eq!(line.file, Some(PathBuf::from("/a.toml")));
        assert_eq!(line.state_dir, Some(PathBuf::from("/s")));
        let words: Vec<String> = "rea trigger -f b.toml x"
            .split(' ')
            .map(str::to_string)
            .collect();
        assert_eq!(read_line(&words, 4).file, Some(PathBuf::from("b.toml")));
    }
}
