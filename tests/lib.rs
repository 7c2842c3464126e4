//! Integration tests: the real `rea` binary, real processes, real files and
//! real signals. One test binary, one file per feature.

// The harness's items are `pub` for the test modules, not an API.
#![allow(unreachable_pub)]

mod support;

mod accounts;
mod alerts;
mod audit;
mod check;
mod cluster;
mod completion;
mod cron_features;
mod cron_parity;
mod daemon;
mod edit;
mod follow;
mod generated;
mod governed;
mod hardening;
mod import;
mod journald;
mod kill;
mod list;
mod live;
mod local_time;
mod metrics;
mod next;
mod notify;
mod oneshot;
mod package;
mod params;
mod pg_history;
mod quotas;
mod reload;
mod status;
mod summaries;
mod supervision;
mod tenants;
mod top;
mod torture;
mod users;
mod web;
mod webhooks;
