//! Cluster mode: several rea nodes on one PostgreSQL. Every node computes
//! every schedule and claims each occurrence with one conditional statement
//! on the job's row (a leaderless high-water mark, with the overlap and
//! pause decisions taken on the same row); leases live on the database's
//! clock and are renewed on a connection of their own; a live node that
//! stayed responsive through a dead node's lease window convicts it and
//! records its runs `interrupted` (queuing retries where the job has
//! `retry`); every ownership write is conditional on the writer's live
//! lease, and each started run carries a cluster-wide increasing fence
//! (`REA_FENCE`). The SQL is in `sql/` (see its README).
//!
//! | file | owns |
//! |---|---|
//! | `settings.rs` | [`Settings`]: where the database is, who this node is, lease timings; connecting |
//! | `migrate.rs` | the embedded migrations, applied under an advisory lock |
//! | `backlog.rs` | run starts and ends waiting for the database, bounded in records and bytes |
//! | `node/` | [`Node`]: the daemon's side, one file per concern (its module doc has the map) — `mod.rs` the handle and its [`ClusterNode`] side, `heartbeat.rs` the lease, `task.rs` the main task's command loop, `claims.rs`, `runs.rs` (run starts and ends through the backlog), `sweeper.rs` (with retries and queued occurrences), `oneshots.rs`, `jobs.rs` (published definitions, pauses), `peers.rs` (the watch of the other nodes for the live views), `statements.rs` (the SQL, prepared) |
//! | `reader.rs` | [`Reader`]: the cluster-wide answers of `rea status`, `history`, `logs`, `pending`, `audit` (blocking; no daemon needed); its history side passes `rea_store::conformance::run_store` (`tests/pg_history.rs`) |
//!
//! No pool: a node holds four connections (heartbeat; everything else
//! one statement at a time; the audit log; the watch of its peers for the
//! live views), a command one.

mod backlog;
mod migrate;
mod node;
mod passfile;
mod reader;
mod settings;

pub use migrate::migrate;
pub use node::peers::{bench_look, bench_seed};
pub use node::{pipelined, Node};
pub use rea_store::cluster::{ClusterNode, JobDef, NodeEvent, NodeHealth, SubmitError};
pub use reader::{Cancel, ClusterStatus, JobRow, NodeRow, PendingRow, Reader};
pub use settings::{redact, Settings};
