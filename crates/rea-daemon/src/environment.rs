//! The environment every run and hook gets, as cron gives a crontab's
//! owner: HOME, USER, LOGNAME, SHELL (and PATH where the daemon gives
//! none), the job's `env`, then `REA_JOB` and `REA_RUN_ID`. A job running
//! as another user than the daemon's gets that only, nothing of the
//! daemon's environment (which may hold root's secrets); also where a job
//! without `dir` starts (its owner's home).

use std::collections::BTreeMap;
use std::path::PathBuf;

use rea_exec as executor;
use rea_host::user::{self as host, User};

/// Whether a job's runs and hooks start from the daemon's environment:
/// those of the daemon's own user do; a job running as another user gets
/// cron's environment and nothing of the daemon's (which may hold root's
/// secrets).
pub(super) fn inherits_daemon_env(user: Option<&User>) -> bool {
    user.is_none_or(|u| u.uid == host::own_uid())
}

/// Whose job it is, as cron sees a crontab's owner: the job's `user`, else
/// the daemon's own.
fn owner(user: Option<&User>) -> Option<&User> {
    match user {
        Some(u) => Some(u),
        None => host::own_user(),
    }
}

/// Where a job without `dir` starts, as cron runs jobs: its owner's home
/// directory ([`RunSpec::home`]: when the run can enter it, else the
/// daemon's own working directory).
pub(super) fn home_dir(user: Option<&User>) -> Option<PathBuf> {
    owner(user)
        .map(|u| u.home.clone())
        .filter(|h| h.is_absolute())
}

/// The variables of a job's run or hook: the owner's variables, `MAILTO`
/// (the job's `mailto`, comma-separated, as cron exports the crontab's
/// MAILTO), the job's `env`, then `REA_JOB` (as its file names it),
/// `REA_TENANT` and `REA_RUN_ID`. On top of the
/// daemon's environment if [`inherits_daemon_env`], else all the run gets.
pub(super) fn run_env(
    user: Option<&User>,
    shell: &str,
    mailto: &[String],
    job_env: &BTreeMap<String, String>,
    name: &str,
    run: &str,
) -> Vec<(String, String)> {
    let mut env = user_env(user, shell);
    if !mailto.is_empty() {
        env.push(("MAILTO".into(), mailto.join(",")));
    }
    env.extend(job_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    // The name as its owner's file writes it, and whose the job is.
    let tenant = rea_core::tenant::Tenant::of(name);
    env.push((
        "REA_JOB".into(),
        tenant.local(name).unwrap_or(name).to_string(),
    ));
    env.push(("REA_TENANT".into(), tenant.to_string()));
    env.push(("REA_RUN_ID".into(), run.to_string()));
    env
}

/// What cron sets for a crontab's owner (the job's `user`, else the
/// daemon's): HOME, USER and LOGNAME from the user database, SHELL = the
/// shell that runs the command (not the user's login shell), and cron's
/// PATH for a run that inherits nothing (another user's) or whose daemon
/// has none (the job's `env` may set its own).
fn user_env(user: Option<&User>, shell: &str) -> Vec<(String, String)> {
    let mut env = Vec::with_capacity(5);
    if let Some(u) = owner(user) {
        env.push(("HOME".into(), u.home.display().to_string()));
        env.push(("USER".into(), u.name.clone()));
        env.push(("LOGNAME".into(), u.name.clone()));
    }
    env.push(("SHELL".into(), shell.to_string()));
    if !inherits_daemon_env(user) || !executor::daemon_has_path() {
        env.push(("PATH".into(), executor::DEFAULT_PATH.to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_env() -> BTreeMap<String, String> {
        [("PATH", "/opt/bin"), ("HOME", "/srv")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn another_users_run_gets_crons_environment() {
        let nobody = host::user("nobody").expect("nobody exists");
        if nobody.uid == rustix::process::geteuid().as_raw() {
            eprintln!("skipped: runs as nobody");
            return;
        }
        assert!(!inherits_daemon_env(Some(&nobody)));
        let env = run_env(Some(&nobody), "/bin/bash", &[], &BTreeMap::new(), "j", "r1");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "HOME",
                "USER",
                "LOGNAME",
                "SHELL",
                "PATH",
                "REA_JOB",
                "REA_TENANT",
                "REA_RUN_ID"
            ]
        );
        assert!(env.contains(&("PATH".to_string(), "/usr/bin:/bin".to_string())));
        assert!(env.contains(&("SHELL".to_string(), "/bin/bash".to_string())));
        // The job's env comes later, so it wins.
        let env = run_env(Some(&nobody), "/bin/sh", &[], &job_env(), "j", "r1");
        let last = |name: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(last("PATH").as_deref(), Some("/opt/bin"));
        assert_eq!(last("HOME").as_deref(), Some("/srv"));
    }

    #[test]
    fn the_daemons_own_user_keeps_its_environment_with_crons_variables_set() {
        assert!(inherits_daemon_env(None));
        let me = host::own_user().expect("the test runs as a known user");
        assert!(inherits_daemon_env(Some(me)));
        for user in [None, Some(me)] {
            let env = run_env(user, "/bin/sh", &[], &BTreeMap::new(), "j", "r1");
            assert!(!env.iter().any(|(k, _)| k == "PATH"), "{env:?}");
            let home = me.home.display().to_string();
            assert!(env.contains(&("HOME".to_string(), home)), "{env:?}");
            assert!(env.contains(&("LOGNAME".to_string(), me.name.clone())));
            assert!(env.contains(&("SHELL".to_string(), "/bin/sh".to_string())));
        }
    }

    #[test]
    fn runs_without_dir_start_in_the_owners_home() {
        let me = host::own_user().expect("the test runs as a known user");
        if me.home.is_absolute() {
            assert_eq!(home_dir(None), Some(me.home.clone()));
        }
        let mut relative = me.clone();
        relative.home = PathBuf::from("relative/home");
        assert_eq!(home_dir(Some(&relative)), None, "the daemon's cwd then");
    }
}
