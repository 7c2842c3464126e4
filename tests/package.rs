//! The Debian package, installed for real on this machine: `dpkg -i` of the
//! `.deb` that `REA_DEB` names (`.ci/run` builds it with `cargo deb` and
//! sets it), then what a sysadmin relies on: the files at Debian's paths,
//! `man rea`, bash completion of a job name from the installed script, `rea
//! check` reading the installed `/etc/rea/jobs.toml`; then an upgrade, which
//! keeps the job file as the admin edited it; `dpkg -r`, which keeps it and
//! the state; and `dpkg -P`, which leaves nothing.
//!
//! It writes to /etc, /usr and /var/lib, so it needs root and a machine
//! without rea: where a rea package or any of its paths is already there, it
//! touches nothing. A guard purges what it installed when an assertion
//! fails. Other tests take root's default job file, /etc/rea/jobs.toml, to
//! be absent, so it runs alone:
//!
//! `REA_DEB=target/debian/rea_VERSION-1_ARCH.deb cargo test --locked --test integration package`
//!
//! Without `REA_DEB`, or where it cannot run, it is skipped loudly; with
//! `REA_REQUIRE_DEB=1` (CI) that is a failure.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// What the package installs outside /usr/share/man (whose pages come from
/// the repository's man/), as Cargo.toml's `[package.metadata.deb]` lists.
const FILES: &[&str] = &[
    "/usr/bin/rea",
    "/usr/lib/systemd/system/rea.service",
    "/usr/share/bash-completion/completions/rea",
    "/usr/share/zsh/vendor-completions/_rea",
    "/usr/share/fish/vendor_completions.d/rea.fish",
    "/usr/share/doc/rea/README.Debian",
    "/usr/share/doc/rea/README.md",
    "/usr/share/doc/rea/copyright",
    "/usr/share/doc/rea/changelog.Debian.gz",
    "/usr/share/doc/rea/examples/jobs.example.toml",
    "/usr/share/lintian/overrides/rea",
];

/// Kept on remove, deleted on purge.
const JOB_FILE: &str = "/etc/rea/jobs.toml";
const STATE: &str = "/var/lib/rea";

/// Made by deb-systemd-helper when the postinst enables the unit.
const ENABLED: &str = "/etc/systemd/system/multi-user.target.wants/rea.service";

/// Everything the test may create, none of which may exist before it.
fn own_paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = FILES.iter().map(PathBuf::from).collect();
    v.extend(man_pages());
    v.extend(
        [
            "/etc/rea",
            STATE,
            "/usr/share/doc/rea",
            ENABLED,
            "/etc/systemd/system/rea.service",
            "/var/lib/systemd/deb-systemd-helper-enabled/rea.service.dsh-also",
            "/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/rea.service",
            "/var/lib/systemd/deb-systemd-helper-masked/rea.service",
        ]
        .map(PathBuf::from),
    );
    v
}

/// The installed path of each page in the repository's man/ (`rea.1` →
/// /usr/share/man/man1/rea.1.gz).
fn man_pages() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut pages: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("man/")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let section = name.rsplit_once('.')?.1;
            matches!(section, "1" | "5" | "7")
                .then(|| PathBuf::from(format!("/usr/share/man/man{section}/{name}.gz")))
        })
        .collect();
    pages.sort();
    pages
}

/// The `.deb` to install, or None after saying loudly why not (a panic
/// under `REA_REQUIRE_DEB=1`).
fn deb() -> Option<PathBuf> {
    let refuse = |why: String| {
        if std::env::var("REA_REQUIRE_DEB").is_ok_and(|v| v == "1") {
            panic!("the package test cannot run: {why}; REA_REQUIRE_DEB=1 demands it");
        }
        // Straight to the terminal: the test harness keeps eprintln!'s
        // output of a passing test to itself.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!!!!! SKIPPED the package test: {why} !!!!!!!!\n"
        );
        None
    };
    let Some(deb) = std::env::var_os("REA_DEB").map(PathBuf::from) else {
        return refuse("REA_DEB does not name a .deb (build one with `cargo deb --locked`)".into());
    };
    if !deb.is_file() {
        return refuse(format!("REA_DEB={} is not a file", deb.display()));
    }
    if !crate::support::is_root() {
        return refuse("installing a package needs root".into());
    }
    if !runs_alone() {
        return refuse(
            "it installs /etc/rea/jobs.toml, which other tests take to be absent: run it alone \
             (cargo test --test integration package)"
                .into(),
        );
    }
    if let Some(status) = dpkg_status() {
        if status != "not-installed" {
            return refuse(format!(
                "a rea package is on this machine ({status}); it is left alone"
            ));
        }
    }
    if let Some(there) = own_paths()
        .into_iter()
        .find(|p| p.symlink_metadata().is_ok())
    {
        return refuse(format!(
            "{} exists on this machine; it is left alone",
            there.display()
        ));
    }
    Some(fs::canonicalize(&deb).expect("the .deb's path"))
}

/// Whether the test binary was asked for this module's tests only (the
/// filter on its command line), so that no other test runs meanwhile.
fn runs_alone() -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    !filters.is_empty() && filters.iter().all(|f| f.starts_with("package"))
}

/// dpkg's word for the rea package's state (`installed`, `config-files`,
/// `not-installed`, ...), or None when dpkg has never heard of it.
fn dpkg_status() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", "rea"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn dpkg_field(field: &str) -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", &format!("-f=${{{field}}}"), "rea"])
        .output()
        .expect("run dpkg-query");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dpkg ARGS`, non-interactive; panics with its output when it fails.
fn dpkg(args: &[&str]) -> Output {
    let out = Command::new("dpkg")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .expect("run dpkg");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("$ dpkg {}\n{text}", args.join(" "));
    assert!(
        out.status.success(),
        "dpkg {args:?} failed ({}):\n{text}",
        out.status
    );
    out
}

/// The installed `rea` (or another program) in an empty directory, which is
/// also its HOME (no one's shell configuration), with none of rea's
/// variables: what root gets at a prompt on the server.
fn installed(program: &str, args: &[&str]) -> Output {
    let cwd = tempfile::tempdir().expect("tempdir");
    Command::new(program)
        .args(args)
        .current_dir(cwd.path())
        .env("HOME", cwd.path())
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env_remove("REA_FILE")
        .env_remove("REA_STATE_DIR")
        .env_remove("XDG_STATE_HOME")
        .env_remove("MANPATH")
        .env("MANPAGER", "cat")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

fn stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(program: &str) -> bool {
    installed("sh", &["-c", &format!("command -v {program}")])
        .status
        .success()
}

/// Every path where installing, removing or purging a package writes:
/// /etc and the /usr directories the package uses, and in /var/lib its
/// top level, deb-systemd-helper's records, rea's state and rea's files in
/// dpkg's database (the rest of which dpkg rewrites on every run).
fn snapshot() -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for root in [
        "/etc",
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib/systemd",
        "/usr/share/man",
        "/usr/share/doc",
        "/usr/share/bash-completion",
        "/usr/share/zsh",
        "/usr/share/fish",
        "/usr/share/lintian",
        "/var/lib/systemd",
        STATE,
    ] {
        walk(Path::new(root), &mut out);
    }
    for entry in fs::read_dir("/var/lib").into_iter().flatten().flatten() {
        out.insert(entry.path());
    }
    for entry in fs::read_dir("/var/lib/dpkg/info")
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("rea.") {
            out.insert(entry.path());
        }
    }
    out
}

fn walk(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.insert(path.clone());
        if is_dir {
            walk(&path, out);
        }
    }
}

/// Puts the machine back as the test found it when it stops half-way:
/// purges the package, then deletes what is left of the paths the test
/// checked were absent before it started.
struct Cleanup {
    armed: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        eprintln!("package test: stopped half-way, purging what it installed");
        let _ = Command::new("dpkg")
            .args(["--purge", "--force-remove-reinstreq", "rea"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status();
        for unit in [["purge", "rea.service"], ["unmask", "rea.service"]] {
            let _ = Command::new("deb-systemd-helper")
                .args(unit)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        for path in own_paths() {
            let Ok(meta) = path.symlink_metadata() else {
                continue;
            };
            let removed = if meta.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            match removed {
                Ok(()) => eprintln!("package test: removed {}", path.display()),
                Err(e) => eprintln!("package test: cannot remove {}: {e}", path.display()),
            }
        }
    }
}

fn deb_version(deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .args(["--field"])
        .arg(deb)
        .arg("Version")
        .output()
        .expect("run dpkg-deb");
    stdout(&out, "dpkg-deb --field Version").trim().to_string()
}

/// The same package with a higher version (`VERSION+upgrade`), built in
/// `dir`, to upgrade to.
fn newer_version(deb: &Path, dir: &Path) -> PathBuf {
    let tree = dir.join("tree");
    let unpacked = Command::new("dpkg-deb")
        .arg("--raw-extract")
        .arg(deb)
        .arg(&tree)
        .output()
        .expect("run dpkg-deb");
    stdout(&unpacked, "dpkg-deb --raw-extract");
    let control = tree.join("DEBIAN/control");
    let text = fs::read_to_string(&control).expect("DEBIAN/control");
    let version = deb_version(deb);
    let raised = text.replace(
        &format!("\nVersion: {version}\n"),
        &format!("\nVersion: {version}+upgrade\n"),
    );
    assert_ne!(text, raised, "no Version field in {text}");
    fs::write(&control, raised).expect("write DEBIAN/control");
    let newer = dir.join("rea-newer.deb");
    let built = Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&tree)
        .arg(&newer)
        .output()
        .expect("run dpkg-deb");
    stdout(&built, "dpkg-deb --build");
    newer
}

/// bash completing `words` with the installed script, as a root shell on the
/// server does: through bash-completion's loader when it is installed (which
/// finds the script by the command's name), else by sourcing the script.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = r#"
        if [ -r /usr/share/bash-completion/bash_completion ]; then
            . /usr/share/bash-completion/bash_completion || exit 90
            __load_completion rea || exit 91
        else
            . /usr/share/bash-completion/completions/rea || exit 92
        fi
        fn=$(complete -p rea | sed -n 's/.*-F \([^ ]*\).*/\1/p')
        [ -n "$fn" ] || exit 93
        COMP_WORDS=("$@")
        COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        "$fn" rea "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let mut args = vec!["--norc", "--noprofile", "-c", script, "bash"];
    args.extend(words);
    let out = installed("bash", &args);
    let mut v: Vec<String> = stdout(&out, &format!("bash completing {words:?}"))
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

fn mode(path: &str) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn installs_then_removes_and_purges_to_nothing() {
    let Some(deb) = deb() else {
        return;
    };
    let before = snapshot();
    let mut cleanup = Cleanup { armed: true };
    dpkg(&["-i", deb.to_str().expect("a UTF-8 path")]);
    assert_eq!(dpkg_status().as_deref(), Some("installed"));

    // The files, at Debian's paths.
    let missing: Vec<PathBuf> = FILES
        .iter()
        .map(PathBuf::from)
        .chain(man_pages())
        .filter(|p| !p.is_file())
        .collect();
    assert!(missing.is_empty(), "not installed: {missing:?}");
    assert_eq!(mode("/usr/bin/rea"), 0o755);
    assert!(
        dpkg_field("Depends").contains("libc6"),
        "a glibc-linked build (NSS users), Depends: {}",
        dpkg_field("Depends")
    );
    let unit = fs::read_to_string("/usr/lib/systemd/system/rea.service").expect("the unit");
    assert!(
        unit.contains("\nExecStart=/usr/bin/rea run "),
        "the unit runs the installed rea:\n{unit}"
    );
    // The job file: a conffile, root's, writable by root only (rea refuses
    // anything else), as the empty directories beside it.
    assert!(
        dpkg_field("Conffiles").contains(JOB_FILE),
        "conffiles: {}",
        dpkg_field("Conffiles")
    );
    assert_eq!(mode(JOB_FILE), 0o600);
    assert_eq!(fs::metadata(JOB_FILE).expect("job file").uid(), 0);
    for dir in ["/etc/rea/jobs.d", "/etc/rea/users"] {
        assert!(Path::new(dir).is_dir(), "{dir} is missing");
        assert_eq!(mode(dir), 0o755, "{dir}");
    }
    assert!(Path::new(STATE).is_dir(), "the postinst creates {STATE}");
    assert_eq!(mode(STATE), 0o700, "{STATE} holds the jobs' output");
    // Enabled on install through deb-systemd-helper, which works without
    // systemd running (and then nothing is started).
    let link = fs::canonicalize(ENABLED)
        .unwrap_or_else(|e| panic!("{ENABLED}: the unit is not enabled: {e}"));
    assert_eq!(link, Path::new("/usr/lib/systemd/system/rea.service"));

    // man finds the pages and renders them.
    assert!(
        have("man"),
        "man is not installed (Debian: apt-get install man-db)"
    );
    let found = stdout(&installed("man", &["-w", "rea"]), "man -w rea");
    assert_eq!(found.trim(), "/usr/share/man/man1/rea.1.gz");
    let found = stdout(
        &installed("man", &["-w", "5", "rea-jobs"]),
        "man -w 5 rea-jobs",
    );
    assert_eq!(found.trim(), "/usr/share/man/man5/rea-jobs.5.gz");
    let page = stdout(&installed("man", &["rea"]), "man rea");
    assert!(page.contains("SYNOPSIS"), "man rea:\n{page}");

    // `rea check` reads the installed job file by default: valid, no jobs.
    let check = installed("/usr/bin/rea", &["check"]);
    assert_eq!(
        stdout(&check, "rea check"),
        format!("{JOB_FILE}: 0 jobs OK\n")
    );

    // A job added to it, as an admin would: check and completion see it.
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(JOB_FILE)
        .expect("open the job file");
    file.write_all(b"\n[jobs.package-probe]\nschedule = \"@yearly\"\ncommand = \"true\"\n")
        .expect("append a job");
    drop(file);
    let check = installed("/usr/bin/rea", &["check"]);
    assert_eq!(
        stdout(&check, "rea check"),
        format!("{JOB_FILE}: 1 job OK\n")
    );
    if !Path::new("/usr/share/bash-completion/bash_completion").exists() {
        eprintln!(
            "package test: bash-completion is not installed; the script is sourced, \
             its loader not tried"
        );
    }
    assert_eq!(
        bash_completes(&["rea", "trigger", "package-p"]),
        ["package-probe"]
    );
    assert_eq!(bash_completes(&["rea", "trigger", ""]), ["package-probe"]);
    if have("zsh") {
        let fpath = stdout(
            &installed("zsh", &["-f", "-c", "print -rl -- $fpath"]),
            "zsh's fpath",
        );
        assert!(
            fpath
                .lines()
                .any(|d| d == "/usr/share/zsh/vendor-completions"),
            "zsh does not read the directory of _rea:\n{fpath}"
        );
    }
    if have("fish") {
        let offered = stdout(
            &installed("fish", &["-c", "complete -C 'rea trigger package-p'"]),
            "fish completing",
        );
        assert!(
            offered.lines().any(|l| l.starts_with("package-probe")),
            "fish did not load rea.fish from its vendor directory: {offered:?}"
        );
    }

    // An upgrade (this package again, as a newer version) keeps the edited
    // job file and the state: no prompt, nothing overwritten.
    let state_probe = Path::new(STATE).join("package-test-probe");
    fs::write(&state_probe, "a run's history\n").expect("write into the state");
    let work = tempfile::tempdir().expect("tempdir");
    let newer = newer_version(&deb, work.path());
    dpkg(&["-i", newer.to_str().expect("a UTF-8 path")]);
    assert_eq!(
        dpkg_field("Version"),
        format!("{}+upgrade", deb_version(&deb))
    );
    assert!(
        fs::read_to_string(JOB_FILE)
            .unwrap_or_default()
            .contains("[jobs.package-probe]"),
        "an upgrade must keep the edited job file"
    );
    assert!(state_probe.exists(), "an upgrade must keep {STATE}");
    assert_eq!(mode(JOB_FILE), 0o600);

    // Remove: the program goes, the job file (with the admin's edit) and
    // the state stay.
    dpkg(&["-r", "rea"]);
    assert_eq!(dpkg_status().as_deref(), Some("config-files"));
    let left: Vec<PathBuf> = FILES
        .iter()
        .map(PathBuf::from)
        .chain(man_pages())
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    assert!(left.is_empty(), "dpkg -r left program files: {left:?}");
    assert!(
        fs::read_to_string(JOB_FILE)
            .unwrap_or_default()
            .contains("[jobs.package-probe]"),
        "dpkg -r must keep the edited job file"
    );
    assert!(state_probe.exists(), "dpkg -r must keep {STATE}");
    // The unit's enablement is configuration too (dh_installsystemd's
    // way): kept on remove, with the unit masked so that nothing starts it
    // while its program is gone; purge forgets both.
    assert_eq!(
        fs::read_link("/etc/systemd/system/rea.service").ok(),
        Some(PathBuf::from("/dev/null")),
        "dpkg -r masks the unit"
    );

    // Purge: nothing left, nothing else gone.
    dpkg(&["-P", "rea"]);
    assert!(
        matches!(dpkg_status().as_deref(), None | Some("not-installed")),
        "dpkg still knows rea: {:?}",
        dpkg_status()
    );
    let after = snapshot();
    let left: Vec<&PathBuf> = after.difference(&before).collect();
    let gone: Vec<&PathBuf> = before.difference(&after).collect();
    assert!(
        left.is_empty() && gone.is_empty(),
        "install, remove and purge changed the machine:\n  left behind: {left:#?}\n  gone: {gone:#?}"
    );
    cleanup.armed = false;
}
