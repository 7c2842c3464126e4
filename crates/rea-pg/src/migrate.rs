//! The embedded migrations, applied in one transaction under a
//! cluster-wide advisory lock: N nodes starting at once apply each exactly
//! once (DDL is transactional in PostgreSQL, so a failed migration leaves
//! nothing behind). A binary refuses a database whose `compatible_from` is
//! newer than the migrations it knows (a newer rea changed the schema
//! incompatibly).

use tokio_postgres::Client;

use crate::settings::error_text;

/// 0x7265615f6d696772 = "rea_migr"
const MIGRATION_LOCK: i64 = 8_243_122_683_466_721_650;

/// (version, compatible_from, SQL) in order.
const MIGRATIONS: &[(i32, i32, &[&str])] = &[
    (
        1,
        1,
        &[
            include_str!("../sql/001_init.sql"),
            include_str!("../sql/002_statements.sql"),
        ],
    ),
    // The audit log: a table older binaries do not touch.
    (2, 1, &[include_str!("../sql/003_audit.sql")]),
    // An index: runs found by their engine's id too.
    (3, 1, &[include_str!("../sql/004_engine_run.sql")]),
    // A column: the parameters of a trigger's audit entry.
    (4, 1, &[include_str!("../sql/005_audit_params.sql")]),
    // Alerts: who raised which (a table older binaries do not touch).
    (5, 1, &[include_str!("../sql/006_alerts.sql")]),
    // An index: runs found by when they ended (the peers' watch).
    (6, 1, &[include_str!("../sql/007_runs_ended.sql")]),
    // A status: `oom_killed` (older binaries read such a row without one).
    (7, 1, &[include_str!("../sql/008_oom_killed.sql")]),
    // A table and its trigger: each job's daily roll-up (the web
    // console's heatmap), which older binaries keep too.
    (8, 1, &[include_str!("../sql/009_runs_job_day.sql")]),
    // A table and its triggers: each job's last run that ran (`rea
    // status`), which older binaries keep too.
    (9, 1, &[include_str!("../sql/010_last_runs.sql")]),
];

/// Brings the schema up to date; `who` is recorded as the applier.
/// Returns the migrations applied now.
pub async fn migrate(c: &Client, who: &str) -> Result<Vec<i32>, String> {
    let e = |e: tokio_postgres::Error| format!("migration: {}", error_text(&e));
    c.batch_execute("begin").await.map_err(e)?;
    let result = async {
        c.execute("select pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(e)?;
        c.batch_execute(
            "create schema if not exists rea;
             create table if not exists rea.schema_version (
               version int primary key,
               compatible_from int not null,
               applied_at timestamptz not null default clock_timestamp(),
               applied_by text not null)",
        )
        .await
        .map_err(e)?;
        let row = c
            .query_one(
                "select coalesce(max(version), 0), coalesce(max(compatible_from), 0) from rea.schema_version",
                &[],
            )
            .await
            .map_err(e)?;
        let (have, compatible_from): (i32, i32) = (row.get(0), row.get(1));
        let known = MIGRATIONS.last().map_or(0, |m| m.0);
        if compatible_from > known {
            return Err(format!(
                "the cluster database's schema (version {have}) needs a newer rea (this one knows up to version {known})"
            ));
        }
        let mut applied = Vec::new();
        for (version, compat, parts) in MIGRATIONS {
            if *version <= have {
                continue;
            }
            for sql in *parts {
                c.batch_execute(sql).await.map_err(e)?;
            }
            c.execute(
                "insert into rea.schema_version (version, compatible_from, applied_by) values ($1, $2, $3)",
                &[version, compat, &who],
            )
            .await
            .map_err(e)?;
            applied.push(*version);
        }
        Ok(applied)
    }
    .await;
    match result {
        Ok(applied) => {
            c.batch_execute("commit").await.map_err(e)?;
            Ok(applied)
        }
        Err(m) => {
            let _ = c.batch_execute("rollback").await;
            Err(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    fn listed(sql: &str) -> Vec<String> {
        sql.split(',')
            .map(|s| s.trim().trim_matches('\'').to_string())
            .collect()
    }

    /// `rea.ran()` decides which runs `rea.last_runs` keeps, so its newest
    /// definition lists `RAN_SQL`'s statuses (themselves tested against
    /// rea-core): a status added there needs a migration replacing it.
    #[test]
    fn the_databases_ran_statuses_are_ran_sql() {
        let newest = MIGRATIONS
            .iter()
            .rev()
            .flat_map(|m| m.2.iter().rev())
            .find_map(|sql| sql.rfind("function rea.ran(").map(|at| &sql[at..]))
            .expect("a migration defines rea.ran()");
        let body = newest.split("$$").nth(1).expect("rea.ran()'s body");
        let list = body
            .split_once(" in (")
            .and_then(|(_, l)| l.split_once(')'))
            .map(|(l, _)| l)
            .expect("rea.ran()'s list of statuses");
        assert_eq!(listed(list), listed(crate::reader::RAN_SQL));
    }
}
