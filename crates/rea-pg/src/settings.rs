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

/// `url` with every password replaced by `***`, in each form libpq reads:
/// a URI's userinfo (`postgresql://user:pass@host`, the password possibly
/// holding `/`, `@`, `:` or `?`, percent-encoded or not), a URI parameter
/// (`?password=...&...`), and a key=value string (`password=x`, `password
/// = x`, `password='quoted \' value'`). Anything it cannot read is shown
/// as `***` whole rather than risk showing a secret.
pub fn redact(url: &str) -> String {
    let trimmed = url.trim_start();
    for scheme in ["postgresql://", "postgres://"] {
        if let Some(rest) = trimmed.strip_prefix(scheme) {
            return format!("{scheme}{}", redact_uri(rest));
        }
    }
    redact_conninfo(url).unwrap_or_else(|| "***".to_string())
}

/// After the scheme: `[userinfo@]hosts[/db][?params]`. The userinfo ends
/// at the last `@` (a password may hold `@`, `/` or `?` unencoded, which
/// libpq's own parser takes as far as that `@`); an `@` in a parameter
/// makes more of the text hidden, never less.
fn redact_uri(rest: &str) -> String {
    let (userinfo, hosts) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = String::new();
    if let Some(u) = userinfo {
        match u.find(':') {
            Some(c) => out.push_str(&format!("{}:***@", &u[..c])),
            None => out.push_str(&format!("{}@", redact_query(u))),
        }
    }
    out.push_str(&redact_query(hosts));
    out
}

/// `...?k=v&password=x&...` with the password's value hidden.
fn redact_query(s: &str) -> String {
    let Some((path, params)) = s.split_once('?') else {
        return s.to_string();
    };
    let parts: Vec<String> = params
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if is_password_key(k) => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

/// `password` as libpq reads a key (URI parameters may percent-encode it).
fn is_password_key(key: &str) -> bool {
    let k = key.trim().to_ascii_lowercase();
    k == "password" || k == "%70assword" || k.replace("%61", "a") == "password"
}

/// A key=value string, tokenised as libpq does: `key [ws] = [ws] value`,
/// the value single-quoted (with `\\` escapes) or running to the next
/// white space. None when it does not parse.
fn redact_conninfo(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() {
            out.push(bytes[i] as char);
            i += 1;
            continue;
        }
        let key_start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &s[key_start..i];
        let mut j = i;
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        if j >= bytes.len() || bytes[j] != b'=' {
            return None;
        }
        let eq_and_space = &s[i..=j];
        j += 1;
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        let value_start = j;
        if j < bytes.len() && bytes[j] == b'\'' {
            j += 1;
            loop {
                match bytes.get(j) {
                    None => return None,
                    Some(b'\\') => j += 2,
                    Some(b'\'') => {
                        j += 1;
                        break;
                    }
                    Some(_) => j += 1,
                }
            }
        } else {
            while j < bytes.len() && !bytes[j].is_ascii_whitespace() {
                if bytes[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
        }
        let value = s.get(value_start..j.min(bytes.len()))?;
        let gap = &s[i + eq_and_space.len()..value_start];
        out.push_str(key);
        out.push_str(eq_and_space);
        out.push_str(gap);
        if key.eq_ignore_ascii_case("password") {
            out.push_str("***");
        } else {
            out.push_str(value);
        }
        i = j.min(bytes.len());
    }
    Some(out)
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
        // No password in the URL: libpq's password file, if one matches.
        if let Some(warning) = crate::passfile::apply(&mut cfg) {
            tracing::warn!("cluster: {warning}");
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
/// a database error is only "db error") or with its causes (its Display of
/// a failed connection is only "error connecting to server": the refused
/// port, the unknown host, the TLS or authentication failure is the
/// source's).
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
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

    /// Every form libpq accepts a password in, with the characters that
    /// broke the earlier redaction (`/`, spaces, quotes, `@`).
    /// A refused connection says why (the port, not only "error
    /// connecting to server").
    #[tokio::test]
    async fn a_connection_error_names_its_cause() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let url = format!("host=127.0.0.1 port={port} user=rea dbname=rea connect_timeout=2");
        let e = url
            .parse::<tokio_postgres::Config>()
            .expect("config")
            .connect(tokio_postgres::NoTls)
            .await
            .err()
            .expect("nothing listens there");
        let text = super::error_text(&e);
        assert!(text.contains("refused"), "{text}");
    }

    #[test]
    fn every_password_form_is_redacted() {
        let secret = "pa/ss@w:rd?x";
        let cases = [
            (
                format!("postgresql://rea:{secret}@db/rea"),
                "postgresql://rea:***@db/rea".to_string(),
            ),
            (
                "postgresql://rea:pa%2Fss%40w@db:5432/rea?sslmode=require".into(),
                "postgresql://rea:***@db:5432/rea?sslmode=require".into(),
            ),
            (
                "postgres://rea:only@/rea?host=/run/postgresql".into(),
                "postgres://rea:***@/rea?host=/run/postgresql".into(),
            ),
            (
                "postgresql:///rea?user=rea&password=s3cr/et&host=/tmp".into(),
                "postgresql:///rea?user=rea&password=***&host=/tmp".into(),
            ),
            (
                "postgresql://db/rea?%70assword=s3cret".into(),
                "postgresql://db/rea?%70assword=***".into(),
            ),
            (
                "host=db password = s3cr/et user=rea".into(),
                "host=db password = *** user=rea".into(),
            ),
            (
                "host=db password='a b \\' c' dbname=rea".into(),
                "host=db password=*** dbname=rea".into(),
            ),
            ("password=x".into(), "password=***".into()),
            (
                "  PASSWORD=x host=db".into(),
                "  PASSWORD=*** host=db".into(),
            ),
            ("host=db password='unterminated".into(), "***".into()),
            (
                "postgresql://db/rea?password=s3cret&user=a@b".into(),
                "postgresql://db/rea?password=***&user=a@b".into(),
            ),
        ];
        for (url, want) in cases {
            let got = redact(&url);
            assert_eq!(got, want, "{url}");
            for leak in ["s3cr", "pa/ss", "pa%2F", "a b", "only", "unterminated"] {
                assert!(!got.contains(leak), "{url} -> {got}");
            }
        }
    }
}
