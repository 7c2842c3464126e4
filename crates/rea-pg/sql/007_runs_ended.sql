-- rea multi-node schema, migration 6: runs found by when they ended, so
-- each node's watch of its peers (the live views' cluster-wide side,
-- `src/node/peers.rs`) reads the runs that ended since its last look from
-- an index, once a heartbeat, whatever the size of the history.
create index if not exists runs_ended on rea.runs (cluster, ended_at) where ended_at is not null;
