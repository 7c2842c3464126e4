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
//! | `server.rs` | the accept loop and connections (forward, answer in order) |
//! | `client.rs` | the blocking client the CLI uses |

use std::path::{Path, PathBuf};

mod client;
pub(crate) mod protocol;
mod remote;
mod server;

pub(crate) use client::{Client, ClientError};
pub(crate) use protocol::{Request, Response, Selector, Submission};
pub(crate) use remote::RemoteHistory;
pub(crate) use server::{bind, serve, Connections, Incoming, Peer, Reply};

/// The socket of a state directory.
pub(crate) fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("rea.sock")
}
