-- rea multi-node schema, migration 3: find a run by the id its node's
-- engine gave it (the one `rea trigger` prints and every node's own
-- history holds, kept in `detail`), beside the database's own id.
create index if not exists runs_engine_run on rea.runs (cluster, (detail ->> 'run'));
