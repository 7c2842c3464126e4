//! Bytes as a job file: `rea::config::parse` never panics, locates every
//! error inside the file, and what it accepts is sound (see checks.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::job_file(data));
