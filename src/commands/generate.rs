//! `rea generate man|completions --out DIR`: writes the man pages and the
//! shell completions shipped in `man/` and `completions/`. Options and
//! subcommands come from the clap definitions in `cli`; the prose (FILES,
//! ENVIRONMENT, EXAMPLES in rea(1); EXIT STATUS and EXAMPLES of each
//! command; all of rea-jobs(5), rea-history(5), rea-metrics(7) and
//! rea-protocol(7)) is hand-written roff in `man/src/`, built into the
//! binary. Hidden from `--help`: it is
//! for maintainers and packagers. `tests/generated.rs` fails when a
//! committed file differs from what this writes, so they cannot drift.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;

use crate::cli::{exit, Cli, GenerateArgs, Generated};
use crate::failure::{self, CommandResult, Failure};

/// ENVIRONMENT, FILES and EXAMPLES of rea(1).
const REA_1_SECTIONS: &str = include_str!("../../man/src/rea.1.in");
/// All of rea-jobs(5); `{{VERSION}}` is replaced.
const REA_JOBS_5: &str = include_str!("../../man/src/rea-jobs.5.in");

/// Pages written by hand whole, `{{VERSION}}` replaced: what the daemon
/// shows the world beyond the command line.
const REFERENCE_PAGES: [(&str, &str); 4] = [
    (
        "rea-history.5",
        include_str!("../../man/src/rea-history.5.in"),
    ),
    (
        "rea-metrics.7",
        include_str!("../../man/src/rea-metrics.7.in"),
    ),
    (
        "rea-protocol.7",
        include_str!("../../man/src/rea-protocol.7.in"),
    ),
    ("rea-web.7", include_str!("../../man/src/rea-web.7.in")),
];

/// EXIT STATUS and EXAMPLES of each command's page, written by hand in
/// `man/src/commands/`; a visible subcommand without an entry stops the
/// generator (and so `tests/generated.rs`).
const COMMAND_SECTIONS: [(&str, &str); 21] = [
    ("run", include_str!("../../man/src/commands/rea-run.1.in")),
    (
        "check",
        include_str!("../../man/src/commands/rea-check.1.in"),
    ),
    ("list", include_str!("../../man/src/commands/rea-list.1.in")),
    ("next", include_str!("../../man/src/commands/rea-next.1.in")),
    (
        "status",
        include_str!("../../man/src/commands/rea-status.1.in"),
    ),
    (
        "trigger",
        include_str!("../../man/src/commands/rea-trigger.1.in"),
    ),
    ("kill", include_str!("../../man/src/commands/rea-kill.1.in")),
    (
        "pause",
        include_str!("../../man/src/commands/rea-pause.1.in"),
    ),
    (
        "resume",
        include_str!("../../man/src/commands/rea-resume.1.in"),
    ),
    (
        "reload",
        include_str!("../../man/src/commands/rea-reload.1.in"),
    ),
    (
        "history",
        include_str!("../../man/src/commands/rea-history.1.in"),
    ),
    ("logs", include_str!("../../man/src/commands/rea-logs.1.in")),
    (
        "audit",
        include_str!("../../man/src/commands/rea-audit.1.in"),
    ),
    (
        "submit",
        include_str!("../../man/src/commands/rea-submit.1.in"),
    ),
    ("at", include_str!("../../man/src/commands/rea-at.1.in")),
    (
        "cancel",
        include_str!("../../man/src/commands/rea-cancel.1.in"),
    ),
    (
        "pending",
        include_str!("../../man/src/commands/rea-pending.1.in"),
    ),
    (
        "import",
        include_str!("../../man/src/commands/rea-import.1.in"),
    ),
    ("edit", include_str!("../../man/src/commands/rea-edit.1.in")),
    ("top", include_str!("../../man/src/commands/rea-top.1.in")),
    ("web", include_str!("../../man/src/commands/rea-web.1.in")),
];

/// Pages a command's SEE ALSO names besides rea(1) and rea-jobs(5).
fn related(command: &str) -> &'static [&'static str] {
    match command {
        "run" => &["rea-metrics(7)", "rea-history(5)", "systemd.service(5)"],
        "status" => &["rea-metrics(7)", "rea-protocol(7)"],
        "history" | "logs" => &["rea-history(5)"],
        "web" => &["rea-web(7)"],
        "submit" | "at" | "cancel" | "pending" | "trigger" | "kill" => &["rea-protocol(7)"],
        "import" => &["crontab(5)"],
        "edit" => &["crontab(1)"],
        "top" => &["rea-status(1)", "rea-audit(1)", "rea-protocol(7)"],
        _ => &[],
    }
}

/// The `.TH` manual name: what `man` prints at the top centre of each page.
const MANUAL: &str = "rea manual";

/// EXIT STATUS of rea(1), from the constants the commands return, so the
/// page cannot promise a code the binary does not use.
const EXIT_STATUSES: &[(i32, &str)] = &[
    (exit::OK, "Success."),
    (
        exit::FAILURE,
        "A runtime failure: an I/O error, a request the daemon refused, or a \
         triggered run that ended without an exit code of its own.",
    ),
    (
        exit::INVALID,
        "The job file is invalid (every error is printed as FILE:LINE:COL), or \
         the command line is wrong.",
    ),
    (
        exit::NO_DAEMON,
        "No daemon is running for the state directory (trigger, pause, resume, \
         reload, submit, at, cancel, pending).",
    ),
    (
        exit::LOCKED,
        "Another daemon already holds the state directory (rea run).",
    ),
    (exit::NOT_FOUND, "No such job, run or pending one-shot."),
    (
        exit::DUPLICATE,
        "rea submit: a one-shot with this --name is already pending (safe to \
         treat as success when retrying a submission).",
    ),
];

pub(crate) fn run(args: &GenerateArgs) -> CommandResult {
    let written = match args.what {
        Generated::Man => man_pages(&args.out),
        Generated::Completions => completions(&args.out),
    };
    let files = written
        .map_err(|e| Failure::runtime(format!("cannot write into {}: {e}", args.out.display())))?;
    for f in files {
        println!("{}", f.display());
    }
    failure::ok()
}

/// The command line as users see it: the root command without hidden
/// subcommands (this one). clap_complete lists hidden subcommands, and clap
/// cannot remove one, so the root is copied with the visible ones only. A
/// unit test checks the copy's help is identical to the original's.
pub(crate) fn public_command() -> clap::Command {
    let full = Cli::command();
    clap::Command::new("rea")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .propagate_version(full.is_propagate_version_set())
        .disable_help_subcommand(full.is_disable_help_subcommand_set())
        .subcommand_required(full.is_subcommand_required_set())
        .arg_required_else_help(full.is_arg_required_else_help_set())
        .args(full.get_arguments().cloned())
        .subcommands(
            full.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| logs_as_typed(s.clone(), &full)),
        )
}

/// `rea logs` as it is typed: `-f` is `--follow` (main.rs rewrites it to
/// the parser's `-F` before parsing), and `--file` has no short form there.
/// The man page and the completions say so: from the parser alone they
/// offered `-f` as `--file`, and fish completed file names after it.
fn logs_as_typed(sub: clap::Command, full: &clap::Command) -> clap::Command {
    if sub.get_name() != "logs" {
        return sub;
    }
    let Some(file) = full.get_arguments().find(|a| a.get_id() == "file") else {
        return sub;
    };
    // An argument of its own named like the global one is not overridden
    // by it when the global arguments are propagated.
    sub.arg(file.clone().short(None))
        .mut_arg("follow", |a| a.short('f'))
}

/// Writes rea.1, rea-COMMAND.1 for each subcommand, rea-jobs.5 and the
/// reference pages (history log, metrics, control protocol).
fn man_pages(out: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(out)?;
    let mut root = public_command();
    // Building names the subcommands `rea-run` (page names) with the bin
    // name `rea run` (their synopsis).
    root.build();
    let subcommands: Vec<clap::Command> = root.get_subcommands().cloned().collect();

    let mut pages: Vec<(String, String)> = Vec::new();
    let sub_pages: Vec<String> = subcommands
        .iter()
        .map(|s| format!("{}(1)", page_name(s)))
        .collect();
    pages.push(("rea.1".into(), rea_1(&root, &sub_pages)?));
    for sub in subcommands {
        let man = Man::new(sub.clone());
        let page = render(&man, &page_name(&sub), "1")?;
        let name = sub.get_name().to_string();
        let Some((_, sections)) = COMMAND_SECTIONS.iter().find(|(c, _)| *c == name) else {
            return Err(io::Error::other(format!(
                "no man/src/commands/rea-{name}.1.in: write its EXIT STATUS and EXAMPLES"
            )));
        };
        let at = page.find(".SH VERSION\n").unwrap_or(page.len());
        let mut page = format!("{}{sections}{}", &page[..at], &page[at..]);
        let mut refs = vec!["rea(1)".to_string(), "rea-jobs(5)".into()];
        refs.extend(related(&name).iter().map(|r| r.to_string()));
        page.push_str(&see_also(&refs));
        pages.push((man.get_filename(), page));
    }
    pages.push((
        "rea-jobs.5".into(),
        REA_JOBS_5.replace("{{VERSION}}", env!("CARGO_PKG_VERSION")),
    ));
    for (name, text) in REFERENCE_PAGES {
        pages.push((
            name.into(),
            text.replace("{{VERSION}}", env!("CARGO_PKG_VERSION")),
        ));
    }

    let mut written = Vec::new();
    for (name, text) in pages {
        let path = out.join(name);
        fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

/// rea(1): clap_mangen's page with EXIT STATUS and the hand-written
/// sections before VERSION, and SEE ALSO last, where readers look for it.
fn rea_1(root: &clap::Command, sub_pages: &[String]) -> io::Result<String> {
    let page = render(&Man::new(root.clone()), "rea", "1")?;
    let mut extra = exit_status();
    extra.push_str(REA_1_SECTIONS);
    let at = page.find(".SH VERSION\n").unwrap_or(page.len());
    let mut out = format!("{}{extra}{}", &page[..at], &page[at..]);
    let mut refs = sub_pages.to_vec();
    refs.extend(
        [
            "rea-jobs(5)",
            "rea-history(5)",
            "rea-metrics(7)",
            "rea-protocol(7)",
            "crontab(5)",
            "systemd.service(5)",
        ]
        .map(String::from),
    );
    out.push_str(&see_also(&refs));
    Ok(out)
}

fn exit_status() -> String {
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_STATUSES {
        s.push_str(&format!(".TP\n.B {code}\n{meaning}\n"));
    }
    s.push_str(
        ".PP\n\\fBrea trigger \\-\\-wait\\fR exits with the exit code of the run it \
         followed, or 128+\\fIN\\fR when signal \\fIN\\fR ended it.\n",
    );
    s
}

/// A SEE ALSO section: `\fBname\fR(N)` references, comma-separated.
fn see_also(refs: &[String]) -> String {
    let list: Vec<String> = refs
        .iter()
        .map(|r| match r.split_once('(') {
            Some((name, rest)) => format!("\\fB{}\\fR({rest}", name.replace('-', "\\-")),
            None => r.clone(),
        })
        .collect();
    format!(".SH \"SEE ALSO\"\n{}\n", list.join(",\n"))
}

/// `rea-run` for the `run` subcommand of a built root command.
fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string()
}

/// Renders a page with our own `.TH` line: clap_mangen writes an empty
/// date unquoted, which shifts the source and manual into the wrong
/// arguments. The date stays empty so regenerating is reproducible.
fn render(man: &Man, title: &str, section: &str) -> io::Result<String> {
    let mut buf = Vec::new();
    man.render(&mut buf)?;
    let page = String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let th = format!(
        ".TH {} {section} \"\" \"rea {}\" \"{MANUAL}\"",
        title.to_uppercase(),
        env!("CARGO_PKG_VERSION")
    );
    Ok(page
        .lines()
        .map(|l| {
            if l.starts_with(".TH ") {
                th.as_str()
            } else {
                l
            }
        })
        .flat_map(|l| [l, "\n"])
        .collect())
}

/// Writes rea.bash, _rea (zsh) and rea.fish: clap_complete's scripts with
/// the dynamic names of `commands::complete` added.
fn completions(out: &Path) -> io::Result<Vec<PathBuf>> {
    use super::complete::{BASH, FISH, ZSH};
    fs::create_dir_all(out)?;
    let mut cmd = public_command();
    let mut written = Vec::new();
    for (shell, name) in [
        (Shell::Bash, "rea.bash"),
        (Shell::Zsh, "_rea"),
        (Shell::Fish, "rea.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd, "rea", &mut buf);
        let text =
            String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let text = match shell {
            Shell::Bash => {
                // Before the registration, which then names _rea_names.
                let at = text
                    .find("\nif [[ \"${BASH_VERSINFO[0]}\"")
                    .ok_or_else(|| unexpected("bash", "the `complete` registration at the end"))?;
                let (body, tail) = text.split_at(at + 1);
                format!(
                    "{body}{}{}",
                    BASH.trim_start(),
                    tail.replace("complete -F _rea ", "complete -F _rea_names ")
                )
            }
            Shell::Zsh => {
                let at = text
                    .rfind("if [ \"$funcstack[1]\" = \"_rea\" ]; then")
                    .ok_or_else(|| unexpected("zsh", "the dispatch at the end"))?;
                format!("{}{ZSH}", &text[..at])
            }
            _ => {
                // fish completes an option's value only from that option's
                // own lines: --tag's ask for names too.
                let mut tagged = 0;
                let mut lines: Vec<String> = Vec::new();
                for line in text.lines() {
                    if line.contains(" -l tag ") && line.ends_with(" -r") {
                        tagged += 1;
                        lines.push(format!("{line} -f -a '(__rea_names)'"));
                    } else {
                        lines.push(line.to_string());
                    }
                }
                if tagged == 0 {
                    return Err(unexpected("fish", "`-l tag ... -r` lines"));
                }
                format!("{}\n{FISH}", lines.join("\n"))
            }
        };
        let path = out.join(name);
        fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

/// clap_complete changed the shape of its script: the dynamic part must be
/// fitted again (a test regenerates the scripts, so this cannot ship).
fn unexpected(shell: &str, what: &str) -> io::Error {
    io::Error::other(format!(
        "clap_complete's {shell} script no longer has {what}; update commands/complete.rs"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_command_differs_from_the_real_one_only_in_hidden_subcommands() {
        let mut full = Cli::command();
        let mut public = public_command();
        assert_eq!(
            public.render_long_help().to_string(),
            full.render_long_help().to_string()
        );
        assert_eq!(
            public.render_version(),
            full.render_version(),
            "version differs"
        );
        let names = |c: &clap::Command| -> Vec<String> {
            c.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name().to_string())
                .collect()
        };
        assert_eq!(names(&public), names(&full));
        assert!(full.find_subcommand("generate").is_some());
        for sub in public.get_subcommands() {
            let name = sub.get_name();
            let (_, text) = COMMAND_SECTIONS
                .iter()
                .find(|(c, _)| *c == name)
                .unwrap_or_else(|| panic!("no hand-written sections for {name}"));
            assert!(text.contains("\n.SH \"EXIT STATUS\"\n"), "{name}");
            assert!(text.contains("\n.SH EXAMPLES\n"), "{name}");
        }
        assert!(public.find_subcommand("generate").is_none());
    }
}
