//! The control socket: how `rea trigger`, `pause`, `resume`, `reload`,
//! `status` (and services submitting one-shot jobs) talk to a running daemon.
//!
//! A Unix stream socket `<state-dir>/rea.sock`, mode 0600 inside the 0700
//! state directory, and every peer's uid checked with `SO_PEERCRED`: only
//! the daemon's own user and root may use it. Requests on one connection
//! are answered in order, so clients may pipeline them. The README
//! documents the protocol for services that speak it directly.
//!
//! | file | owns |
//! |---|---|
//! | `protocol.rs` | the wire types, shared by server and client |
//! | `client.rs` | the blocking client the CLI uses |
//! | `remote.rs` | the history and the audit log as the daemon tells them, for users who cannot read the state directory |
//!
//! The server side (accepting connections, answering in order) is the
//! daemon's: `rea_daemon`'s `server` module.

mod client;
pub mod live;
pub mod protocol;
mod remote;

pub use client::{Client, ClientError};
pub use protocol::{Request, Response, Selector, Submission};
pub use remote::{RemoteAudit, RemoteHistory};

pub use rea_host::state_dir::socket_path;
