//! `rea reload`: the daemon re-reads the job file now.

use crate::cli::{exit, Global};
use crate::control::Request;

pub fn run(global: &Global) -> i32 {
    let mut client = match super::connect(global) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match super::ask(&mut client, &Request::Reload) {
        Ok(data) => {
            println!("reloaded: {} jobs", data["jobs"].as_u64().unwrap_or(0));
            exit::OK
        }
        Err(code) => code,
    }
}
