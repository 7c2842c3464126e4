//! Integration tests: the real `rea` binary, real processes, real files and
//! real signals. One test binary, one file per feature.

mod support;

mod check;
mod daemon;
mod generated;
mod import;
mod list;
mod live;
mod next;
mod oneshot;
mod reload;
mod status;
mod torture;
