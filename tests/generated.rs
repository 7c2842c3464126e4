//! The files generated from the code and committed: man pages, shell
//! completions, and the systemd unit that must agree with the command line.
//! Each is checked by running the real program that reads it: the binary's
//! generator, bash, groff, systemd-analyze.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{rea_bin, Env};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The regular files directly inside `dir` (not `man/src/`, the sources).
fn files_in(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Runs `rea generate WHAT --out TMP/DIR` and compares with `DIR/` of the
/// repository, file by file, both ways.
fn assert_fresh(what: &str, dir: &str) {
    let env = Env::new();
    let out = env.path(dir);
    let out_str = out.to_string_lossy().into_owned();
    env.rea(&["generate", what, "--out", &out_str]).ok();
    let regenerate = format!("cargo run -- generate {what} --out {dir}");
    let generated = files_in(&out);
    let committed = files_in(&repo(dir));
    assert!(!generated.is_empty(), "rea generate {what} wrote nothing");
    for name in &generated {
        let fresh = fs::read_to_string(out.join(name)).expect("read generated");
        let old = fs::read_to_string(repo(dir).join(name)).unwrap_or_default();
        assert!(
            committed.contains(name),
            "{dir}/{name} is generated but not committed; run `{regenerate}` and commit it"
        );
        if fresh != old {
            let line = fresh
                .lines()
                .zip(old.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| fresh.lines().count().min(old.lines().count()));
            panic!(
                "{dir}/{name} is out of date (first difference at line {}); run `{regenerate}` and commit the result",
                line + 1
            );
        }
    }
    if let Some(name) = committed.difference(&generated).next() {
        panic!("{dir}/{name} is no longer generated; delete it (`git rm {dir}/{name}`)");
    }
}

#[test]
fn committed_man_pages_are_what_the_binary_generates() {
    assert_fresh("man", "man");
}

#[test]
fn committed_completions_are_what_the_binary_generates() {
    assert_fresh("completions", "completions");
}

#[test]
fn the_generator_is_hidden_from_help() {
    let env = Env::new();
    let help = env.rea(&["--help"]);
    help.ok().stdout_has("trigger");
    assert!(
        !help.stdout.contains("generate"),
        "generate shows in --help:\n{}",
        help.stdout
    );
}

/// Completes `words` (the last one is the word under the cursor) the way
/// bash does on TAB: load the script, set COMP_WORDS/COMP_CWORD, call the
/// function the script registered for `rea`, print COMPREPLY.
fn bash_complete(words: &[&str]) -> Vec<String> {
    let script = r#"
        set -u
        source "$REA_COMPLETION" || exit 90
        spec=$(complete -p rea) || exit 91
        fn=$(printf '%s\n' "$spec" | sed -n 's/.*-F \([^ ]*\).*/\1/p')
        [ -n "$fn" ] || exit 92
        COMP_WORDS=("$@")
        COMP_CWORD=$(( $# - 1 ))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD-1]}
        "$fn" rea "$cur" "$prev"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .arg("--norc")
        .arg("--noprofile")
        .arg("-c")
        .arg(script)
        .arg("bash")
        .args(words)
        .env("REA_COMPLETION", repo("completions/rea.bash"))
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "bash failed ({}) completing {words:?}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_subcommands() {
    assert_eq!(bash_complete(&["rea", "tri"]), ["trigger"]);
    let all = bash_complete(&["rea", ""]);
    for sub in ["run", "check", "next", "history", "logs", "--file"] {
        assert!(all.iter().any(|w| w == sub), "{sub} missing from {all:?}");
    }
    assert!(
        !all.iter().any(|w| w == "generate"),
        "the hidden generate command is offered: {all:?}"
    );
}

#[test]
fn bash_completes_options_and_their_values() {
    let got = bash_complete(&["rea", "history", "--st"]);
    assert!(got.iter().any(|w| w == "--status"), "{got:?}");
    assert!(got.iter().all(|w| w.starts_with("--st")), "{got:?}");
    let statuses = bash_complete(&["rea", "history", "--status", "t"]);
    assert_eq!(statuses, ["timed_out"]);
    let run = bash_complete(&["rea", "run", "--"]);
    for opt in ["--allow-insecure", "--log-format", "--file", "--state-dir"] {
        assert!(run.iter().any(|w| w == opt), "{opt} missing from {run:?}");
    }
}

#[test]
fn man_pages_have_their_sections_and_refer_to_each_other() {
    let rea1 = fs::read_to_string(repo("man/rea.1")).expect("man/rea.1");
    let mut at = 0;
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH OPTIONS",
        ".SH SUBCOMMANDS",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH EXAMPLES",
        ".SH \"SEE ALSO\"",
    ] {
        let found = rea1[at..]
            .find(&format!("\n{section}\n"))
            .unwrap_or_else(|| panic!("man/rea.1 lacks {section} (or has it out of order)"));
        at += found + 1;
    }
    for needle in [
        "REA_FILE",
        "REA_STATE_DIR",
        "RUST_LOG",
        "NO_COLOR",
        "REA_JOB",
        "REA_RUN_ID",
        "REA_SCHEDULED_AT",
        "REA_ATTEMPT",
        "REA_TRIGGER",
        "history.jsonl",
        "rea.sock",
        "rea.lock",
        "paused.json",
        "\\fBrea\\-jobs\\fR(5)",
    ] {
        assert!(rea1.contains(needle), "man/rea.1 does not mention {needle}");
    }
    // Every subcommand page exists and is named in rea(1)'s SEE ALSO.
    let see_also = &rea1[rea1.find(".SH \"SEE ALSO\"").unwrap_or(0)..];
    for page in files_in(&repo("man")) {
        let Some(sub) = page.strip_prefix("rea-").and_then(|p| p.strip_suffix(".1")) else {
            continue;
        };
        assert!(
            see_also.contains(&format!("\\fBrea\\-{}\\fR(1)", sub.replace('-', "\\-"))),
            "rea(1) SEE ALSO does not name {page}"
        );
    }
    for sub in ["run", "check", "trigger", "history"] {
        assert!(
            repo(&format!("man/rea-{sub}.1")).exists(),
            "no man/rea-{sub}.1"
        );
    }
    // The reference pages: what the daemon shows beyond the command line.
    for page in ["rea-history.5", "rea-metrics.7", "rea-protocol.7"] {
        let (name, section) = page.split_once('.').unwrap();
        assert!(repo(&format!("man/{page}")).exists(), "no man/{page}");
        assert!(
            see_also.contains(&format!("\\fB{}\\fR({section})", name.replace('-', "\\-"))),
            "rea(1) SEE ALSO does not name {page}"
        );
    }
}

#[test]
fn every_command_page_has_exit_status_and_examples() {
    let mut pages = 0;
    for page in files_in(&repo("man")) {
        if !(page.starts_with("rea-") && page.ends_with(".1")) {
            continue;
        }
        pages += 1;
        let text = fs::read_to_string(repo(&format!("man/{page}"))).unwrap();
        let mut at = 0;
        for section in [
            ".SH OPTIONS",
            ".SH \"EXIT STATUS\"",
            ".SH EXAMPLES",
            ".SH \"SEE ALSO\"",
        ] {
            let found = text[at..]
                .find(&format!("\n{section}\n"))
                .unwrap_or_else(|| panic!("man/{page} lacks {section} (or has it out of order)"));
            at += found + 1;
        }
        let status = &text[text.find(".SH \"EXIT STATUS\"").unwrap()..];
        assert!(
            status.contains("\n.B 0\n"),
            "man/{page}: EXIT STATUS without 0"
        );
    }
    assert!(pages >= 16, "only {pages} command pages");
}

#[test]
fn the_reference_pages_document_the_history_schema_and_the_protocol() {
    let history = fs::read_to_string(repo("man/rea-history.5")).expect("man/rea-history.5");
    for field in [
        "ts",
        "event",
        "job",
        "run",
        "attempt",
        "trigger",
        "status",
        "scheduled",
        "started",
        "ended",
        "duration_ms",
        "waited_ms",
        "exit_code",
        "signal",
        "output",
        "output_bytes",
        "max_rss_kb",
        "reason",
        "count",
        "detail",
    ] {
        assert!(
            [
                format!("\\fB{field}\\fR"),
                format!("\\fB{field}\n"),
                format!(".B {field}\\fR"),
                format!(".B {field}\n"),
            ]
            .iter()
            .any(|spelling| history.contains(spelling.as_str())),
            "man/rea-history.5 does not document the field {field}"
        );
    }
    let protocol = fs::read_to_string(repo("man/rea-protocol.7")).expect("man/rea-protocol.7");
    for op in [
        "submit", "cancel", "pending", "trigger", "follow", "pause", "status", "reload", "ping",
    ] {
        assert!(
            protocol.contains(op),
            "man/rea-protocol.7 does not document {op}"
        );
    }
    for code in [
        "bad_request",
        "unsupported_version",
        "unknown_job",
        "duplicate",
        "refused",
        "invalid_config",
    ] {
        assert!(
            protocol.contains(code),
            "man/rea-protocol.7 does not document {code}"
        );
    }
}

/// Every field jobs.example.toml (the tour of every field) sets: keys of
/// `[defaults]`, `[daemon]`, each job, and their `retry` tables.
fn example_keys() -> BTreeSet<String> {
    let text = fs::read_to_string(repo("jobs.example.toml")).expect("jobs.example.toml");
    let doc: toml::Table = text.parse().expect("jobs.example.toml parses");
    let table = |v: Option<&toml::Value>| v.and_then(toml::Value::as_table).cloned();
    let mut tables: Vec<toml::Table> = Vec::new();
    tables.extend(table(doc.get("defaults")));
    tables.extend(table(doc.get("daemon")));
    for job in table(doc.get("jobs")).unwrap_or_default().values() {
        tables.extend(table(Some(job)));
    }
    let mut keys = BTreeSet::new();
    for t in &tables {
        keys.extend(t.keys().cloned());
        keys.extend(table(t.get("retry")).unwrap_or_default().keys().cloned());
    }
    keys
}

#[test]
fn rea_jobs_5_documents_every_field_of_the_example_file() {
    let page = fs::read_to_string(repo("man/rea-jobs.5")).expect("man/rea-jobs.5");
    let keys = example_keys();
    for must in [
        "schedule",
        "command",
        "max_concurrent",
        "attempts",
        "factor",
    ] {
        assert!(keys.contains(must), "the key walk missed {must}: {keys:?}");
    }
    for key in &keys {
        assert!(
            page.contains(&format!("\\fB{key}\\fR (")),
            "man/rea-jobs.5 has no entry for the field {key:?} that jobs.example.toml uses"
        );
    }
    for section in [
        ".SH \"JOB FIELDS\"",
        ".SH \"DAEMON FIELDS\"",
        ".SH SCHEDULES",
        ".SH TIME",
        ".SH \"DURATIONS AND SIZES\"",
    ] {
        assert!(page.contains(section), "man/rea-jobs.5 lacks {section}");
    }
    for needle in ["@every", "@reboot", "@annually", "@midnight", "Lord Howe"] {
        assert!(page.contains(needle), "man/rea-jobs.5 lacks {needle}");
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn man_pages_render_without_warnings() {
    if !have("groff") {
        eprintln!("groff is not installed: man pages not rendered");
        return;
    }
    for name in files_in(&repo("man")) {
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(repo(&format!("man/{name}")))
            .output()
            .expect("run groff");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "groff warns about man/{name}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The service's `Key=value` lines (comments and sections skipped).
fn unit_setting(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

const UNIT: &str = "contrib/rea.service";

#[test]
fn the_systemd_unit_starts_rea_with_flags_it_accepts() {
    let unit = fs::read_to_string(repo(UNIT)).expect("contrib/rea.service");
    let exec = unit_setting(&unit, "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart expected: {exec:?}");
    let words: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(words[..2], ["/usr/bin/rea", "run"], "{words:?}");
    let help = Env::new().rea(&["run", "--help"]);
    help.ok();
    for flag in words.iter().filter(|w| w.starts_with("--")) {
        assert!(
            help.stdout.contains(flag),
            "{UNIT} passes {flag}, which `rea run --help` does not list"
        );
    }
    // The arguments parse (values where values belong): clap would refuse
    // anything else before it reached --help.
    let mut args: Vec<&str> = words[1..].to_vec();
    args.push("--help");
    Env::new().rea(&args).ok();

    for (key, value) in [
        ("Type", "notify"),
        ("KillMode", "mixed"),
        ("Restart", "on-failure"),
        ("StateDirectory", "rea"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
    ] {
        assert_eq!(unit_setting(&unit, key), [value], "{UNIT}: {key}");
    }
    // TimeoutStopSec must leave rea its shutdown_grace (default 30s) plus a
    // kill_grace (default 10s) to stop its jobs itself.
    let stop = unit_setting(&unit, "TimeoutStopSec");
    let secs: u64 = stop
        .first()
        .and_then(|s| s.strip_suffix('s'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{UNIT}: TimeoutStopSec in seconds expected, got {stop:?}"));
    assert!(secs > 40, "{UNIT}: TimeoutStopSec={secs}s is too short");
}

#[test]
fn systemd_accepts_the_unit() {
    if !have("systemd-analyze") {
        eprintln!("systemd-analyze is not installed: unit not verified");
        return;
    }
    // verify wants ExecStart's program to exist: point it at this build.
    let env = Env::new();
    let unit = fs::read_to_string(repo(UNIT))
        .expect("contrib/rea.service")
        .replace("/usr/bin/rea", rea_bin());
    let path = env.write("rea.service", &unit);
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    // Only complaints about this file count; the sandbox may lack parts of
    // a booted system that verify also looks at.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("rea.service"))
        .collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze verify:\n{}",
        ours.join("\n")
    );
}

/// README's set-up commands use plain `cargo run -- ...`: with several
/// binaries in the workspace's default members (rea and rea-bench), cargo
/// refuses that unless the root package names its `default-run`.
#[test]
fn the_readme_cargo_run_commands_pick_rea() {
    let readme = fs::read_to_string(repo("README.md")).expect("README.md");
    let plain_runs: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("cargo run") && !l.contains(" -p ") && !l.contains("--bin"))
        .collect();
    assert!(
        !plain_runs.is_empty(),
        "README.md has no `cargo run` command to check"
    );
    let manifest: toml::Table = fs::read_to_string(repo("Cargo.toml"))
        .expect("Cargo.toml")
        .parse()
        .expect("Cargo.toml parses");
    let members: Vec<String> = manifest["workspace"]["default-members"]
        .as_array()
        .expect("default-members")
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    let binaries = members
        .iter()
        .filter(|m| {
            let dir = repo(m);
            dir.join("src/main.rs").exists() || dir.join("src/bin").is_dir()
        })
        .count();
    if binaries > 1 {
        assert_eq!(
            manifest["package"].get("default-run").and_then(|v| v.as_str()),
            Some("rea"),
            "{binaries} binaries in the default members and no default-run = \"rea\": README's {plain_runs:?} would fail"
        );
    }
}

/// Issue #25 item 9: rea(1) and rea-jobs(5) name the drop-ins and the
/// users' files, as the generator writes them.
#[test]
fn rea_1_and_rea_jobs_5_name_the_drop_ins_and_the_users_files() {
    let env = Env::new();
    let out = env.path("man");
    env.rea(&["generate", "man", "--out", &out.to_string_lossy()])
        .ok();
    for page in ["rea.1", "rea-jobs.5"] {
        let text = fs::read_to_string(out.join(page)).expect("generated page");
        for needle in ["DIR/jobs.d/*.toml", "DIR/users/NAME.toml"] {
            assert!(text.contains(needle), "{page} does not mention {needle}");
        }
    }
}
