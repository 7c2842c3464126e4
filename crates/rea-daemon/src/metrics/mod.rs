//! Prometheus metrics: what `GET /metrics` shows (`[daemon] metrics =
//! "IP:PORT"`), and the small HTTP/1.x server inside the daemon that serves
//! it. Absent that setting there is no endpoint and none of this runs.
//!
//! Who writes what. The daemon loop owns [`Metrics`] and feeds it every
//! history record it executes ([`Metrics::observe`]: one map lookup and a
//! few atomic adds, no allocation, because the loop turns thousands of runs
//! per second in benchmarks). Values that are *state* rather than events
//! (running, queued, each job's next fire, whether the job file is valid)
//! are read from the engine only when someone scrapes: the HTTP task asks
//! the loop over a channel ([`Scrape`]), the loop calls
//! [`Metrics::refresh`] and answers, and the task renders. So an idle
//! daemon pays nothing per loop iteration for them, and what a scrape sees
//! is never older than the scrape.
//!
//! No lock of our own: the `prometheus-client` metric types are atomics
//! (counters, gauges) or hold their own short `parking_lot` locks
//! (histograms, label families). The loop and the HTTP tasks run on the
//! daemon's single runtime thread anyway; nothing here is held across an
//! `.await`, which is why a blocking lock, not tokio's, is the right kind.
//!
//! What does not live here: the history log (`rea_store`), deciding
//! anything (the engine), the socket of `rea` commands (`control`).
//!
//! `registry.rs` holds the series, `http.rs` the endpoint.

use rea_config::Config;
use tracing::warn;

use super::Loop;

mod http;
mod registry;

pub(super) use http::{start, Scrape};
pub(super) use registry::Metrics;

/// A reload: new job set; a changed address needs a restart.
pub(super) fn reloaded(metrics: Option<&mut Metrics>, old: &Config, new: &Config) {
    if old.daemon.metrics != new.daemon.metrics {
        warn!(
            "[daemon] metrics changed; the endpoint keeps its address ({}) until rea restarts",
            old.daemon
                .metrics
                .map(|a| a.to_string())
                .unwrap_or_else(|| "none".to_string())
        );
    }
    if let Some(m) = metrics {
        m.set_jobs(new);
    }
}

impl Loop {
    /// A scrape is about to render: bring the state gauges up to date.
    pub(super) fn on_scrape(&mut self, scrape: Scrape) {
        if let Some(m) = &self.metrics {
            m.refresh(
                &self.engine,
                self.files.error().is_none(),
                self.backend.history_health().backlog,
            );
            m.refresh_alerts(&self.engine, rea_store::clock::now());
            m.refresh_webhooks(&self.webhooks.counts());
            if let Some(cl) = self.backend.node() {
                m.refresh_cluster(cl.node.node(), &cl.node.health());
            }
        }
        scrape.done();
    }
}
