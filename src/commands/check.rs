//! `rea check`: validate the job file (and what it needs of this machine).

use std::process::ExitCode;

use rea_config::{Diagnostic, LoadOptions};
use serde_json::{json, Value};

use crate::cli::{exit, CheckArgs, Global};
use crate::failure::{self, Failure, Outcome};

fn diag_json(d: &Diagnostic) -> Value {
    json!({ "file": d.file, "line": d.line, "col": d.col, "message": d.message, "hint": d.hint })
}

pub(crate) fn run(global: &Global, args: &CheckArgs) -> Outcome {
    let path = super::job_file(global);
    let options = LoadOptions {
        allow_insecure_permissions: args.allow_insecure,
    };
    let result = if args.no_host_checks {
        rea_config::load_with(&path, options)
    } else {
        crate::host::load(&path, options)
    };
    if args.json {
        let (ok, jobs, errors, warnings) = match &result {
            Ok(cfg) => (true, cfg.jobs.len(), Vec::new(), cfg.warnings.clone()),
            Err(diags) => (false, 0, diags.clone(), Vec::new()),
        };
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
    match result {
        Ok(cfg) => {
            for w in &cfg.warnings {
                eprintln!("{w}");
            }
            let n = cfg.jobs.len();
            println!(
                "{}: {n} job{} OK{}",
                path.display(),
                if n == 1 { "" } else { "s" },
                if args.no_host_checks {
                    " (users and sendmail not checked: --no-host-checks)"
                } else {
                    ""
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(diags) => {
            let summary = format!(
                "{}: {} error{}",
                path.display(),
                diags.len(),
                if diags.len() == 1 { "" } else { "s" }
            );
            let mut lines: Vec<String> = diags.iter().map(ToString::to_string).collect();
            lines.push(summary);
            Err(Failure::lines(exit::INVALID, lines, None))
        }
    }
}
