//! `rea top`: the terminal view (`rea_top`), started on the state
//! directory's daemon. `e` in it runs this same program's `rea edit`,
//! with the same global options.

use std::ffi::OsString;

use crate::cli::{exit, Global, TopArgs};
use crate::failure::{CommandResult, Failure};

pub(crate) fn run(global: &Global, args: &TopArgs) -> CommandResult {
    let state_dir = super::state_dir(global)?;
    let program = std::env::current_exe()
        .map(OsString::from)
        .unwrap_or_else(|_| OsString::from("rea"));
    let mut edit = vec![program, "--state-dir".into(), state_dir.clone().into()];
    if let Some(file) = &global.file {
        edit.push("--file".into());
        edit.push(file.into());
    }
    edit.push("edit".into());
    let options = rea_top::Options {
        state_dir,
        timeout: global.client_timeout,
        utc: args.utc,
        color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        edit,
        // Tests only: a key that makes rea top panic (the panic hook's
        // test, tests/top.rs), as REA_TEST_CLOCK_SKEW_MS is for the clock.
        panic_on_key: std::env::var("REA_TEST_TOP_PANIC_ON_KEY")
            .ok()
            .and_then(|v| v.chars().next()),
    };
    match rea_top::run(options) {
        Ok(rea_top::Ended::Quit) => crate::failure::ok(),
        // Ended by a signal, the terminal restored: as a shell reports it.
        Ok(rea_top::Ended::Signal(sig)) => Err(Failure::silent(128 + sig)),
        Err(rea_top::TopError::NoDaemon(m)) => Err(Failure::new(exit::NO_DAEMON, m)),
        Err(rea_top::TopError::Other(m)) => Err(Failure::runtime(m)),
    }
}
