//! rea: a cron replacement for servers. The binary is `src/main.rs`; this
//! library holds everything so tests and benchmarks can drive the pure cores.

pub mod backoff;
pub mod cli;
pub mod commands;
pub mod config;
pub mod control;
pub mod crontab;
pub mod daemon;
pub mod dispatcher;
pub mod duration;
pub mod engine;
pub mod executor;
pub mod history;
pub mod host;
pub mod metrics;
pub mod notify;
pub mod oneshot;
pub mod schedule;
pub mod state_dir;
pub mod suggest;
pub mod table;
pub mod timer;
pub mod watch;
pub mod zone;
