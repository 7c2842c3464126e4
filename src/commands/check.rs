//! `rea check`: validate the job file.

use serde_json::{json, Value};

use crate::cli::{exit, CheckArgs, Global};
use crate::config::{self, Diagnostic};

fn diag_json(d: &Diagnostic) -> Value {
    json!({ "file": d.file, "line": d.line, "col": d.col, "message": d.message, "hint": d.hint })
}

pub fn run(global: &Global, args: &CheckArgs) -> i32 {
    let path = super::job_file(global);
    let options = config::LoadOptions {
        allow_insecure_permissions: args.allow_insecure,
    };
    let result = config::load_with(&path, options);
    if args.json {
        let (ok, jobs, errors, warnings) = match &result {
            Ok(cfg) => (
                true,
                cfg.jobs.len(),
                Vec::new(),
                crate::host::check(cfg).warnings,
            ),
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
        return if ok { exit::OK } else { exit::INVALID };
    }
    match result {
        Ok(cfg) => {
            for w in &cfg.warnings {
                eprintln!("{}", super::warning_text(w));
            }
            let n = cfg.jobs.len();
            println!(
                "{}: {n} job{} OK",
                path.display(),
                if n == 1 { "" } else { "s" }
            );
            exit::OK
        }
        Err(diags) => {
            super::print_diagnostics(&diags);
            eprintln!(
                "{}: {} error{}",
                path.display(),
                diags.len(),
                if diags.len() == 1 { "" } else { "s" }
            );
            exit::INVALID
        }
    }
}
