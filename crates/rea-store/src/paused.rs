//! Which jobs an operator paused: the set survives restarts. The daemon
//! sees the [`PausedStore`] trait; [`PausedFile`] is the embedded backend,
//! `<state-dir>/paused.json` (a JSON array of job names) replaced
//! atomically on every change.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the paused set lives.
pub trait PausedStore: Send {
    /// The set as last saved (empty if never saved). The error is a
    /// sentence for people saying what to do.
    fn load(&self) -> Result<BTreeSet<String>, String>;
    /// Replaces the saved set.
    fn save(&mut self, paused: &BTreeSet<String>) -> Result<(), String>;
}

/// `paused.json` in a state directory.
#[derive(Debug, Clone)]
pub struct PausedFile {
    dir: PathBuf,
}

impl PausedFile {
    pub fn new(state_dir: &Path) -> PausedFile {
        PausedFile {
            dir: state_dir.to_path_buf(),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("paused.json")
    }
}

impl PausedStore for PausedFile {
    fn load(&self) -> Result<BTreeSet<String>, String> {
        let path = self.path();
        let read = crate::files::open_read(&path).and_then(|mut f| {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut bytes).map(|_| bytes)
        });
        match read {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!(
                    "{} is unreadable ({e}); remove it to resume every job",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Temp file, fsync, rename: never a torn file.
    fn save(&mut self, paused: &BTreeSet<String>) -> Result<(), String> {
        let path = self.path();
        let tmp = self.dir.join(".paused.json.tmp");
        let text = serde_json::to_vec(paused).map_err(|e| e.to_string())?;
        crate::files::replace_owned(&path, &tmp, &text)
            .map_err(|e| format!("cannot save the paused jobs to {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_set_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = PausedFile::new(dir.path());
        assert!(store.load().unwrap().is_empty());
        let set: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        store.save(&set).unwrap();
        assert_eq!(store.load().unwrap(), set);
        std::fs::write(dir.path().join("paused.json"), "garbage").unwrap();
        assert!(store.load().unwrap_err().contains("remove it"));
    }
}
