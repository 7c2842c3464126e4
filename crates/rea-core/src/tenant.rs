//! Tenants: the owner of a job file. Root's main file and its drop-ins are
//! the system tenant; `users/NAME.toml` is the tenant NAME.
//!
//! A job's identity is (tenant, name), carried in one string so that every
//! store keyed by a job's name (history, output, pauses, one-shots, metrics
//! labels, cluster rows) keys by its owner too: the system's jobs keep their
//! bare names (`backup`), a user's are qualified with her name and a slash
//! (`alice/backup`). A job name may not contain `/` (see
//! [`crate::job::name_problem`]) and a user name cannot, so the spelling is
//! unambiguous, and history written before tenants existed (bare names)
//! reads as the system's.
//!
//! A user addresses and sees her own jobs unqualified; root sees and
//! addresses everyone's qualified. [`Tenant::qualify`] and
//! [`Tenant::local`] translate at that boundary and nowhere else.

use std::fmt;

/// The separator between a tenant and a job's own name.
pub const SEPARATOR: char = '/';

/// Who owns a job (or a record, a pause, a one-shot): by its qualified name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tenant<'a> {
    /// Root's main job file and its drop-ins (and root's one-shots).
    System,
    /// The user of `users/NAME.toml`.
    User(&'a str),
}

impl<'a> Tenant<'a> {
    /// The owner of the job, record or one-shot named `name` (qualified).
    pub fn of(name: &'a str) -> Tenant<'a> {
        match name.split_once(SEPARATOR) {
            Some((user, _)) if !user.is_empty() => Tenant::User(user),
            _ => Tenant::System,
        }
    }

    /// The owner named `owner`, as a job's `owner` field holds it (None:
    /// the system).
    pub fn from_owner(owner: Option<&'a str>) -> Tenant<'a> {
        owner.map_or(Tenant::System, Tenant::User)
    }

    /// The user's name, None for the system tenant.
    pub fn user(&self) -> Option<&'a str> {
        match self {
            Tenant::System => None,
            Tenant::User(u) => Some(u),
        }
    }

    /// `local` (a name as its owner writes it) qualified with this tenant.
    pub fn qualify(&self, local: &str) -> String {
        match self {
            Tenant::System => local.to_string(),
            Tenant::User(u) => format!("{u}{SEPARATOR}{local}"),
        }
    }

    /// `name` as this tenant writes it: its own names unqualified (a user's
    /// `alice/backup` is her `backup`), anyone else's None.
    pub fn local<'n>(&self, name: &'n str) -> Option<&'n str> {
        match (self, Tenant::of(name)) {
            (Tenant::System, Tenant::System) => Some(name),
            (Tenant::User(me), Tenant::User(owner)) if *me == owner => {
                Some(&name[owner.len() + SEPARATOR.len_utf8()..])
            }
            _ => None,
        }
    }

    /// Whether this tenant owns `name` (qualified).
    pub fn owns(&self, name: &str) -> bool {
        Tenant::of(name) == *self
    }

    /// A name for places that hold one word per tenant (a cgroup directory,
    /// a metrics label, a history file): `system`, or `user-NAME` so that a
    /// user called "system" cannot take the system's.
    pub fn key(&self) -> String {
        match self {
            Tenant::System => "system".to_string(),
            Tenant::User(u) => format!("user-{u}"),
        }
    }
}

impl fmt::Display for Tenant<'_> {
    /// `system`, or the user's name: how the tenant is shown to people.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tenant::System => f.write_str("system"),
            Tenant::User(u) => f.write_str(u),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qualified_name_names_its_owner_and_a_bare_one_the_system() {
        assert_eq!(Tenant::of("backup"), Tenant::System);
        assert_eq!(Tenant::of("alice/backup"), Tenant::User("alice"));
        // Not a user's: a leading slash is no tenant (and no valid name).
        assert_eq!(Tenant::of("/backup"), Tenant::System);
        assert_eq!(Tenant::User("alice").qualify("backup"), "alice/backup");
        assert_eq!(Tenant::System.qualify("backup"), "backup");
    }

    #[test]
    fn a_tenant_sees_its_own_names_unqualified_and_no_one_elses() {
        let alice = Tenant::User("alice");
        assert_eq!(alice.local("alice/backup"), Some("backup"));
        assert_eq!(alice.local("bob/backup"), None);
        assert_eq!(alice.local("backup"), None);
        // "ali" is not a prefix of alice's names.
        assert_eq!(Tenant::User("ali").local("alice/backup"), None);
        assert_eq!(Tenant::System.local("backup"), Some("backup"));
        assert_eq!(Tenant::System.local("alice/backup"), None);
        assert!(alice.owns("alice/x") && !alice.owns("x") && !alice.owns("alicex/y"));
    }

    #[test]
    fn keys_of_tenants_never_collide() {
        assert_ne!(Tenant::System.key(), Tenant::User("system").key());
        assert_eq!(Tenant::User("alice").key(), "user-alice");
        assert_eq!(Tenant::User("alice").to_string(), "alice");
    }
}
