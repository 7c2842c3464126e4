//! `rea check`: exit codes and every error message a user can meet.

use crate::support::Env;

#[test]
fn the_shipped_example_passes() {
    let env = Env::new();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.example.toml");
    env.rea(&["check", "-f", example])
        .ok()
        .stdout_has("13 jobs OK");
}

#[test]
fn a_valid_file_prints_a_one_line_summary() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let out = env.rea(&["check"]);
    out.ok();
    assert_eq!(
        out.stdout,
        format!("{}: 1 job OK\n", env.jobs_path().display())
    );
}

#[test]
fn every_error_is_reported_with_its_position() {
    let env = Env::new();
    env.jobs(
        "[jobs.a]\nschedule = \"61 * * * *\"\ncomand = \"true\"\n\n[jobs.b]\nschedule = \"@daily\"\ncommand = \"x\"\ntimezone = \"Europe/Berln\"\nretry = { attempts = -1 }\n",
    );
    let out = env.rea(&["check"]);
    out.code(2);
    let f = env.jobs_path().display().to_string();
    out.stderr_has(&format!("{f}:2:13: "))
        .stderr_has(&format!("{f}:3:1: unknown field \"comand\""))
        .stderr_has("did you mean \"command\"?")
        .stderr_has(&format!("{f}:8:12: unknown timezone \"Europe/Berln\""))
        .stderr_has("attempts")
        .stderr_has("errors");
}

/// `rea check` on `toml`, expecting exactly
/// `expected` on stderr (the summary line included).
fn fails_with(toml: &str, expected: &str) {
    let env = Env::new();
    assert_eq!(env.check_fails(toml), expected, "for:\n{toml}");
}

const JOB: &str = "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n";

#[test]
fn unknown_field_with_hint() {
    fails_with(
        "[jobs.a]\nschedule = \"@daily\"\ncomand = \"true\"\ncommand = \"x\"\n",
        "jobs.toml:3:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\njobs.toml: 1 error\n",
    );
}

#[test]
fn unknown_section_with_hint() {
    fails_with(
        "[jbos.a]\nschedule = \"@daily\"\n",
        "jobs.toml:1:2: unknown section \"jbos\"\n  hint: did you mean \"jobs\"?\njobs.toml: 1 error\n",
    );
}

#[test]
fn bad_duration() {
    fails_with(
        &format!("{JOB}timeout = \"5 minutes\"\n"),
        "jobs.toml:4:11: invalid duration \"5 minutes\": a unit is missing after the number (write e.g. \"90s\", \"10m\", \"1h30m\", \"2d\"; units: ms s m h d w)\njobs.toml: 1 error\n",
    );
}

#[test]
fn bad_enum_value_suggests_the_closest() {
    fails_with(
        &format!("{JOB}overlap = \"skp\"\n"),
        "jobs.toml:4:11: \"overlap\" must be one of \"skip\", \"queue\", \"allow\", \"replace\", found \"skp\"\n  hint: did you mean \"skip\"?\njobs.toml: 1 error\n",
    );
}

#[test]
fn retry_attempts_out_of_range_names_the_range() {
    fails_with(
        &format!("{JOB}retry = {{ attempts = -1 }}\n"),
        "jobs.toml:4:22: \"retry.attempts\" must be between 0 and 100, found -1\njobs.toml: 1 error\n",
    );
    fails_with(
        &format!("{JOB}retry = {{ attempts = 101 }}\n"),
        "jobs.toml:4:22: \"retry.attempts\" must be between 0 and 100, found 101\njobs.toml: 1 error\n",
    );
}

#[test]
fn wrong_type() {
    fails_with(
        "[jobs.a]\nschedule = \"@daily\"\ncommand = 5\n",
        "jobs.toml:3:11: expected a string, found an integer\njobs.toml: 1 error\n",
    );
}

#[test]
fn invalid_job_name_suggests_a_valid_one() {
    fails_with(
        "[jobs.\"a b\"]\nschedule = \"@daily\"\ncommand = \"x\"\n",
        "jobs.toml:1:7: invalid job name \"a b\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"a-b\"\njobs.toml: 1 error\n",
    );
}

#[test]
fn missing_command_and_missing_schedule() {
    fails_with(
        "[jobs.a]\nschedule = \"@daily\"\n",
        "jobs.toml:1:1: job \"a\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\njobs.toml: 1 error\n",
    );
    fails_with(
        "[jobs.a]\ncommand = \"x\"\n",
        "jobs.toml:1:1: job \"a\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\njobs.toml: 1 error\n",
    );
}

#[test]
fn unknown_timezone_with_suggestions() {
    let env = Env::new();
    let err = env.check_fails(&format!("{JOB}timezone = \"America/New_Yrok\"\n"));
    assert!(
        err.starts_with("jobs.toml:4:12: unknown timezone \"America/New_Yrok\"\n  hint: did you mean one of \"America/New_York\""),
        "{err}"
    );
    let err = env.check_fails(&format!("{JOB}timezone = \"Mars/Base\"\n"));
    assert_eq!(
        err,
        "jobs.toml:4:12: unknown timezone \"Mars/Base\"\n  hint: use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"\njobs.toml: 1 error\n"
    );
}

#[test]
fn bad_cron_field_points_inside_the_string() {
    // The column is the offending field's, inside the quoted expression.
    fails_with(
        "[jobs.a]\nschedule = \"0 25 * * *\"\ncommand = \"x\"\n",
        "jobs.toml:2:15: hour value 25 is out of range (allowed: 0-23)\njobs.toml: 1 error\n",
    );
    fails_with(
        "[jobs.a]\nschedule = \"0 0 * FOO *\"\ncommand = \"x\"\n",
        "jobs.toml:2:19: unknown month name \"FOO\"\n  hint: names are JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC\njobs.toml: 1 error\n",
    );
    fails_with(
        "[jobs.a]\nschedule = \"0 0 * * * * *\"\ncommand = \"x\"\n",
        "jobs.toml:2:25: 7 fields: Vixie cron has no year field\n  hint: remove the last field; write 5 fields (minute hour day-of-month month day-of-week), or 6 with a leading seconds field\njobs.toml: 1 error\n",
    );
}

#[test]
fn toml_syntax_error_position() {
    fails_with(
        "[jobs.a]\nschedule = \"@daily\ncommand = \"x\"\n",
        "jobs.toml:2:19: invalid TOML: string is not closed on this line\n  hint: end it with \" (a string over several lines is written \"\"\"...\"\"\")\njobs.toml: 1 error\n",
    );
}

#[test]
fn duplicate_key() {
    fails_with(
        "[jobs.a]\nschedule = \"@daily\"\nschedule = \"@daily\"\ncommand = \"x\"\n",
        "jobs.toml:3:1: invalid TOML: duplicate key \"schedule\"\n  hint: each key may appear once per table\njobs.toml: 1 error\n",
    );
}

#[test]
fn invalid_utf8_is_located() {
    let env = Env::new();
    env.jobs_bytes(b"[jobs.a]\nschedule = \"@daily\"\ncommand = \"\xff\"\n");
    env.rea(&["check", "-f", "jobs.toml"]).code(2).stderr_is(
        "jobs.toml:3:12: the job file is not valid UTF-8 (byte 0xFF)\n  hint: save the file as UTF-8\njobs.toml: 1 error\n",
    );
}

#[test]
fn binary_garbage_is_refused_without_a_panic() {
    let env = Env::new();
    env.jobs_bytes(b"\x00\x01\x02\xfe\xff garbage \x7f");
    env.rea(&["check", "-f", "jobs.toml"]).code(2).stderr_is(
        "jobs.toml:1:4: the job file is not valid UTF-8 (byte 0xFE)\n  hint: save the file as UTF-8\njobs.toml: 1 error\n",
    );
    let mut noise = Vec::new();
    let mut x: u32 = 12345;
    for _ in 0..4096 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        noise.push((x >> 16) as u8);
    }
    env.jobs_bytes(&noise);
    let out = env.rea(&["check", "-f", "jobs.toml"]);
    out.code(2).stderr_has("jobs.toml:");
}

#[test]
fn an_empty_file_has_zero_jobs() {
    let env = Env::new();
    env.jobs("");
    env.rea(&["check", "-f", "jobs.toml"])
        .ok()
        .stdout_is("jobs.toml: 0 jobs OK\n");
}

#[test]
fn a_one_megabyte_line() {
    let env = Env::new();
    let long = "x".repeat(1 << 20);
    env.jobs(&format!(
        "[jobs.a]\nschedule = \"@daily\"\ncommand = \"{long}\"\n# {long}\n"
    ));
    env.rea(&["check", "-f", "jobs.toml"])
        .ok()
        .stdout_is("jobs.toml: 1 job OK\n");
    let digits = "1".repeat(1 << 20);
    env.jobs(&format!(
        "[jobs.a]\nschedule = \"@daily\"\ncommand = {digits}\n"
    ));
    let err = env.check_fails(&std::fs::read_to_string(env.jobs_path()).unwrap());
    assert!(err.starts_with("jobs.toml:3:11: "), "{err}");
    assert!(err.len() < 1000, "the message does not echo the line");
}

#[test]
fn a_truncated_example_file_never_panics_and_always_locates() {
    let env = Env::new();
    let example = include_str!("../jobs.example.toml");
    let mut cut = 1;
    while cut < example.len() {
        if example.is_char_boundary(cut) {
            env.jobs(&example[..cut]);
            let out = env.rea(&["check", "-f", "jobs.toml"]);
            match out.code {
                0 => assert!(out.stdout.ends_with("OK\n"), "{out:?}"),
                2 => {
                    for line in out.stderr.lines() {
                        assert!(
                            line.starts_with("jobs.toml:") || line.starts_with("  hint: "),
                            "cut at {cut}: {line:?}"
                        );
                    }
                    let first = out.stderr.lines().next().unwrap_or("");
                    let pos: Vec<&str> = first.splitn(4, ':').collect();
                    assert!(
                        pos.len() == 4
                            && pos[1].parse::<u32>().is_ok()
                            && pos[2].parse::<u32>().is_ok(),
                        "cut at {cut}: no FILE:LINE:COL in {first:?}"
                    );
                }
                c => panic!("cut at {cut}: exit {c}: {out:?}"),
            }
        }
        cut += 97;
    }
}

#[test]
fn errors_are_reported_together_in_file_order() {
    fails_with(
        "[jobs.b]\nschedule = \"61 * * * *\"\ncommand = \"x\"\nretry = { attempts = 101 }\n[jobs.a]\ncomand = \"x\"\nschedule = \"@daily\"\ntimezone = \"Mars/Base\"\n",
        "jobs.toml:2:13: minute value 61 is out of range (allowed: 0-59)\n\
         jobs.toml:4:22: \"retry.attempts\" must be between 0 and 100, found 101\n\
         jobs.toml:5:1: job \"a\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
         jobs.toml:6:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\n\
         jobs.toml:8:12: unknown timezone \"Mars/Base\"\n  hint: use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"\n\
         jobs.toml: 5 errors\n",
    );
}

#[test]
fn a_group_or_world_writable_file_is_refused_with_the_chmod_hint() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.jobs(JOB);
    for (mode, who) in [
        (0o664, "group"),
        (0o646, "others"),
        (0o666, "group and others"),
    ] {
        std::fs::set_permissions(env.jobs_path(), std::fs::Permissions::from_mode(mode)).unwrap();
        env.rea(&["check", "-f", "jobs.toml"]).code(2).stderr_is(&format!(
            "jobs.toml:1:1: refusing a job file writable by {who} (mode {mode:04o}): whoever can edit it can run commands as rea's user\n  hint: run: chmod go-w jobs.toml\njobs.toml: 1 error\n"
        ));
    }
    // The daemon refuses it too.
    env.rea(&["run", "-f", "jobs.toml"])
        .code(2)
        .stderr_has("jobs.toml:1:1: refusing a job file writable by group and others");
}

#[test]
fn allow_insecure_accepts_a_group_writable_file() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.jobs(JOB);
    std::fs::set_permissions(env.jobs_path(), std::fs::Permissions::from_mode(0o664)).unwrap();
    env.rea(&["check", "-f", "jobs.toml", "--allow-insecure"])
        .ok()
        .stdout_is("jobs.toml: 1 job OK\n");
}

#[test]
fn the_job_file_is_file_then_env_then_cwd() {
    let env = Env::new();
    env.write("jobs.toml", JOB);
    env.write(
        "other.toml",
        &format!("{JOB}[jobs.b]\nschedule = \"@daily\"\ncommand = \"x\"\n"),
    );
    env.write("third.toml", "");
    for f in ["jobs.toml", "other.toml", "third.toml"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(env.path(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    env.rea_env(&["check"], &[])
        .ok()
        .stdout_is("jobs.toml: 1 job OK\n");
    env.rea_env(&["check"], &[("REA_FILE", "other.toml")])
        .ok()
        .stdout_is("other.toml: 2 jobs OK\n");
    env.rea_env(
        &["check", "--file", "third.toml"],
        &[("REA_FILE", "other.toml")],
    )
    .ok()
    .stdout_is("third.toml: 0 jobs OK\n");
    env.rea_env(&["check", "-f", "third.toml"], &[])
        .ok()
        .stdout_is("third.toml: 0 jobs OK\n");
}

#[test]
fn a_missing_job_file() {
    let env = Env::new();
    // Without ./jobs.toml, root's default is the system's job file.
    let file = if crate::support::is_root() {
        "/etc/rea/jobs.toml"
    } else {
        "jobs.toml"
    };
    env.rea_env(&["check"], &[]).code(2).stderr_is(&format!(
        "{file}:1:1: cannot read the job file: No such file or directory (os error 2)\n{file}: 1 error\n"
    ));
    env.rea_env(&["check", "-f", "jobs.toml"], &[]).code(2).stderr_is(
        "jobs.toml:1:1: cannot read the job file: No such file or directory (os error 2)\njobs.toml: 1 error\n",
    );
}

#[test]
fn json_output_lists_every_error_with_its_position() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncomand = \"true\"\n");
    let out = env.rea(&["check", "--json"]);
    out.code(2);
    let v = out.json();
    assert_eq!(v["ok"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{v}");
    let unknown = errors
        .iter()
        .find(|e| e["message"] == "unknown field \"comand\"")
        .unwrap();
    assert_eq!(
        (unknown["line"].as_u64(), unknown["col"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(unknown["hint"], "did you mean \"command\"?");
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let v = env.rea(&["check", "--json"]).json();
    assert_eq!(
        (v["ok"].as_bool(), v["jobs"].as_u64()),
        (Some(true), Some(1))
    );
}

#[test]
fn a_file_larger_than_16_mib_is_refused_before_it_is_read_whole() {
    let env = Env::new();
    env.jobs("");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(env.jobs_path())
        .unwrap();
    f.set_len(1 << 40).unwrap();
    env.rea(&["check"])
        .code(2)
        .stderr_has(":1:1: the job file is larger than 16 MiB; is it the right file?");
}
