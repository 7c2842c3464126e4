//! Tests of the crontab converter.

use super::*;

fn opts() -> Options {
    Options {
        timezone: "UTC".to_string(),
        owner: None,
        pam_env: BTreeMap::new(),
    }
}

fn user(text: &str) -> Import {
    import(
        &[Source {
            name: "tab".to_string(),
            text: text.as_bytes().to_vec(),
            format: Format::User,
            in_cron_d: false,
        }],
        &opts(),
    )
}

fn system_at(name: &str, text: &str, in_cron_d: bool) -> Import {
    import(
        &[Source {
            name: name.to_string(),
            text: text.as_bytes().to_vec(),
            format: Format::System,
            in_cron_d,
        }],
        &opts(),
    )
}

fn messages(i: &Import) -> Vec<String> {
    i.diagnostics.iter().map(|d| d.to_string()).collect()
}

fn has(i: &Import, needle: &str) {
    let all = messages(i);
    assert!(
        all.iter().any(|m| m.contains(needle)),
        "no diagnostic contains {needle:?}; got {all:#?}"
    );
}

// -- % and backslashes, as cronie's do_command.c does them --------------

#[test]
fn percent_splits_command_and_input() {
    assert_eq!(
        split_percent("mail -s hi bob%line 1%line 2"),
        (
            "mail -s hi bob".to_string(),
            Some("line 1\nline 2\n".to_string())
        )
    );
}

#[test]
fn input_gets_a_final_newline_only_when_missing() {
    assert_eq!(split_percent("cat%a%").1.as_deref(), Some("a\n"));
    assert_eq!(split_percent("cat%a").1.as_deref(), Some("a\n"));
    assert_eq!(split_percent("cat%%").1.as_deref(), Some("\n"));
}

#[test]
fn empty_input_means_no_input() {
    assert_eq!(split_percent("cat%"), ("cat".to_string(), None));
}

#[test]
fn escaped_percent_is_a_literal_percent_in_the_command() {
    assert_eq!(
        split_percent(r"date +\%Y-\%m-\%d"),
        ("date +%Y-%m-%d".to_string(), None)
    );
}

#[test]
fn other_backslashes_are_left_to_the_shell() {
    // cron does not touch `\\` or `\n` in the command: `sh` reads them,
    // and rea runs the same shell.
    assert_eq!(
        split_percent(r"printf 'a\nb' \\ x"),
        (r"printf 'a\nb' \\ x".to_string(), None)
    );
    // The second backslash of `\\` is what cron treats as escaped, so
    // the `%` after it is unescaped and starts the input.
    assert_eq!(
        split_percent(r"echo \\%in"),
        (r"echo \\".to_string(), Some("in\n".to_string()))
    );
}

#[test]
fn escapes_in_the_input() {
    assert_eq!(
        split_percent(r"cat%100\% sure").1.as_deref(),
        Some("100% sure\n")
    );
    assert_eq!(split_percent(r"cat%a\b").1.as_deref(), Some("a\\b\n"));
    assert_eq!(split_percent(r"cat%a\\%b").1.as_deref(), Some("a\\%b\n"));
    assert_eq!(split_percent(r"cat%end\").1.as_deref(), Some("end\\\n"));
}

#[test]
fn input_is_fed_with_printf_and_quoted_for_the_shell() {
    assert_eq!(
        command_with_stdin("mail bob", "it's\n"),
        "printf '%s' 'it'\\''s\n' | mail bob"
    );
    assert_eq!(
        command_with_stdin("cd / && cat # note", "x\n"),
        "printf '%s' 'x\n' | { cd / && cat # note\n}"
    );
}

// -- assignments, as cronie's load_env reads them -----------------------

fn set(n: &str, v: &str) -> Assignment {
    Assignment::Set(n.to_string(), v.to_string())
}

#[test]
fn assignment_spaces_around_equals_are_trimmed() {
    assert_eq!(
        parse_assignment("PATH = /bin:/usr/bin  "),
        set("PATH", "/bin:/usr/bin")
    );
    assert_eq!(parse_assignment("A=b c"), set("A", "b c"));
}

#[test]
fn assignment_quotes_are_stripped() {
    assert_eq!(parse_assignment("MAILTO=\"\""), set("MAILTO", ""));
    assert_eq!(parse_assignment("A = ' x y '"), set("A", " x y "));
    assert_eq!(parse_assignment("\"A B\"=1"), set("A B", "1"));
}

#[test]
fn hash_inside_a_value_is_not_a_comment() {
    assert_eq!(parse_assignment("A=x # y"), set("A", "x # y"));
    assert_eq!(parse_assignment("A=\"#x\""), set("A", "#x"));
}

#[test]
fn not_assignments() {
    for line in [
        "0 * * * * a=b",
        "@daily x=y",
        "A=\"unterminated",
        "A=\"x\" trailing",
        "A B=c",
    ] {
        assert_eq!(parse_assignment(line), Assignment::No, "{line}");
    }
    assert_eq!(parse_assignment("A="), Assignment::Empty("A".to_string()));
}

// -- names --------------------------------------------------------------

#[test]
fn names_come_from_the_program() {
    let cases = [
        ("/usr/local/bin/backup-db --full", "backup-db"),
        (
            "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )",
            "run-parts-cron-daily",
        ),
        ("cd / && run-parts --report /etc/cron.hourly", "run-parts-cron-hourly"),
        ("cd /srv && ./bin/sync.sh --quiet 2>&1 | logger -t sync", "sync"),
        ("nice -n 10 ionice -c3 /usr/bin/pg_dump db > /tmp/x", "pg_dump"),
        ("sudo -u www-data php /var/www/artisan schedule:run", "artisan"),
        ("FOO=1 BAR=2 /opt/tool", "tool"),
        ("[ -x /usr/lib/php/sessionclean ] && if [ ! -d /run/systemd/system ]; then /usr/lib/php/sessionclean; fi", "sessionclean"),
        ("test -x /usr/bin/certbot -a \\! -d /run/systemd/system && perl -e 'sleep int(rand(43200))' && certbot -q renew", "certbot"),
        ("command -v debian-sa1 > /dev/null && debian-sa1 1 1", "debian-sa1"),
        ("flock -n /tmp/lock /usr/local/bin/import.py", "import"),
        ("/opt/weird name/x.sh", "weird"),
        ("/opt/ünï.sh", "n"),
        ("true", "job"),
        // Programs that say little alone are named with their arguments.
        ("echo hello >> /tmp/hello.log", "echo-hello"),
        ("date > /tmp/now", "date"),
        ("curl -fsS https://example.com/cron/backup.php", "curl-backup"),
        ("wget -q -O /dev/null http://x.test/run/", "wget-run"),
        ("systemctl restart nginx", "systemctl-restart-nginx"),
    ];
    for (cmd, want) in cases {
        assert_eq!(derive_name(cmd), want, "{cmd}");
    }
}

#[test]
fn names_are_made_unique() {
    let mut taken = HashSet::new();
    assert_eq!(unique_name("a", &mut taken), "a");
    assert_eq!(unique_name("a", &mut taken), "a-2");
    assert_eq!(unique_name("a", &mut taken), "a-3");
    assert_eq!(unique_name("a-2", &mut taken), "a-2-2");
}

#[test]
fn names_are_unique_across_files() {
    let i = import(
        &[
            Source {
                name: "a".into(),
                text: b"@daily /bin/x\n".to_vec(),
                format: Format::User,
                in_cron_d: false,
            },
            Source {
                name: "b".into(),
                text: b"@daily /bin/x\n".to_vec(),
                format: Format::User,
                in_cron_d: false,
            },
        ],
        &opts(),
    );
    let names: Vec<&str> = i.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["x", "x-2"]);
}

// -- entries, environment and descriptions ------------------------------

#[test]
fn environment_applies_to_the_entries_below_it() {
    let i = user("A=1\n@daily one\nA=2\nSHELL=/bin/bash\nCRON_TZ=Europe/Berlin\n@daily two\n");
    assert_eq!(i.jobs[0].env["A"], "1");
    assert_eq!(i.jobs[0].shell, None);
    assert_eq!(i.jobs[0].timezone, "UTC");
    assert_eq!(i.jobs[1].env["A"], "2");
    assert_eq!(i.jobs[1].shell.as_deref(), Some("/bin/bash"));
    assert_eq!(i.jobs[1].timezone, "Europe/Berlin");
    assert_eq!(i.jobs[0].env["PATH"], CRON_DEFAULT_PATH);
}

#[test]
fn comments_directly_above_become_the_description() {
    let i = user("# not this\n\n# Nightly\n# backup\n  0 1 * * * b\n0 2 * * * c\n");
    assert_eq!(i.jobs[0].description.as_deref(), Some("Nightly backup"));
    assert_eq!(i.jobs[1].description, None);
    assert_eq!(i.comments, 1);
}

#[test]
fn example_lines_and_drawings_are_not_descriptions() {
    let i = user("# m h  dom mon dow   command\n0 1 * * * a\n# |  |  |\n# *  *  *  *  * user-name command\n0 2 * * * b\n");
    assert_eq!(i.jobs[0].description, None);
    assert_eq!(i.jobs[1].description, None);
}

#[test]
fn system_entries_keep_their_user() {
    let i = system_at(
        "/etc/crontab",
        "17 * * * * root cd / && run-parts /etc/cron.hourly\n@reboot www-data /bin/warm\n",
        false,
    );
    assert_eq!(i.jobs[0].user.as_deref(), Some("root"));
    assert_eq!(i.jobs[0].command, "cd / && run-parts /etc/cron.hourly");
    assert_eq!(i.jobs[1].schedule, "@reboot");
    assert_eq!(i.jobs[1].user.as_deref(), Some("www-data"));
}

#[test]
fn format_detection_by_content() {
    let is_user = |u: &str| ["root", "www-data"].contains(&u);
    assert!(looks_like_system(
        "SHELL=/bin/sh\n0 1 * * * root /bin/x\n@daily www-data y z\n",
        &is_user
    ));
    assert!(!looks_like_system(
        "0 1 * * * root /bin/x\n0 2 * * * /bin/y\n",
        &is_user
    ));
    assert!(!looks_like_system("0 1 * * * rm -rf /tmp/x\n", &is_user));
    assert!(!looks_like_system("# nothing\n", &is_user));
    assert!(
        plausible_user("www-data")
            && plausible_user("_apt")
            && !plausible_user("/bin/x")
            && !plausible_user("Root")
    );
}

// -- every warning and error text ---------------------------------------

#[test]
fn error_texts() {
    has(&user("0 5/10 * * * x\n"), "tab:1: not converted: schedule \"0 5/10 * * *\": step without a range: \"5/10\" in the hour field (rea follows Vixie cron here; some crons guess a meaning)");
    has(&user("0 22-2 * * * x\n"), "tab:1: not converted: schedule \"0 22-2 * * *\": backwards range \"22-2\" in the hour field");
    has(
        &user("61 * * * * x\n"),
        "tab:1: not converted: schedule \"61 * * * *\": minute value 61 is out of range",
    );
    has(
        &user("@every 5m x\n"),
        "tab:1: not converted: unknown macro \"@every\"\n  hint: cron's macros are @reboot",
    );
    has(&user("0 1 * *\n"), "tab:1: not converted: not an assignment, and not an entry: expected 5 time fields, then a command");
    has(
        &system_at("s", "0 1 * * *\n", false),
        "s:1: not converted: not an assignment, and not an entry",
    );
    has(&system_at("s", "0 1 * * * root\n", false), "s:1: not converted: the entry has no command\n  hint: in a system crontab the user name comes before the command");
    has(
        &system_at("s", "@daily\n", false),
        "s:1: not converted: missing the user name and the command",
    );
    has(&user("CRON_TZ=Europe/Berln\n"), "tab:1: not converted: CRON_TZ: unknown timezone \"Europe/Berln\"; the jobs below keep the zone \"UTC\"\n  hint: did you mean \"Europe/Berlin\"?");
    has(
        &user("=x\n"),
        "tab:1: not converted: an assignment needs a variable name before \"=\"",
    );
    let bad = import(
        &[Source {
            name: "tab".into(),
            text: b"0 1 * * * \xff\n".to_vec(),
            format: Format::User,
            in_cron_d: false,
        }],
        &opts(),
    );
    has(&bad, "tab:1: not converted: the line is not valid UTF-8");
}

#[test]
fn warning_texts() {
    has(&user("MAILFROM=cron@example.com\n@daily x\n"), "tab:1: warning: MAILFROM=cron@example.com: not supported by this rea version (rea's mails are sent as the user rea runs as); kept as a comment on the jobs below");
    has(&user("CONTENT_TYPE=text/html\n"), "tab:1: warning: CONTENT_TYPE=text/html: not supported by this rea version (rea's mails are text/plain; charset=utf-8); kept as a comment on the jobs below");
    has(&user("MAILTO=ops@example.com,-oi\n@daily x\n"), "tab:1: warning: MAILTO=ops@example.com,-oi: \"-oi\" is not an address rea can mail (it has a space or starts with \"-\"); kept as a comment, and the jobs below send no mail\n  hint: write MAILTO=ops@example.com, or several addresses separated by commas");
    has(&user("RANDOM_DELAY=5\n"), "tab:1: warning: RANDOM_DELAY (cronie) is kept in the environment but does not delay jobs in rea\n  hint: set jitter = \"5m\"");
    has(&user("A=\n"), "tab:1: warning: cron does not accept an empty unquoted value (A=) and reports this line as an error; converted as A=\"\"");
    has(&user("@Daily x\n"), "tab:1: warning: cron's macros are lowercase and cron refuses \"@Daily\"; converted as @daily");
    has(&user("@reboot x\n"), "tab:1: warning: @reboot runs when the rea daemon starts (cron: once per boot); restarting rea runs it again");
    has(&user("0 1 * * * mail bob%hi\n"), "tab:1: warning: the text after % is the command's input; it is fed with printf (rea has no stdin field yet)");
    has(
        &user("0 0 30 2 * x\n"),
        "tab:1: warning: \"0 0 30 2 *\" never fires (no such day); cron accepts it too",
    );
    has(&user("*/61 * * * * x\n"), "tab:1: warning: schedule \"*/61 * * * *\": step 61 in \"*/61\" is larger than the minute field (0-59): only minute 0 matches, as in cron\n  hint: write 0 if that is what you mean");
    has(&user("0 1 * * * x\r\n"), "tab:1: warning: the line ends with a carriage return (Windows line ending); cron would pass it to the shell as part of the line; removed");
    has(&user("0 1 * * * x"), "tab:1: warning: the file does not end with a newline: cron refuses its last line (\"premature EOF\"); converted anyway");
    has(&user("0 1 * * * a\nbad line\n"), "tab: warning: 1 line could not be converted; cron ignores a crontab with a bad line, so the 1 converted job may never have run under cron");
    let old = system_at("/etc/cron.d/x.dpkg-old", "0 1 * * * root a\n", true);
    has(&old, "/etc/cron.d/x.dpkg-old: warning: cron ignores files in cron.d whose names contain anything but letters, digits, \"_\" and \"-\" (like \"x.dpkg-old\"), so its 1 job never ran; converted with enabled = false");
    assert!(!old.jobs[0].enabled);
    assert!(system_at("/etc/cron.d/x_y-z", "0 1 * * * root a\n", true).jobs[0].enabled);
}

#[test]
fn users_and_mail_are_fields_not_warnings() {
    let i = system_at(
        "s",
        "MAILTO=a@b\n0 1 * * * root a\n0 2 * * * www-data b\n",
        false,
    );
    assert_eq!(messages(&i), Vec::<String>::new());
    assert_eq!(i.jobs[1].user.as_deref(), Some("www-data"));
    assert_eq!(i.jobs[1].mailto, ["a@b"]);
    assert!(i.jobs[1].mail.is_empty());
}

#[test]
fn mailto_lists_and_empty_mailto() {
    let i = user("MAILTO= a@b , c ,\n@daily a\nMAILTO=\"\"\n@daily b\nMAILTO=d\n@daily c\n");
    assert_eq!(i.jobs[0].mailto, ["a@b", "c"]);
    assert!(i.jobs[1].mailto.is_empty());
    assert_eq!(i.jobs[2].mailto, ["d"]);
    // An unusable MAILTO mails nothing and is kept as a comment until a
    // later MAILTO replaces it.
    let i = user("MAILTO=a b\n@daily a\nMAILTO=c\n@daily b\n");
    assert!(i.jobs[0].mailto.is_empty());
    assert_eq!(i.jobs[0].mail["MAILTO"], "a b");
    assert_eq!(i.jobs[1].mailto, ["c"]);
    assert!(i.jobs[1].mail.is_empty());
}

#[test]
fn the_owner_becomes_the_user_of_user_crontab_jobs_only() {
    let owner = Options {
        owner: Some("alice".to_string()),
        ..opts()
    };
    let i = import(
        &[
            Source {
                name: "tab".into(),
                text: b"@daily a\n".to_vec(),
                format: Format::User,
                in_cron_d: false,
            },
            Source {
                name: "/etc/crontab".into(),
                text: b"@daily root b\n".to_vec(),
                format: Format::System,
                in_cron_d: false,
            },
        ],
        &owner,
    );
    assert_eq!(i.jobs[0].user.as_deref(), Some("alice"));
    assert_eq!(i.jobs[1].user.as_deref(), Some("root"));
    assert_eq!(user("@daily a\n").jobs[0].user, None);
}

#[test]
fn a_clean_crontab_has_no_diagnostics() {
    let i = user("PATH=/bin\n# nightly\n30 2 * * * /bin/backup\n@hourly /bin/ping\n");
    assert_eq!(messages(&i), Vec::<String>::new());
    assert_eq!(i.jobs.len(), 2);
}

// -- rendering ----------------------------------------------------------

#[test]
fn toml_escaping() {
    assert_eq!(
        toml_string("a\"b\\c\nd\te\u{1}\u{7f}é☃"),
        "\"a\\\"b\\\\c\\nd\\te\\u0001\\u007Fé☃\""
    );
}

#[test]
fn rendered_file_passes_check_and_round_trips() {
    let text = "SHELL=/bin/bash\nX = 'q\"uote \\ back ☃'\nMAILTO=a@b\n\"WEIRD KEY\"=1\n# say \"hi\"\n0 1 * * * echo \"$X\" '\\\\'%line\\%1%line 2\nCRON_TZ=America/New_York\n@reboot /bin/up\n";
    let i = user(text);
    let toml = render(&i);
    let cfg = crate::parse(toml.as_bytes(), std::path::Path::new("out.toml"))
        .unwrap_or_else(|d| panic!("{toml}\n{d:#?}"));
    assert_eq!(cfg.jobs.len(), 2);
    let j = &cfg.jobs[0];
    assert_eq!(
        j.command,
        "printf '%s' 'line%1\nline 2\n' | echo \"$X\" '\\\\'"
    );
    assert_eq!(j.env["X"], "q\"uote \\ back ☃");
    assert_eq!(j.env["WEIRD KEY"], "1");
    assert_eq!(&*j.shell, "/bin/bash");
    assert_eq!(j.extras().description.as_deref(), Some("say \"hi\""));
    assert_eq!(&*cfg.jobs[1].timezone_name, "America/New_York");
    assert_eq!(j.extras().mailto, ["a@b"]);
    assert_eq!(j.extras().mail_on, rea_core::job::MailOn::Output);
    assert_eq!(j.user, None);
    assert!(
        toml.contains("[defaults]\ntimezone = \"UTC\"\nshell = \"/bin/bash\"\nmailto = [\"a@b\"]   # MAILTO\nmail_on = \"output\"   # as cron: mail whenever a job prints something\n"),
        "{toml}"
    );
    assert!(
        toml.contains("\n# Jobs without `user` come from a user crontab"),
        "{toml}"
    );
    assert!(!toml.contains("Jobs run as their `user`"), "{toml}");
}

#[test]
fn users_and_mail_render_as_fields() {
    let i = system_at(
        "s",
        "MAILFROM=cron@x\n0 1 * * * root a\nMAILTO=ops@x,dev@x\n0 2 * * * www-data b\n",
        false,
    );
    let toml = render(&i);
    let cfg = crate::parse(toml.as_bytes(), std::path::Path::new("out.toml"))
        .unwrap_or_else(|d| panic!("{toml}\n{d:#?}"));
    assert_eq!(cfg.jobs[0].user.as_deref(), Some("root"));
    // No MAILTO above it: cron mails the job's user.
    assert_eq!(cfg.jobs[0].extras().mailto, ["root"]);
    assert_eq!(cfg.jobs[1].user.as_deref(), Some("www-data"));
    assert_eq!(cfg.jobs[1].extras().mailto, ["ops@x", "dev@x"]);
    assert_eq!(cfg.jobs[1].extras().mail_on, rea_core::job::MailOn::Output);
    assert!(
        toml.contains("[jobs.a]\nschedule = \"0 1 * * *\"\ncommand = \"a\"\nuser = \"root\"\nmailto = [\"root\"]   # no MAILTO: cron mails the output to the job's user\n# MAILFROM=\"cron@x\"   (not converted; see the import warnings)\n"),
        "{toml}"
    );
    assert!(
        toml.contains("user = \"www-data\"\nmailto = [\"ops@x\", \"dev@x\"]   # MAILTO\n"),
        "{toml}"
    );
    assert!(
        toml.contains("# Jobs run as their `user` (root, www-data) with its groups"),
        "{toml}"
    );
    assert!(!toml.contains("Jobs without `user`"), "{toml}");
    assert!(!toml.contains("not supported"), "{toml}");
    // Shared by every job: [defaults].
    let toml = render(&system_at(
        "s",
        "MAILTO=o@x\n@daily root a\n@daily root b\n",
        false,
    ));
    assert!(
        toml.contains("[defaults]\ntimezone = \"UTC\"\nuser = \"root\"\nmailto = [\"o@x\"]   # MAILTO\nmail_on = \"output\""),
        "{toml}"
    );
    assert!(!toml.contains("\nuser = \"root\"\n\n"), "{toml}");
    assert_eq!(toml.matches("user = ").count(), 1, "{toml}");
}

#[test]
fn header_comment_lines_are_short() {
    let i = system_at("s", "@daily root a\n", false);
    for line in render(&i).lines().take_while(|l| l.starts_with('#')) {
        assert!(line.chars().count() <= 78, "{line:?}");
    }
}

#[test]
fn shared_settings_go_to_defaults() {
    let i = user("PATH=/p\nA=1\n@daily a\nA=2\n@daily b\n");
    let toml = render(&i);
    assert!(
        toml.contains("[defaults]\ntimezone = \"UTC\"\nenv = { PATH = \"/p\" }\n"),
        "{toml}"
    );
    assert!(
        toml.contains("[jobs.a]\nschedule = \"@daily\"\ncommand = \"a\"\nenv = { A = \"1\" }\n"),
        "{toml}"
    );
}

#[test]
fn the_background_operator_is_told_from_other_ampersands() {
    use super::lines::backgrounds_a_process as bg;
    for yes in [
        "nohup /usr/bin/foo > /dev/null 2>&1 &",
        "setsid /usr/bin/bar &",
        "a & b",
        "a&",
        "(sleep 5; x) & wait",
        "x 2>&1 & echo started",
    ] {
        assert!(bg(yes), "{yes:?} backgrounds a process");
    }
    for no in [
        "test -x /usr/bin/baz && /usr/bin/baz",
        "cmd > log 2>&1",
        "cmd &> log",
        "cmd >& log",
        "cmd |& tee log",
        "echo 'a & b'",
        "echo \"a & b\"",
        "echo a \\& b",
        "cmd # run it & forget",
        "cmd <&3",
    ] {
        assert!(!bg(no), "{no:?} backgrounds nothing");
    }
}

#[test]
fn the_header_says_what_pam_gave_cron_jobs() {
    let bare = render(&user("@daily /bin/a\n"));
    assert!(bare.contains("# cron runs jobs in a PAM session"), "{bare}");
    assert!(!bare.contains("On this machine"), "{bare}");
    let with = Options {
        pam_env: BTreeMap::from([
            ("LANG".to_string(), "de_DE.UTF-8".to_string()),
            ("HTTP_PROXY".to_string(), "http://proxy:3128".to_string()),
        ]),
        ..opts()
    };
    let toml = render(&import(
        &[Source {
            name: "tab".to_string(),
            text: b"@daily /bin/a\n".to_vec(),
            format: Format::User,
            in_cron_d: false,
        }],
        &with,
    ));
    assert!(
        toml.contains("#   env = { HTTP_PROXY = \"http://proxy:3128\", LANG = \"de_DE.UTF-8\" }\n"),
        "{toml}"
    );
    crate::parse(toml.as_bytes(), std::path::Path::new("out.toml")).expect("still valid");
}
