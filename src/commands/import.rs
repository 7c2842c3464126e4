//! `rea import FILE|-...`: crontabs → a job file. Reads the files, decides
//! each one's format, and prints; the conversion is `rea_config::crontab`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rea_config::crontab::{self, Format, Options, Source};

use crate::cli::{exit, Global, ImportArgs};
use crate::failure::{exit_code, CommandResult, Failure};

pub(crate) fn run(global: &Global, args: &ImportArgs) -> CommandResult {
    if let Some(out) = &args.output {
        if out.exists() && !args.force {
            return Err(Failure::runtime(format!(
                "{} exists; pass --force to overwrite it",
                out.display()
            )));
        }
    }
    if let Err(e) = rea_config::zone::resolve(&args.timezone) {
        return Err(Failure::invalid(format!("--timezone: {e}")));
    }
    if let Some(owner) = &args.owner {
        if owner.is_empty() || owner.contains(|c: char| c.is_whitespace() || c == ':' || c == '\0')
        {
            return Err(Failure::invalid(format!(
                "--owner: {owner:?} is not a user name"
            )));
        }
    }
    let users = known_users();
    let mut sources = Vec::new();
    for file in &args.files {
        let (name, text) = match read(file) {
            Ok(read) => read,
            Err(e) => return Err(Failure::runtime(format!("cannot read {file}: {e}"))),
        };
        let path = Path::new(file);
        let format = if args.system {
            Format::System
        } else if args.user {
            Format::User
        } else if file.starts_with("/etc/") {
            Format::System
        } else if crontab::looks_like_system(&String::from_utf8_lossy(&text), &|u| {
            users.iter().any(|k| k == u)
        }) {
            eprintln!(
                "rea: {name}: read as a system crontab (field 6 is always a user name); pass --user if it is not"
            );
            Format::System
        } else {
            Format::User
        };
        let in_cron_d = file != "-"
            && path
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|d| d == "cron.d");
        sources.push(Source {
            name,
            text,
            format,
            in_cron_d,
        });
    }
    let options = Options {
        timezone: args.timezone.clone(),
        owner: args.owner.clone(),
        pam_env: pam_env(),
    };
    let import = crontab::import(&sources, &options);
    let toml = crontab::render(&import);

    // The output must pass `rea check`; if it does not, the converter has a
    // bug, and writing a broken file would only hide it. `config::parse`
    // does not look at the machine, so neither does this: the users are
    // for `rea check` to verify where the file will run.
    let check_path = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("<import>"));
    if let Err(diags) = rea_config::parse(toml.as_bytes(), &check_path) {
        return Err(Failure::lines(
            exit::FAILURE,
            &diags,
            Some("internal error: the converted job file does not pass `rea check` (please report this with the crontab)".to_string()),
        ));
    }

    for d in &import.diagnostics {
        eprintln!("{d}");
    }
    eprintln!(
        "rea: {} job{} from {} file{}; {} line{} not converted, {} warning{}, {} comment line{} not carried over",
        import.jobs.len(),
        plural(import.jobs.len()),
        sources.len(),
        plural(sources.len()),
        import.errors(),
        plural(import.errors()),
        import.warnings(),
        plural(import.warnings()),
        import.comments,
        plural(import.comments),
    );
    if !options.pam_env.is_empty() {
        eprintln!(
            "rea: not carried: what PAM gives cron's jobs here ({}, from {}); the file's header says how to keep it",
            options.pam_env.keys().cloned().collect::<Vec<_>>().join(", "),
            PAM_ENV_FILES.join(" and ")
        );
    }
    let mut users: Vec<&str> = import
        .jobs
        .iter()
        .filter_map(|j| j.user.as_deref())
        .collect();
    users.sort_unstable();
    users.dedup();
    if !users.is_empty() {
        eprintln!(
            "rea: jobs run as {} (`user`): the daemon must run as root for that, as cron does; `rea check` also verifies that these users exist on this machine",
            users.join(", ")
        );
    }

    if args.install {
        if import.jobs.is_empty() && !args.allow_empty {
            return Err(Failure::invalid(
                "nothing to install: the input has no jobs, and installing it would remove every job of the job file; nothing was changed",
            )
            .hint("`crontab -l` prints nothing when there is no crontab; to empty the job file on purpose, pass --allow-empty"));
        }
        install(global, args, &toml)?;
    } else {
        match &args.output {
            None => print!("{toml}"),
            Some(path) => {
                if let Err(e) = write_private(path, &toml) {
                    return Err(Failure::runtime(format!(
                        "cannot write {}: {e}",
                        path.display()
                    )));
                }
                eprintln!(
                    "rea: wrote {}; check it with: rea check -f {}",
                    path.display(),
                    path.display()
                );
            }
        }
    }
    Ok(exit_code(if import.errors() > 0 {
        exit::INVALID
    } else {
        exit::OK
    }))
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn read(file: &str) -> std::io::Result<(String, Vec<u8>)> {
    let mut text = Vec::new();
    if file == "-" {
        std::io::stdin().read_to_end(&mut text)?;
        Ok(("<stdin>".to_string(), text))
    } else {
        std::fs::File::open(file)?.read_to_end(&mut text)?;
        Ok((file.to_string(), text))
    }
}

/// User names from `/etc/passwd` (plus root), for telling a system crontab
/// from a user crontab by its sixth field.
fn known_users() -> Vec<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let mut users: Vec<String> = passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect();
    users.push("root".to_string());
    users
}

/// Mode 0600: rea refuses a job file that group or others can write.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    let mode = f.metadata()?.permissions().mode() & 0o7777;
    f.set_permissions(std::fs::Permissions::from_mode(mode & !0o022))?;
    Ok(())
}

/// `--install`: the converted crontab becomes a user's own job file
/// (`users/NAME.toml`), through the daemon, which checks it as that user's
/// file and reloads.
fn install(global: &Global, args: &ImportArgs, toml: &str) -> Result<(), Failure> {
    let user = match (&args.owner, rea_host::user::is_root()) {
        (Some(owner), _) => Some(owner.clone()),
        (None, false) => None,
        (None, true) => {
            return Err(Failure::invalid(
                "--install as root needs --owner NAME: whose crontab is this?",
            ))
        }
    };
    let answer = super::request::<rea_proto::protocol::EditPutReply>(
        global,
        &rea_proto::Request::EditPut {
            user,
            content: toml.to_string(),
        },
    )?;
    eprintln!(
        "rea: installed {} ({} jobs)",
        answer.data.path, answer.data.jobs
    );
    Ok(())
}

/// The files Debian's /etc/pam.d/cron has pam_env read for every cron job.
const PAM_ENV_FILES: [&str; 2] = ["/etc/environment", "/etc/default/locale"];

/// The variables pam_env gives cron's jobs on this machine: `KEY=VALUE`
/// lines of [`PAM_ENV_FILES`] (an `export ` prefix and quotes around the
/// value allowed, as pam_env reads them; the locale file last, as PAM
/// applies it). A missing or unreadable file gives nothing: this only
/// informs the header of the converted file.
fn pam_env() -> std::collections::BTreeMap<String, String> {
    use std::io::Read;
    let mut env = std::collections::BTreeMap::new();
    for path in PAM_ENV_FILES {
        let mut text = String::new();
        let read =
            std::fs::File::open(path).and_then(|f| f.take(64 * 1024).read_to_string(&mut text));
        if read.is_err() {
            continue;
        }
        for line in text.lines() {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
            if line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let valid = key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                continue;
            }
            let value = value.trim();
            let value = ['"', '\'']
                .iter()
                .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
                .unwrap_or(value);
            env.insert(key.to_string(), value.to_string());
        }
    }
    env
}
