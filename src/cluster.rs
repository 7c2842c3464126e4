//! Cluster mode's settings, shared by the daemon and the query commands:
//! `[cluster]` from the job file, overridden by the environment
//! (`REA_CLUSTER_URL` keeps a password out of the file, `REA_NODE` names
//! the node), made into `rea_pg::Settings`. The URL is never logged or
//! shown (`rea_pg::redact` where it must be named).

use std::path::Path;

use rea_config::{ClusterConfig, Config};

/// The environment variable that overrides `[cluster] url`.
pub(crate) const URL_ENV: &str = "REA_CLUSTER_URL";
/// The environment variable that overrides `[cluster] node`.
pub(crate) const NODE_ENV: &str = "REA_NODE";

/// The settings of this node; `state_dir` (the daemon's) makes its host
/// identity: the same machine and state directory may take over its own
/// name at once after a crash.
pub(crate) fn settings(
    c: &ClusterConfig,
    state_dir: Option<&Path>,
) -> Result<rea_pg::Settings, String> {
    settings_with(c, state_dir, url_from_env())
}

/// `$REA_CLUSTER_URL`, if set and not blank.
fn url_from_env() -> Option<String> {
    std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty())
}

/// [`settings`] with the environment's URL given (the daemon reads it once,
/// then takes it out of its environment).
fn settings_with(
    c: &ClusterConfig,
    state_dir: Option<&Path>,
    env_url: Option<String>,
) -> Result<rea_pg::Settings, String> {
    let url = env_url.or_else(|| c.url.clone()).ok_or_else(|| {
        format!("[cluster] has no url: set url in the job file or {URL_ENV} in the environment")
    })?;
    let node = std::env::var(NODE_ENV)
        .ok()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| c.node.clone())
        .unwrap_or_else(rea_host::hostname);
    if let Some(why) = rea_core::job::name_problem(&node) {
        return Err(format!(
            "invalid node name {node:?} ({NODE_ENV} or the host name): {why}"
        ));
    }
    let host_id = match state_dir {
        Some(dir) => host_id(dir)?,
        None => format!("client:{}", rea_host::hostname()),
    };
    Ok(rea_pg::Settings {
        url,
        cluster: c.name.clone(),
        node,
        host_id,
        lease: c.lease,
        heartbeat: c.heartbeat,
        grace: c.grace,
    })
}

/// Cluster settings for a query command, if the job file has `[cluster]`
/// (a missing or invalid job file means local mode: the command then
/// reads the local state directory as before).
pub(crate) fn for_commands(file: &Path) -> Option<Result<rea_pg::Settings, String>> {
    // Read as the daemon reads it: a FIFO at the path must not hang `rea
    // status`, nor a huge file fill memory.
    let bytes = rea_config::read_file(file).ok()?;
    // Cheap test first: most job files have no [cluster]. A substring
    // search of the text (a 100,000-job file is 13 MB: about 1 ms), not a
    // comparison at every byte (about 60 ms, most of `rea status`).
    let has = match std::str::from_utf8(&bytes) {
        Ok(text) => text.contains("[cluster]"),
        Err(_) => bytes.windows(9).any(|w| w == b"[cluster]"),
    };
    if !has {
        return None;
    }
    let cfg: Config = rea_config::parse(&bytes, file).ok()?;
    Some(settings(cfg.cluster.as_ref()?, None))
}

/// machine-id + state directory + a random id kept in the state
/// directory (cloned machines share a machine-id, not this file).
fn host_id(state_dir: &Path) -> Result<String, String> {
    let machine = std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let path = state_dir.join("node-id");
    let id = match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => {
            let id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
            std::fs::write(&path, format!("{id}\n"))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            id
        }
    };
    Ok(format!("{machine}:{}:{id}", state_dir.display()))
}

/// How `rea run` starts its node when the job file has `[cluster]`: the
/// one place that names cluster mode's backend (PostgreSQL, `rea_pg`).
/// The daemon holds what this returns as a `ClusterNode` and never knows
/// which backend it is.
pub(crate) fn start_node() -> rea_daemon::StartNode {
    // Every run and hook of the daemon's own user inherits its environment,
    // and the URL may carry the database's password: it is read once, here,
    // and taken out of the environment before the daemon starts a thread or
    // a job (this runs before the daemon's runtime exists).
    let env_url = url_from_env();
    std::env::remove_var(URL_ENV);
    std::sync::Arc::new(move |c, state_dir, events| {
        let settings = settings_with(c, Some(state_dir), env_url.clone())?;
        tracing::info!(
            cluster = settings.cluster.as_str(),
            node = settings.node.as_str(),
            database = %rea_pg::redact(&settings.url),
            lease_ms = settings.lease.as_millis() as u64,
            "cluster mode"
        );
        let node: Box<dyn rea_store::cluster::ClusterNode> =
            Box::new(rea_pg::Node::start(settings, events));
        Ok(node)
    })
}
