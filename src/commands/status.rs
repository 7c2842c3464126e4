//! `rea status`: per-job state.

use crate::cli::{Global, StatusArgs};

pub fn run(_global: &Global, _args: &StatusArgs) -> i32 {
    crate::cli::exit::FAILURE
}
