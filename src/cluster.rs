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
    let url = std::env::var(URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| c.url.clone())
        .ok_or_else(|| {
            format!("[cluster] has no url: set url in the job file or {URL_ENV} in the environment")
        })?;
    let node = std::env::var(NODE_ENV)
        .ok()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| c.node.clone())
        .unwrap_or_else(crate::host::hostname);
    if let Some(why) = rea_core::job::name_problem(&node) {
        return Err(format!(
            "invalid node name {node:?} ({NODE_ENV} or the host name): {why}"
        ));
    }
    let host_id = match state_dir {
        Some(dir) => host_id(dir)?,
        None => format!("client:{}", crate::host::hostname()),
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
    // Cheap test first: most job files have no [cluster].
    if !bytes.windows(9).any(|w| w == b"[cluster]") {
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

/// Digests of the job definitions this node runs: one per job, and one
/// over all of them (nodes whose definitions differ are flagged by
/// `rea status`; the `[cluster]` table itself, which names the node, is
/// not part of it).
pub(crate) fn digests(cfg: &Config) -> (String, Vec<rea_pg::JobDef>) {
    use std::hash::{Hash, Hasher};
    let mut jobs: Vec<rea_pg::JobDef> = cfg
        .jobs
        .iter()
        .map(|j| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            format!("{j:?}").hash(&mut h);
            rea_pg::JobDef {
                name: j.name.clone(),
                digest: format!("{:016x}", h.finish()),
                overlap: j.overlap,
            }
        })
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for j in &jobs {
        (&j.name, &j.digest).hash(&mut h);
    }
    (format!("{:016x}", h.finish()), jobs)
}
