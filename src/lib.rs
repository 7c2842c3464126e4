//! rea: a cron replacement for servers. The binary is `src/main.rs`; this
//! library holds everything so tests and benchmarks can drive the pure cores.

pub mod backoff;
pub mod config;
pub mod duration;
pub mod executor;
pub mod history;
pub mod schedule;
pub mod suggest;
pub mod zone;
