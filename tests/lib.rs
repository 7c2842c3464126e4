//! Integration tests: the real `rea` binary, real processes, real files and
//! real signals. One test binary, one file per feature.

// The harness's items are `pub` for the test modules, not an API.
#![allow(unreachable_pub)]

mod support;

mod check;
mod cluster;
mod cron_features;
mod daemon;
mod generated;
mod hardening;
mod import;
mod list;
mod live;
mod metrics;
mod next;
mod notify;
mod oneshot;
mod reload;
mod status;
mod torture;
