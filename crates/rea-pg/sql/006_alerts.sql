-- rea multi-node schema, migration 5: alerts (`alert.*` of a job file).
-- Every node's engine watches every job; the one whose insert creates the
-- row tells the raise (its history line, on_alert, mail), and the one
-- whose delete removes it tells the resolve: each alert is raised once and
-- resolved once across the cluster, whichever nodes saw it.
create table rea.alerts (
  cluster    text not null,
  job        text not null,
  kind       text not null check (kind in ('late', 'running_over', 'no_success_within', 'failures')),
  node       text not null,              -- the node that raised it
  raised_at  timestamptz not null default clock_timestamp(),
  primary key (cluster, job, kind)
);
