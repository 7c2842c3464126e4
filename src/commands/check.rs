//! `rea check`: validate the job file.

use crate::cli::{exit, CheckArgs, Global};
use crate::config;

pub fn run(global: &Global, args: &CheckArgs) -> i32 {
    let path = super::job_file(global);
    let options = config::LoadOptions {
        allow_insecure_permissions: args.allow_insecure,
    };
    match config::load_with(&path, options) {
        Ok(cfg) => {
            for w in crate::host::check(&cfg).warnings {
                eprintln!("{}", super::warning_text(&w));
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
