//! Text as a schedule: `Schedule::parse` never panics, and an accepted
//! expression plans strictly increasing instants (see checks.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::cron(data));
