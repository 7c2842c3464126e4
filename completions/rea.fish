# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_rea_global_optspecs
    string join \n f/file= state-dir= client-timeout= h/help V/version
end

function __fish_rea_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rea_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_rea_using_subcommand
    set -l cmd (__fish_rea_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c rea -n "__fish_rea_needs_command" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_needs_command" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_needs_command" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_needs_command" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_needs_command" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_needs_command" -f -a "run" -d 'Run the daemon in the foreground (for systemd, containers, a terminal)'
complete -c rea -n "__fish_rea_needs_command" -f -a "check" -d 'Validate the job file; exit 2 with every error as FILE:LINE:COL'
complete -c rea -n "__fish_rea_needs_command" -f -a "list" -d 'Jobs, their schedules and next fire times'
complete -c rea -n "__fish_rea_needs_command" -f -a "next" -d 'The next fire instants of a cron expression or of a job'
complete -c rea -n "__fish_rea_needs_command" -f -a "status" -d 'Live state of jobs (from the daemon, or offline from the history log)'
complete -c rea -n "__fish_rea_needs_command" -f -a "trigger" -d 'Run a job now through the daemon'
complete -c rea -n "__fish_rea_needs_command" -f -a "kill" -d 'Stop a job\'s run in progress (or one run by its id); it ends as killed'
complete -c rea -n "__fish_rea_needs_command" -f -a "pause" -d 'Stop starting jobs on their schedule (kept across daemon restarts)'
complete -c rea -n "__fish_rea_needs_command" -f -a "resume" -d 'Undo pause'
complete -c rea -n "__fish_rea_needs_command" -f -a "reload" -d 'Make the daemon re-read the job file now'
complete -c rea -n "__fish_rea_needs_command" -f -a "web" -d 'Where the web console is, and a one-time login link for it'
complete -c rea -n "__fish_rea_needs_command" -f -a "history" -d 'Past runs from the history log, newest first'
complete -c rea -n "__fish_rea_needs_command" -f -a "logs" -d 'The captured output of a job\'s latest run (or of one run)'
complete -c rea -n "__fish_rea_needs_command" -f -a "audit" -d 'Who asked the daemon for which change, and what it answered, newest first'
complete -c rea -n "__fish_rea_needs_command" -f -a "submit" -d 'Run a command once, later: `rea submit --in 30m -- cmd args`'
complete -c rea -n "__fish_rea_needs_command" -f -a "at" -d 'Run a command once at a time: `rea at 14:30 -- cmd args`'
complete -c rea -n "__fish_rea_needs_command" -f -a "cancel" -d 'Cancel pending one-shot jobs'
complete -c rea -n "__fish_rea_needs_command" -f -a "pending" -d 'Pending one-shot jobs, by due time'
complete -c rea -n "__fish_rea_needs_command" -f -a "import" -d 'Convert crontabs (crontab -l, /etc/crontab, /etc/cron.d/*) into a job file'
complete -c rea -n "__fish_rea_needs_command" -f -a "edit" -d 'Edit a job file safely, as crontab -e: your own jobs (through the daemon), or as root the main job file or a user\'s'
complete -c rea -n "__fish_rea_needs_command" -f -a "top" -d 'A live view of the daemon in the terminal: overview, jobs, timeline, a run\'s output, one-shots, cluster nodes'
complete -c rea -n "__fish_rea_using_subcommand run" -l log-format -d 'Format of the daemon\'s own log on stderr' -r -f -a "human\t'Aligned text for people'
json\t'One JSON object per line'"
complete -c rea -n "__fish_rea_using_subcommand run" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand run" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand run" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand run" -l allow-insecure -d 'Accept a job file that group or others can write'
complete -c rea -n "__fish_rea_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand run" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand check" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand check" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand check" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand check" -l allow-insecure -d 'Accept a job file that group or others can write'
complete -c rea -n "__fish_rea_using_subcommand check" -l json -d 'Machine-readable output (for editors and CI): every error and warning with its position; the exit status is the same'
complete -c rea -n "__fish_rea_using_subcommand check" -l no-host-checks -d 'Check the file alone, not this machine: do not look up each job\'s user or a sendmail (for CI machines that lack the production users)'
complete -c rea -n "__fish_rea_using_subcommand check" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand check" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand list" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand list" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand list" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand list" -l json -d 'Machine-readable output (one JSON array)'
complete -c rea -n "__fish_rea_using_subcommand list" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand list" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand next" -l tz -d 'Timezone for an expression (a job uses its own) [default: the machine\'s, as cron reads a crontab]' -r
complete -c rea -n "__fish_rea_using_subcommand next" -l after -d 'List fires strictly after this instant (RFC 3339) [default: now]' -r
complete -c rea -n "__fish_rea_using_subcommand next" -s n -l count -d 'How many fire instants to print' -r
complete -c rea -n "__fish_rea_using_subcommand next" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand next" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand next" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand next" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand next" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand next" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand status" -l tenant -d 'With --check: whose jobs count: `system` (root\'s default), a user\'s name, or `all`; a user\'s probe counts her own' -r
complete -c rea -n "__fish_rea_using_subcommand status" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand status" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand status" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand status" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand status" -l check -d 'A monitoring probe (Nagios, Icinga, a cron\'d check): print one line and exit 0 (OK), 1 (WARNING: the daemon runs an older job file because the new one is invalid, or cannot write its history) or 2 (CRITICAL: a job\'s last run failed or timed out, or no daemon runs)'
complete -c rea -n "__fish_rea_using_subcommand status" -l utc -d 'Show times in UTC instead of the machine\'s zone'
complete -c rea -n "__fish_rea_using_subcommand status" -l all -d 'Every job, page after page (live, the first 100 are shown unless this is given; the offline view always shows every job)'
complete -c rea -n "__fish_rea_using_subcommand status" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand status" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand trigger" -l param -d 'Pass a value of one of the job\'s declared parameters (its `params`) to the run as an environment variable; repeat for each. The daemon refuses undeclared names, values that do not match the parameter\'s pattern, and missing parameters that have no default' -r
complete -c rea -n "__fish_rea_using_subcommand trigger" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand trigger" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand trigger" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand trigger" -l wait -d 'Wait for the run to end and exit with its exit code'
complete -c rea -n "__fish_rea_using_subcommand trigger" -l follow -d 'Show the run\'s output as it comes (implies --wait)'
complete -c rea -n "__fish_rea_using_subcommand trigger" -l raw -d 'With --follow: write the output byte for byte even to a terminal'
complete -c rea -n "__fish_rea_using_subcommand trigger" -l force -d 'Run even if the job\'s overlap policy would skip or queue it'
complete -c rea -n "__fish_rea_using_subcommand trigger" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand trigger" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand trigger" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand kill" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand kill" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand kill" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand kill" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand kill" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand kill" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand pause" -l tag -d 'Every job with this tag' -r -f -a '(__rea_names)'
complete -c rea -n "__fish_rea_using_subcommand pause" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand pause" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand pause" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand pause" -l all -d 'Every job'
complete -c rea -n "__fish_rea_using_subcommand pause" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand pause" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand pause" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand resume" -l tag -d 'Every job with this tag' -r -f -a '(__rea_names)'
complete -c rea -n "__fish_rea_using_subcommand resume" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand resume" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand resume" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand resume" -l all -d 'Every job'
complete -c rea -n "__fish_rea_using_subcommand resume" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand resume" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand resume" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand reload" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand reload" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand reload" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand reload" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand reload" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand web" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand web" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand web" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand web" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand web" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand history" -l status -d 'Only runs with this status (repeatable)' -r -f -a "started\t''
succeeded\t''
failed\t''
timed_out\t'As the history spells it (`timed-out` works too)'
killed\t''
skipped\t''
interrupted\t''
cancelled\t'One-shots cancelled before they ran'
oom_killed\t'Runs the kernel\'s out-of-memory killer ended (`oom-killed` works too)'
missed\t'Occurrences missed while the daemon was down (catch-up policy)'
alert\t'Alerts raised and resolved (alert.* of the job file)'"
complete -c rea -n "__fish_rea_using_subcommand history" -l since -d 'Only since this long ago ("2h", "-2h", "2 hours ago", "7d") or this instant: "today", "yesterday", a date ("2026-11-29") or local time ("08:00", "2026-11-29 08:00") in the machine\'s zone, or RFC 3339' -r
complete -c rea -n "__fish_rea_using_subcommand history" -l until -d 'Only before this long ago or this instant (the forms of --since)' -r
complete -c rea -n "__fish_rea_using_subcommand history" -s n -l limit -d 'At most this many lines' -r
complete -c rea -n "__fish_rea_using_subcommand history" -l tenant -d 'Only the runs of this user\'s jobs (root; a user\'s history is her own)' -r
complete -c rea -n "__fish_rea_using_subcommand history" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand history" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand history" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand history" -l failed -d 'Only runs that did not succeed (failed, timed_out, killed, interrupted, oom_killed)'
complete -c rea -n "__fish_rea_using_subcommand history" -l json -d 'Machine-readable output (JSON lines, the history schema; times in UTC)'
complete -c rea -n "__fish_rea_using_subcommand history" -l utc -d 'Show times in UTC, and read --since/--until dates in UTC, instead of the machine\'s zone'
complete -c rea -n "__fish_rea_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand history" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand logs" -l run -d 'A run id from `rea history` (default: the latest finished run)' -r
complete -c rea -n "__fish_rea_using_subcommand logs" -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand logs" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand logs" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand logs" -l json -d 'The whole record as JSON'
complete -c rea -n "__fish_rea_using_subcommand logs" -l raw -d 'Write the output byte for byte even to a terminal (by default, on a terminal, control characters are shown as ^X, M-^X or <U+202E> so a job\'s output cannot drive the terminal or reorder what it shows)'
complete -c rea -n "__fish_rea_using_subcommand logs" -s f -l follow -d 'Follow the job\'s running run as it writes (or wait for its next run), then exit with its exit code, as `rea trigger --wait` does (in `rea logs`, -f is --follow, as in tail -f; the job file is --file)'
complete -c rea -n "__fish_rea_using_subcommand logs" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand logs" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand audit" -l since -l last -d 'Only since this long ago ("2h", "7d") or this instant (the forms of rea history --since)' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -l until -d 'Only before this long ago or this instant' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -l user -d 'Only requests of this user (a name or a uid)' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -l tenant -d 'Only this tenant\'s entries: "system" or a user\'s name' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -l action -d 'Only this action (repeatable)' -r -f -a "trigger\t''
pause\t''
resume\t''
cancel\t''
submit\t''
edit\t''
reload\t''
kill\t''"
complete -c rea -n "__fish_rea_using_subcommand audit" -l job -d 'Only entries naming this job (root names a user\'s job USER/JOB)' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -s n -l limit -d 'At most this many entries' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand audit" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand audit" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand audit" -l refused -d 'Only refused requests'
complete -c rea -n "__fish_rea_using_subcommand audit" -l json -d 'Machine-readable output (JSON lines, the audit log\'s schema; times in UTC)'
complete -c rea -n "__fish_rea_using_subcommand audit" -l utc -d 'Show times in UTC, and read --since/--until dates in UTC'
complete -c rea -n "__fish_rea_using_subcommand audit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand audit" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand submit" -l in -d 'Run after this long ("30m", "1h30m")' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l at -d 'Run at this instant (RFC 3339, "YYYY-MM-DD HH:MM", "HH:MM")' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l tz -d 'Zone for a --at time without an offset [default: local]' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l name -d 'Its id: unique among pending one-shots (a duplicate is refused, so retried submissions are safe) [default: generated]' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l retry -d 'Retries after a failure or timeout' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l retry-delay -d 'Delay before the first retry (doubling after each)' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l retry-max-delay -d 'Cap on the retry delay' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l timeout -d 'Terminate the run after this long' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l expire -d 'If the daemon was down when it was due and comes back more than this late, drop it instead of running it' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l tag -d 'A label for `rea pending --tag` (repeatable)' -r -f -a '(__rea_names)'
complete -c rea -n "__fish_rea_using_subcommand submit" -l env -d 'An environment variable for the command (repeatable); nothing else of this shell\'s environment is passed' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand submit" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand submit" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand submit" -l shell -d 'Run the command as one `/bin/sh -c` script instead of an argv'
complete -c rea -n "__fish_rea_using_subcommand submit" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand submit" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand submit" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand at" -l tz -d 'Zone for a time without an offset [default: local]' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l name -d 'Its id: unique among pending one-shots (a duplicate is refused, so retried submissions are safe) [default: generated]' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l retry -d 'Retries after a failure or timeout' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l retry-delay -d 'Delay before the first retry (doubling after each)' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l retry-max-delay -d 'Cap on the retry delay' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l timeout -d 'Terminate the run after this long' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l expire -d 'If the daemon was down when it was due and comes back more than this late, drop it instead of running it' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l tag -d 'A label for `rea pending --tag` (repeatable)' -r -f -a '(__rea_names)'
complete -c rea -n "__fish_rea_using_subcommand at" -l env -d 'An environment variable for the command (repeatable); nothing else of this shell\'s environment is passed' -r
complete -c rea -n "__fish_rea_using_subcommand at" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand at" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand at" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand at" -l shell -d 'Run the command as one `/bin/sh -c` script instead of an argv'
complete -c rea -n "__fish_rea_using_subcommand at" -l json -d 'Machine-readable output'
complete -c rea -n "__fish_rea_using_subcommand at" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand at" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand cancel" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand cancel" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand cancel" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand cancel" -l kill -d 'Also terminate one that is running now'
complete -c rea -n "__fish_rea_using_subcommand cancel" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand cancel" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand pending" -l tag -d 'Only one-shots with this tag' -r -f -a '(__rea_names)'
complete -c rea -n "__fish_rea_using_subcommand pending" -s n -l limit -d 'At most this many' -r
complete -c rea -n "__fish_rea_using_subcommand pending" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand pending" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand pending" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand pending" -l json -d 'Machine-readable output (times in UTC)'
complete -c rea -n "__fish_rea_using_subcommand pending" -l utc -d 'Show due times in UTC instead of the machine\'s zone'
complete -c rea -n "__fish_rea_using_subcommand pending" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand pending" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand import" -l owner -d 'The user whose crontab this is: its jobs get `user = NAME`. `crontab -l -u alice` output does not say whose it is, so without --owner the jobs have no `user` and run as rea\'s user. Needs --user' -r
complete -c rea -n "__fish_rea_using_subcommand import" -s o -l output -d 'Write the job file here instead of standard output' -r -F
complete -c rea -n "__fish_rea_using_subcommand import" -l timezone -d 'Zone for jobs without CRON_TZ (cron uses the machine\'s zone)' -r
complete -c rea -n "__fish_rea_using_subcommand import" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand import" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand import" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand import" -l system -d 'Read every file as a system crontab (a user name after the time fields) [default: files under /etc, or whose 6th field is always a known user]'
complete -c rea -n "__fish_rea_using_subcommand import" -l user -d 'Read every file as a user crontab (`crontab -l` output)'
complete -c rea -n "__fish_rea_using_subcommand import" -l install -d 'Install the result as a user\'s own job file (users/NAME.toml) through the daemon, replacing it: your own (`crontab -l | rea import --user --install -`), or as root the --owner\'s'
complete -c rea -n "__fish_rea_using_subcommand import" -l allow-empty -d 'With --install: install even a crontab with no jobs, which empties the user\'s job file (`crontab -l` of someone with no crontab prints nothing, so by default that is refused)'
complete -c rea -n "__fish_rea_using_subcommand import" -l force -d 'Overwrite the --output file if it exists'
complete -c rea -n "__fish_rea_using_subcommand import" -s h -l help -d 'Print help'
complete -c rea -n "__fish_rea_using_subcommand import" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand edit" -l user -d 'Edit this user\'s own job file (root only; others edit their own)' -r
complete -c rea -n "__fish_rea_using_subcommand edit" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand edit" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand edit" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand edit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand edit" -s V -l version -d 'Print version'
complete -c rea -n "__fish_rea_using_subcommand top" -s f -l file -d 'The main job file (with jobs.d/*.toml beside it) [default: the running daemon\'s file, else ./jobs.toml, else /etc/rea/jobs.toml for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand top" -l state-dir -d 'Where the history log, control socket and lock live [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]' -r -F
complete -c rea -n "__fish_rea_using_subcommand top" -l client-timeout -d 'How long a command waits for the daemon to answer' -r
complete -c rea -n "__fish_rea_using_subcommand top" -l utc -d 'Show times in UTC instead of the machine\'s zone (a job\'s next fire is shown in its own zone either way)'
complete -c rea -n "__fish_rea_using_subcommand top" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rea -n "__fish_rea_using_subcommand top" -s V -l version -d 'Print version'

# Job names, one-shot ids and tags come from the job file and the daemon:
# `rea complete` answers for the word under the cursor, or exits 1 when it
# is not a name (and the completions above apply).
function __rea_names
    set -l words (commandline -opc) (commandline -ct)
    command $words[1] complete --index (math (count $words) - 1) -- $words 2>/dev/null
end
complete -c rea -f -n '__rea_names >/dev/null' -a '(__rea_names)'
