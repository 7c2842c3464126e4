//! The password file, as libpq reads it (`PGPASSFILE`, else `~/.pgpass`):
//! used when the cluster URL names no password, so the password stays out
//! of the job file, the environment of runs and every log.
//!
//! Each line is `hostname:port:database:username:password`; `*` matches
//! anything, `\:` and `\\` are a literal colon and backslash, `#` starts a
//! comment line, and the first matching line wins. A host given as a unix
//! socket directory matches `localhost`, as in libpq. A file that its group
//! or others can read is ignored (with a warning), as libpq does.
//!
//! Not here: the connection itself (`settings.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio_postgres::config::Host;
use tokio_postgres::Config;

/// Where libpq looks: `PGPASSFILE`, else `$HOME/.pgpass`.
fn path() -> Option<PathBuf> {
    match std::env::var_os("PGPASSFILE") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => std::env::var_os("HOME").map(|h| Path::new(&h).join(".pgpass")),
    }
}

/// Sets `cfg`'s password from the password file when it has none and a
/// line matches; a warning (to log) when the file is there but refused.
pub(crate) fn apply(cfg: &mut Config) -> Option<String> {
    if cfg.get_password().is_some() {
        return None;
    }
    let path = path()?;
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Some(format!(
            "the password file {} is ignored: its group or others can read it (chmod 0600 it)",
            path.display()
        ));
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return Some(format!("the password file {}: {e}", path.display())),
    };
    let user = cfg.get_user()?.to_string();
    let db = cfg.get_dbname().unwrap_or(&user).to_string();
    let ports = cfg.get_ports().to_vec();
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(_) => "localhost".to_string(),
        })
        .collect();
    let hosts = if hosts.is_empty() {
        vec!["localhost".to_string()]
    } else {
        hosts
    };
    for (i, host) in hosts.iter().enumerate() {
        let port = ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432)
            .to_string();
        if let Some(pw) = lookup(&text, host, &port, &db, &user) {
            cfg.password(pw);
            return None;
        }
    }
    None
}

/// The password of the first line matching (host, port, database, user).
fn lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .find_map(|line| {
            let f = fields(line);
            if f.len() != 5 {
                return None;
            }
            let want = [host, port, db, user];
            f.iter()
                .zip(want)
                .all(|(have, want)| have == "*" || have == want)
                .then(|| f[4].clone())
        })
}

/// A line's fields, unescaped (`\:` and `\\`; a backslash before anything
/// else stands for what follows).
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(f)) = (chars.next(), out.last_mut()) {
                    f.push(next);
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            c => {
                if let Some(f) = out.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# a comment: skipped
db.example:5432:rea:rea:first\\:one
db.example:*:rea:rea:second
*:*:*:alice:al\\\\ice's
localhost:5433:rea:rea:sock
";

    /// The first matching line wins; `*` matches anything; escapes are
    /// undone; nothing matches, nothing.
    #[test]
    fn the_first_matching_line_gives_the_password() {
        let l = |h, p, d, u| lookup(FILE, h, p, d, u);
        assert_eq!(
            l("db.example", "5432", "rea", "rea").as_deref(),
            Some("first:one")
        );
        assert_eq!(
            l("db.example", "6000", "rea", "rea").as_deref(),
            Some("second")
        );
        assert_eq!(l("other", "1", "x", "alice").as_deref(), Some("al\\ice's"));
        assert_eq!(
            l("localhost", "5433", "rea", "rea").as_deref(),
            Some("sock")
        );
        assert_eq!(l("other", "5432", "rea", "rea"), None);
        assert_eq!(l("db.example", "5432", "other", "rea"), None);
    }

    /// A password may hold colons after the fourth field (they are its
    /// own), and a short line matches nothing.
    #[test]
    fn the_password_field_keeps_its_colons_and_short_lines_match_nothing() {
        assert_eq!(
            lookup("h:1:d:u:a:b:c\n", "h", "1", "d", "u").as_deref(),
            Some("a:b:c")
        );
        assert_eq!(lookup("h:1:d:u\n", "h", "1", "d", "u"), None);
    }

    /// Through a connection configuration: the file named by PGPASSFILE
    /// fills in a missing password (a unix socket is `localhost`), never
    /// replaces one given, and is refused when others can read it.
    #[test]
    fn a_configuration_without_a_password_takes_the_files() {
        let dir = std::env::temp_dir().join(format!("rea-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("pgpass");
        std::fs::write(&file, FILE).expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // No other test of this crate sets PGPASSFILE.
        std::env::set_var("PGPASSFILE", &file);
        let mut cfg: Config = "postgresql://rea@db.example/rea".parse().expect("url");
        assert_eq!(apply(&mut cfg), None);
        assert_eq!(cfg.get_password(), Some(&b"first:one"[..]));
        let mut cfg: Config = "postgresql://rea@/rea?host=/run/pg&port=5433"
            .parse()
            .expect("url");
        apply(&mut cfg);
        assert_eq!(cfg.get_password(), Some(&b"sock"[..]));
        let mut cfg: Config = "postgresql://rea:given@db.example/rea"
            .parse()
            .expect("url");
        apply(&mut cfg);
        assert_eq!(cfg.get_password(), Some(&b"given"[..]));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let mut cfg: Config = "postgresql://rea@db.example/rea".parse().expect("url");
        let warning = apply(&mut cfg).expect("a warning");
        assert!(warning.contains("chmod 0600"), "{warning}");
        assert_eq!(cfg.get_password(), None);
        std::env::remove_var("PGPASSFILE");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
