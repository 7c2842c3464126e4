//! Where the database is and who this node is, and the one way to connect
//! (timeouts and keepalives matter: liveness is judged by leases, and a
//! half-open socket must never hold a statement for ever).

use std::time::Duration;

use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::{Client, Config, NoTls};

/// A node's cluster settings (`[cluster]` in the job file, with the
/// environment's overrides applied by the program).
#[derive(Clone)]
pub struct Settings {
    /// libpq URL or key=value string; may carry a password, so it is never
    /// logged or shown (see [`redact`]).
    pub url: String,
    /// Several clusters may share one database.
    pub cluster: String,
    /// This node's name, unique in the cluster.
    pub node: String,
    /// Who may take over a live lease of this name at once: the same
    /// machine and state directory (its predecessor there is dead: the
    /// daemon holds the state directory's lock).
    pub host_id: String,
    pub lease: Duration,
    pub heartbeat: Duration,
    /// How long after a lease ended a node is convicted.
    pub grace: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &redact(&self.url))
            .field("cluster", &self.cluster)
            .field("node", &self.node)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("grace", &self.grace)
            .finish()
    }
}

/// `url` with any password replaced by `***` (URL and key=value forms).
pub fn redact(url: &str) -> String {
    if let Some(rest) = url
        .strip_prefix("postgresql://")
        .or_else(|| url.strip_prefix("postgres://"))
    {
        let scheme = &url[..url.len() - rest.len()];
        let (auth_end, _) = rest.find('/').map_or((rest.len(), ()), |i| (i, ()));
        let authority = &rest[..auth_end];
        let mut out = scheme.to_string();
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(c) => out.push_str(&format!("{}:***", &userinfo[..c])),
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        let tail = &rest[auth_end..];
        out.push_str(&redact_pairs(tail, '&'));
        return out;
    }
    redact_pairs(url, ' ')
}

/// `password=...` in a query string or a key=value list.
fn redact_pairs(s: &str, sep: char) -> String {
    s.split(sep)
        .map(|part| {
            let (head, kv) = match part.rfind('?') {
                Some(q) if sep == '&' => (&part[..=q], &part[q + 1..]),
                _ => ("", part),
            };
            if kv.trim_start().starts_with("password=") {
                format!("{head}password=***")
            } else {
                part.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(&sep.to_string())
}

impl Settings {
    /// The connection configuration: the URL, plus the failure-detection
    /// settings every connection of rea uses.
    pub(crate) fn config(&self, application: &str) -> Result<Config, String> {
        let mut cfg: Config = self
            .url
            .parse()
            .map_err(|e| format!("invalid cluster url ({}): {e}", redact(&self.url)))?;
        if cfg.get_dbname().is_none() {
            cfg.dbname("rea");
        }
        let io = self.lease.max(Duration::from_secs(1));
        cfg.application_name(application)
            .connect_timeout(io)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(io.max(Duration::from_secs(5)))
            // after a failover, only ever talk to the primary
            .target_session_attrs(TargetSessionAttrs::ReadWrite);
        Ok(cfg)
    }

    /// One connection, its driver spawned on the current runtime, with
    /// `synchronous_commit = on` (the server's default may be off: a crash
    /// would then lose acknowledged claims).
    pub(crate) async fn connect(&self, application: &str) -> Result<Client, String> {
        let cfg = self.config(application)?;
        let (client, conn) =
            tokio::time::timeout(self.lease.max(Duration::from_secs(2)), cfg.connect(NoTls))
                .await
                .map_err(|_| "connecting to the cluster database timed out".to_string())?
                .map_err(|e| {
                    format!("cannot connect to the cluster database: {}", error_text(&e))
                })?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
            .batch_execute("set synchronous_commit = on")
            .await
            .map_err(|e| error_text(&e))?;
        Ok(client)
    }
}

/// An error's text with the server's message (tokio-postgres' Display of
/// a database error is only "db error").
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(
            redact("postgresql://rea:s3cret@db1:5432,db2/rea?sslmode=disable"),
            "postgresql://rea:***@db1:5432,db2/rea?sslmode=disable"
        );
        assert_eq!(
            redact("postgres://rea@/rea?host=/tmp/x&password=s3cret"),
            "postgres://rea@/rea?host=/tmp/x&password=***"
        );
        assert_eq!(
            redact("host=db user=rea password=s3cret dbname=rea"),
            "host=db user=rea password=*** dbname=rea"
        );
        assert_eq!(redact("postgresql://db/rea"), "postgresql://db/rea");
    }
}
