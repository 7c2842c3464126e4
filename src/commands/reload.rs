//! `rea reload`: the daemon re-reads the job file now.

use crate::cli::{exit, Global};
use crate::control::Request;

pub fn run(global: &Global) -> i32 {
    match super::request(global, &Request::Reload) {
        Ok(data) => {
            let jobs = data["jobs"].as_u64().unwrap_or(0);
            if data["unchanged"] == true {
                println!("the job file is unchanged: {jobs} jobs in force");
            } else {
                println!("reloaded: {jobs} jobs");
            }
            exit::OK
        }
        Err(code) => code,
    }
}
