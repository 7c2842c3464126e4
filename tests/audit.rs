//! The audit log (`audit.jsonl`, `rea audit`): every state-changing
//! request, refused ones too, once, with who asked, from where, in which
//! tenant, for what, and the answer; root reads every entry, each user her
//! own tenant's only. Two unprivileged users; needs root (to switch users)
//! and skips loudly without.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::Value;

use crate::support::{skip_unless_root, throwaway_user, wait_until, Conn, Env};
use crate::users::rea_as;

const ALICE: &str = "rea-alice";
const BOB: &str = "rea-bob";

/// `rea audit --json ARGS` as root: the entries, newest first.
fn audit(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    lines(&env.rea(&all).ok().stdout)
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The one entry of `user` doing `action` on `target` (panics on none or
/// several: each request is recorded once).
fn one<'a>(entries: &'a [Value], user: &str, action: &str, target: &[&str]) -> &'a Value {
    let found: Vec<&Value> = entries
        .iter()
        .filter(|e| {
            e["user"] == user && e["action"] == action && e["target"] == serde_json::json!(target)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{user} {action} {target:?} in:\n{}",
        entries
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    found[0]
}

/// A root daemon with a system job `sys` and one job per user (`hers`,
/// `his`), each a long sleep.
fn setup() -> Env {
    crate::users::hung_jobs_env()
}

#[test]
fn every_state_changing_request_is_audited_once_and_each_user_sees_her_own() {
    if skip_unless_root("every_state_changing_request_is_audited_once_and_each_user_sees_her_own") {
        return;
    }
    let env = setup();
    let d = env.daemon();
    let uid_of = |user: &str| throwaway_user(user).expect("user").0;

    // Root, through the CLI: every kind of change.
    env.rea(&["trigger", "sys"]).ok();
    env.rea(&["kill", "sys"]).ok();
    env.rea(&["pause", "sys"]).ok();
    env.rea(&["resume", "sys"]).ok();
    env.rea(&["reload"]).ok();
    env.rea(&["submit", "--in", "1h", "--name", "later", "--", "/bin/true"])
        .ok();
    env.rea(&["cancel", "later"]).ok();
    let editor = env.write(
        "editor.sh",
        "#!/bin/sh\nprintf '[jobs.hers]\\nschedule = \"@yearly\"\\ncommand = \"sleep 300\"\\nkill_grace = \"1s\"\\ntags = [\"edited\"]\\n' > \"$1\"\n",
    );
    fs::set_permissions(&editor, fs::Permissions::from_mode(0o755)).expect("chmod");
    env.rea_env(
        &["edit", "--user", ALICE],
        &[
            ("REA_FILE", env.jobs_path().to_str().expect("utf-8")),
            ("EDITOR", editor.to_str().expect("utf-8")),
        ],
    )
    .ok();
    // A client that does not say what it is: `socket`.
    let answer = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"pause","jobs":["sys"]}"#)
        .expect("answer");
    assert_eq!(answer["ok"], true, "{answer}");

    // Alice: her own job, and attempts on root's.
    rea_as(&env, ALICE, &["trigger", "hers"], None).ok();
    rea_as(&env, ALICE, &["trigger", "sys"], None).code(5);
    rea_as(&env, ALICE, &["pause", "sys"], None).code(5);
    rea_as(&env, ALICE, &["reload"], None).code(1);
    // Bob: his own.
    rea_as(&env, BOB, &["pause", "his"], None).ok();

    let expected = 14;
    wait_until("every request in the audit log", || {
        audit(&env, &["-n", "100"]).len() >= expected
    });
    let all = audit(&env, &["-n", "100"]);
    assert_eq!(all.len(), expected, "{all:#?}");

    // Each kind of change, once, with its fields.
    let trigger = one(&all, "root", "trigger", &["sys"]);
    assert_eq!(
        (
            &trigger["uid"],
            &trigger["tenant"],
            &trigger["source"],
            &trigger["result"]
        ),
        (
            &Value::from(0),
            &Value::Null,
            &Value::from("cli"),
            &Value::from("ok")
        )
    );
    assert!(
        trigger["ts"].as_str().expect("ts").ends_with('Z'),
        "{trigger}"
    );
    for (action, target) in [
        ("kill", vec!["sys"]),
        ("resume", vec!["sys"]),
        ("reload", vec![]),
        ("submit", vec!["later"]),
        ("cancel", vec!["later"]),
    ] {
        let e = one(&all, "root", action, &target);
        assert_eq!(
            (&e["result"], &e["source"]),
            (&Value::from("ok"), &Value::from("cli")),
            "{e}"
        );
    }
    let pauses: Vec<&Value> = all
        .iter()
        .filter(|e| e["user"] == "root" && e["action"] == "pause")
        .collect();
    let sources: Vec<&str> = pauses
        .iter()
        .map(|e| e["source"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(sources, ["socket", "cli"], "newest first");
    // Root's edit of alice's file is in her tenant.
    let edit = one(&all, "root", "edit", &[ALICE]);
    assert_eq!(
        (&edit["tenant"], &edit["result"]),
        (&Value::from(ALICE), &Value::from("ok"))
    );

    // Alice's own, and her refused attempts on root's job, in her tenant.
    let hers = one(&all, ALICE, "trigger", &["rea-alice/hers"]);
    assert_eq!(
        (&hers["uid"], &hers["tenant"], &hers["result"]),
        (
            &Value::from(uid_of(ALICE)),
            &Value::from(ALICE),
            &Value::from("ok")
        )
    );
    // Her names are hers: "sys" is a job of hers that does not exist.
    let refused = one(&all, ALICE, "trigger", &["rea-alice/sys"]);
    assert_eq!(
        (&refused["result"], &refused["code"], &refused["tenant"]),
        (
            &Value::from("refused"),
            &Value::from("unknown_job"),
            &Value::from(ALICE)
        )
    );
    assert_eq!(refused["message"], "no job named \"rea-alice/sys\"");
    assert_eq!(
        one(&all, ALICE, "pause", &["rea-alice/sys"])["result"],
        "refused"
    );
    let reload = one(&all, ALICE, "reload", &[]);
    assert_eq!(
        (&reload["result"], &reload["code"]),
        (&Value::from("refused"), &Value::from("refused"))
    );
    one(&all, BOB, "pause", &["rea-bob/his"]);

    // The filters.
    let refusals = audit(&env, &["--refused"]);
    assert_eq!(refusals.len(), 3, "{refusals:#?}");
    assert!(refusals.iter().all(|e| e["user"] == ALICE));
    assert_eq!(audit(&env, &["--user", ALICE]).len(), 4);
    assert_eq!(audit(&env, &["--user", &uid_of(BOB).to_string()]).len(), 1);
    assert_eq!(
        audit(&env, &["--tenant", ALICE]).len(),
        5,
        "hers and root's edit"
    );
    assert_eq!(audit(&env, &["--tenant", "system"]).len(), 8);
    assert_eq!(
        audit(&env, &["--action", "trigger", "--action", "kill"]).len(),
        4
    );
    assert_eq!(audit(&env, &["--job", "sys", "--action", "pause"]).len(), 2);
    assert_eq!(audit(&env, &["--job", "rea-alice/hers"]).len(), 1);
    assert_eq!(audit(&env, &["-n", "2"]).len(), 2);
    assert_eq!(audit(&env, &["--since", "1h"]).len(), expected);
    assert!(audit(&env, &["--until", "1h"]).is_empty());
    let text = env
        .rea(&["audit", "--user", ALICE, "--action", "trigger"])
        .ok()
        .stdout
        .clone();
    assert!(
        text.starts_with("TIME")
            && text.contains("TENANT")
            && text.contains("refused: no job named"),
        "{text}"
    );

    // Alice sees her tenant's entries only, her names unqualified; bob his.
    let seen = lines(
        &rea_as(&env, ALICE, &["audit", "--json", "-n", "100"], None)
            .ok()
            .stdout,
    );
    assert_eq!(seen.len(), 5, "{seen:#?}");
    assert!(seen.iter().all(|e| e["tenant"] == ALICE));
    one(&seen, ALICE, "trigger", &["hers"]);
    let attempt = one(&seen, ALICE, "trigger", &["sys"]);
    assert_eq!(attempt["message"], "no job named \"sys\"");
    let mine = rea_as(&env, ALICE, &["audit", "--json", "--job", "hers"], None);
    assert_eq!(lines(&mine.ok().stdout).len(), 1);
    one(&seen, "root", "edit", &[ALICE]);
    let his = lines(&rea_as(&env, BOB, &["audit", "--json"], None).ok().stdout);
    assert_eq!(his.len(), 1, "{his:#?}");
    assert_eq!(his[0]["user"], BOB);
    assert!(lines(
        &rea_as(&env, BOB, &["audit", "--json", "--user", ALICE], None)
            .ok()
            .stdout
    )
    .is_empty());

    // The file is root's and private.
    let meta = fs::metadata(env.state().join("audit.jsonl")).expect("audit.jsonl");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    rea_as(&env, ALICE, &["kill", "hers"], None).ok();
    assert_eq!(d.stop(), 0);
    // The last answer's entry was written before the daemon ended; root
    // reads the file without it.
    let last = audit(&env, &["-n", "1"]);
    assert_eq!(
        (&last[0]["user"], &last[0]["action"], &last[0]["target"]),
        (
            &Value::from(ALICE),
            &Value::from("kill"),
            &serde_json::json!(["hers"])
        )
    );
}

/// Cluster mode: each node's entries also go to the cluster database
/// (`rea.audit`), where root's `rea audit` on any node reads them all,
/// each with the node that answered.
#[test]
fn cluster_the_audit_log_holds_every_nodes_entries() {
    let Some(pg) = crate::support::pg::shared("cluster_the_audit_log") else {
        return;
    };
    let file = format!(
        "[cluster]\nurl = \"{}\"\nname = \"audited\"\nlease = \"3s\"\nheartbeat = \"250ms\"\ngrace = \"1s\"\n\n[jobs.tick]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
        pg.url
    );
    let nodes: Vec<(&str, Env)> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let env = Env::new();
            env.jobs(&file);
            (name, env)
        })
        .collect();
    let rea = |(name, env): &(&str, Env), args: &[&str]| {
        env.rea_env(
            args,
            &[
                ("REA_FILE", env.jobs_path().to_str().expect("path")),
                ("REA_NODE", name),
            ],
        )
    };
    let daemons: Vec<_> = nodes
        .iter()
        .map(|(name, env)| env.daemon_with_env(&[], &[("REA_NODE", name)]))
        .collect();
    let (a, b) = (&nodes[0], &nodes[1]);
    wait_until("both nodes answer", || {
        rea(a, &["status", "--json"]).code == 0 && rea(b, &["status", "--json"]).code == 0
    });
    rea(a, &["pause", "tick"]).ok();
    rea(b, &["resume", "tick"]).ok();
    rea(b, &["trigger", "nope"]).code(5);
    let entries = || lines(&rea(a, &["audit", "--json"]).ok().stdout);
    wait_until("three entries in the database", || entries().len() >= 3);
    let all = entries();
    let seen: Vec<(&str, &str, &str, &str)> = all
        .iter()
        .map(|e| {
            (
                e["node"].as_str().unwrap_or(""),
                e["action"].as_str().unwrap_or(""),
                e["result"].as_str().unwrap_or(""),
                e["source"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("b", "trigger", "refused", "cli"),
            ("b", "resume", "ok", "cli"),
            ("a", "pause", "ok", "cli"),
        ],
        "{all:#?}"
    );
    // The filters are the database's too.
    let refused = lines(
        &rea(b, &["audit", "--json", "--refused", "--user", "root"])
            .ok()
            .stdout,
    );
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["code"], "unknown_job");
    assert_eq!(refused[0]["target"], serde_json::json!(["nope"]));
    let pauses = lines(
        &rea(
            b,
            &[
                "audit", "--json", "--action", "pause", "--job", "tick", "--tenant", "system",
            ],
        )
        .ok()
        .stdout,
    );
    assert_eq!(pauses.len(), 1, "{pauses:#?}");
    // Pause and resume changed the database from the command itself (no
    // daemon answered them): their entries are the database's only; the
    // trigger was b's daemon's, in its own file too.
    assert!(!a.1.state().join("audit.jsonl").exists());
    let local = fs::read_to_string(b.1.state().join("audit.jsonl")).expect("audit.jsonl");
    assert_eq!(lines(&local).len(), 1, "{local}");
    assert_eq!(
        pg.psql("select count(*) from rea.audit where cluster = 'audited'")
            .trim(),
        "3"
    );
    for d in daemons {
        assert_eq!(d.stop(), 0);
    }
}

/// A client sending requests as fast as the daemon answers (pipelined, in
/// bounded rounds) has each one recorded, none lost: when the writer's
/// queue is full the answers wait for it, not the entries.
#[test]
fn a_flood_of_requests_is_recorded_whole() {
    let env = Env::new();
    env.jobs("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    let mut conn = Conn::open(&env.socket());
    let (rounds, per_round) = (8, 500);
    for _ in 0..rounds {
        for _ in 0..per_round {
            assert!(conn.send(r#"{"v":1,"source":"flood","op":"trigger","job":"nope"}"#));
        }
        for _ in 0..per_round {
            let answer = conn.recv().expect("an answer to each request");
            assert_eq!(answer["code"], "unknown_job", "{answer}");
        }
    }
    let total = rounds * per_round;
    let count = || {
        audit(&env, &["--refused", "-n", "100000"])
            .iter()
            .filter(|e| e["source"] == "flood" && e["target"] == serde_json::json!(["nope"]))
            .count()
    };
    wait_until("every request recorded", || count() >= total);
    assert_eq!(count(), total);
    assert_eq!(d.stop(), 0);
}

/// The audit kit (`rea_store::conformance::audit_backend`) on the cluster
/// database: entries written by `rea_pg::Reader::audit` (the statement a
/// node's audit task sends) and read by `rea_pg::Reader`, the reader of
/// `rea audit` in cluster mode. One cluster per case.
#[test]
fn the_cluster_databases_audit_log_conforms() {
    use rea_pg::{ClusterNode, Node, NodeEvent, Reader, Settings};
    use rea_store::conformance::{audit_backend, FreshAudit};
    use std::time::Duration;

    let Some(server) = crate::support::pg::shared("the_cluster_databases_audit_log_conforms")
    else {
        return;
    };
    let settings = |cluster: String| Settings {
        url: server.url.clone(),
        cluster,
        node: "kit".into(),
        host_id: "kit".into(),
        lease: Duration::from_secs(10),
        heartbeat: Duration::from_secs(1),
        grace: Duration::from_secs(1),
    };
    // The schema: a node migrates it as it registers.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let node = rt.block_on(async { Node::start(settings("audit-kit".into()), tx) });
    rt.block_on(async {
        tokio::time::timeout(crate::support::PATIENCE, async {
            while let Some(e) = events.recv().await {
                if matches!(e, NodeEvent::LeaseBack { .. }) {
                    return;
                }
            }
        })
        .await
        .expect("the node registers (and migrates)");
    });
    let n = std::cell::Cell::new(0);
    audit_backend(16, || {
        n.set(n.get() + 1);
        let s = settings(format!("audit-kit-{}", n.get()));
        let writer = Reader::connect(&s).expect("connect");
        let reader = Reader::connect(&s).expect("connect");
        FreshAudit {
            write: Box::new(move |entries| {
                for e in entries {
                    writer.audit("kit", e).expect("insert");
                }
            }),
            reader: Box::new(reader),
            keep: Box::new(()),
        }
    });
    rt.block_on(node.leave(Duration::from_secs(5)));
}
