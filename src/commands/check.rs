//! `rea check`: validate the job files (the main file and the ones beside
//! it) and what they need of this machine.

use std::process::ExitCode;

use rea_config::{Diagnostic, LoadOptions};
use serde_json::{json, Value};

use crate::cli::{exit, CheckArgs, Global};
use crate::failure::{self, CommandResult, Failure};
use rea_daemon::jobfiles::{HostChecks, JobFiles};

fn diag_json(d: &Diagnostic) -> Value {
    json!({ "file": d.file, "line": d.line, "col": d.col, "message": d.message, "hint": d.hint })
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

pub(crate) fn run(global: &Global, args: &CheckArgs) -> CommandResult {
    let path = super::job_file_in_use(global);
    let options = LoadOptions {
        allow_insecure_permissions: args.allow_insecure,
    };
    let checks = if args.no_host_checks {
        HostChecks::Off
    } else {
        HostChecks::Strict
    };
    let mut files = JobFiles::new(&path, options, rea_host::user::is_root()).host_checks(checks);
    let result = match files.load(true) {
        Ok(Some(loaded)) => Ok(loaded),
        Ok(None) => Err(Vec::new()),
        Err(diags) => Err(diags),
    };
    let (jobs, file_count, warnings, errors): (usize, usize, Vec<Diagnostic>, Vec<Diagnostic>) =
        match &result {
            Ok(l) => (
                l.config.jobs.len(),
                l.config.files.len(),
                l.config.warnings.clone(),
                l.refused
                    .iter()
                    .flat_map(|(_, d)| d.iter().cloned())
                    .collect(),
            ),
            Err(diags) => (0, 0, Vec::new(), diags.clone()),
        };
    let ok = errors.is_empty();
    if args.json {
        println!(
            "{}",
            json!({
                "file": path.display().to_string(),
                "ok": ok,
                "jobs": jobs,
                "errors": errors.iter().map(diag_json).collect::<Vec<_>>(),
                "warnings": warnings.iter().map(diag_json).collect::<Vec<_>>(),
            })
        );
        return if ok {
            failure::ok()
        } else {
            Err(Failure::silent(exit::INVALID))
        };
    }
    for w in &warnings {
        eprintln!("{w}");
    }
    if let Ok(l) = &result {
        for w in unenforceable(&l.config) {
            eprintln!("{}: warning: {w}", path.display());
        }
    }
    if ok {
        let files = if file_count > 1 {
            format!(" in {}", plural(file_count, "file"))
        } else {
            String::new()
        };
        let unchecked = if args.no_host_checks {
            " (users and sendmail not checked: --no-host-checks)"
        } else {
            ""
        };
        println!(
            "{}: {} OK{files}{unchecked}",
            path.display(),
            plural(jobs, "job")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    match &result {
        Ok(l) => {
            for (file, diags) in &l.refused {
                lines.push(format!(
                    "{}: {}",
                    file.display(),
                    plural(diags.len(), "error")
                ));
            }
        }
        Err(_) => lines.push(format!(
            "{}: {}",
            path.display(),
            plural(errors.len(), "error")
        )),
    }
    Err(Failure::lines(exit::INVALID, lines, None))
}

/// Limits of the file that a daemon started here could not enforce (no
/// writable cgroup v2, or the controller not delegated), one sentence each.
/// Looked at without creating anything: the daemon says the same, from
/// what it actually got, when it starts.
fn unenforceable(config: &rea_config::Config) -> Vec<String> {
    let policy = &config.daemon.tenants;
    let tenants = policy
        .users
        .keys()
        .map(|u| (format!("tenant {u}"), policy.for_user(u)))
        .chain(
            (!policy.every_user.is_empty())
                .then(|| ("tenants \"*\"".to_string(), policy.every_user)),
        )
        .map(|(who, l)| (who, l.cgroup.controllers()));
    let wanted: Vec<_> = config
        .jobs
        .iter()
        .map(|j| (format!("job {}", j.name), j.extras().limits.controllers()))
        .chain(tenants)
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let offered = if config.daemon.cgroups {
        rea_exec::cgroup::probe()
    } else {
        Err("cgroups = \"off\" in [daemon]".to_string())
    };
    let mut out = Vec::new();
    for (job, controllers) in wanted {
        for (controller, fields) in controllers {
            let why = match &offered {
                Ok(on) if on.iter().any(|c| c == controller) => continue,
                Ok(_) => format!("the {controller} controller is not enabled for rea here"),
                Err(e) => format!("runs get no cgroup here: {e}"),
            };
            out.push(format!(
                "{job}: {} not enforced on this host ({why})",
                fields.join(", ")
            ));
        }
    }
    out
}
