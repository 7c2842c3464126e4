//! A job file checked against this machine: the users it names exist (and
//! this daemon may switch to them), `mailto` has a sendmail. `rea_config`
//! reads only the file; these lookups are explicit and done once per load,
//! so `rea check`, `rea run` and the other commands agree.

use std::path::PathBuf;

use rea_config::{Config, Diagnostic};
use rea_host::user::{current_user_name, is_root, user};
use rea_host::{sendmail, sendmail_places};

/// The sendmail a job file uses: `[daemon] sendmail`, else the usual one.
pub fn sendmail_for(cfg: &Config) -> Option<PathBuf> {
    match &cfg.daemon.sendmail {
        Some(p) => p.exists().then(|| p.clone()),
        None => sendmail(),
    }
}

/// `cfg` checked against this machine for commands that only read the
/// schedule (`rea list`, `rea next`, offline `rea status`): the machine's
/// errors become warnings, so a CI runner or a workstation without a job's
/// `user` can still list the file, and one job's missing user does not hide
/// another job's next fire.
pub fn with_lenient_host_checks(mut cfg: Config) -> Result<Config, Vec<Diagnostic>> {
    let host = check(&cfg);
    cfg.warnings
        .extend(host.errors.into_iter().map(Diagnostic::warning));
    cfg.warnings.extend(host.warnings);
    Ok(cfg)
}

/// `cfg` checked against this machine: users must exist (and be
/// switchable to), `mailto` needs a sendmail (a warning). The machine's
/// warnings travel with the configuration.
pub fn with_host_checks(mut cfg: Config) -> Result<Config, Vec<Diagnostic>> {
    let host = check(&cfg);
    if host.errors.is_empty() {
        cfg.warnings.extend(host.warnings);
        Ok(cfg)
    } else {
        Err(host.errors)
    }
}

/// What the machine says about a valid job file.
#[derive(Debug, Default)]
pub struct Check {
    /// The file cannot work here (a user that does not exist, or that this
    /// daemon may not switch to).
    pub errors: Vec<Diagnostic>,
    /// It works, but not entirely as written (mail without sendmail).
    pub warnings: Vec<Diagnostic>,
}

/// Checks the job file against this machine: `user` must exist, and unless
/// we are root it must be our own user; `mailto` needs a sendmail.
pub fn check(cfg: &Config) -> Check {
    let mut out = Check::default();
    let root = is_root();
    let me = current_user_name();
    let mut mail_warned = false;
    for job in &cfg.jobs {
        if let Some(name) = &job.user {
            match user(name) {
                Err(e) => out.errors.push(cfg.diagnostic_at(
                    &job.name,
                    "user",
                    e,
                    Some("create the user, or fix the name (see /etc/passwd)".into()),
                )),
                Ok(_) if !root && me.as_deref() != Some(name.as_str()) => {
                    out.errors.push(cfg.diagnostic_at(
                        &job.name,
                        "user",
                        format!(
                            "job {:?} runs as {name:?}, but rea runs as {:?} and only root can switch users",
                            job.name,
                            me.clone().unwrap_or_else(|| "an unknown user".into())
                        ),
                        Some("run the daemon as root, or remove \"user\"".into()),
                    ))
                }
                Ok(_) => {}
            }
        }
        if !job.extras().mailto.is_empty() && !mail_warned && sendmail_for(cfg).is_none() {
            mail_warned = true;
            out.warnings.push(cfg.diagnostic_at(
                &job.name,
                "mailto",
                format!(
                    "job {:?} mails its output, but there is no sendmail ({}): no mail will be sent",
                    job.name,
                    cfg.daemon
                        .sendmail
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(sendmail_places)
                ),
                Some("install a mail transfer agent (e.g. msmtp-mta, postfix, exim4) or remove \"mailto\"".into()),
            ).warning());
        }
    }
    out
}
