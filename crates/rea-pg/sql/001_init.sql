-- rea multi-node schema, migration 1.
-- Applied by migrate.sql's protocol: inside one transaction holding
-- pg_advisory_xact_lock(REA_MIGRATION_LOCK), only if schema_version lacks 1.
-- Every timestamp that decides anything comes from the DATABASE clock
-- (clock_timestamp()); node clocks only choose *which* occurrence to claim.

-- (schema rea and rea.schema_version are created by the migration runner,
-- migrate.sql, before it decides which migrations to apply)

-- Fence tokens: one cluster-wide increasing number per started run, exported
-- to the job as REA_FENCE. Drawn while the job's row is locked, so within a
-- job they increase in claim (= commit) order. See rea.next_fence().
create sequence rea.fence_seq;
-- Node epochs: a new one per registration of a node name.
create sequence rea.epoch_seq;

create table rea.clusters (
  cluster        text primary key,
  pause_new_jobs boolean not null default false,   -- `rea pause --all` covers jobs first seen later
  created_at     timestamptz not null default clock_timestamp()
);

create table rea.nodes (
  cluster          text not null references rea.clusters,
  node             text not null,
  epoch            bigint not null,                -- changes on every (re)registration
  state            text not null default 'live' check (state in ('live', 'convicted', 'left')),
  host_id          text not null,                  -- machine-id + state dir: who may take over a live lease of this name
  lease_ms         int not null,
  heartbeat_ms     int not null,
  check (lease_ms >= 3 * heartbeat_ms + 100),      -- a lease survives a stall just under max_gap (= 2 heartbeats)
  registered_at    timestamptz not null,
  heartbeat_at     timestamptz not null,
  lease_until      timestamptz not null,
  -- start (DB clock) of this node's current unbroken run of heartbeats: same
  -- session, no gap over 2 * heartbeat_ms. Only a node responsive over a whole
  -- lease + grace may convict another (sweeper).
  responsive_since timestamptz not null,
  session_pid      int not null,
  session_start    timestamptz not null,
  convicted_at     timestamptz,
  convicted_by     text,
  digest           text,                           -- sha256 of the node's job file as parsed
  hostname         text,
  pid              int,
  version          text,
  primary key (cluster, node)
);

-- Per node, per job: the digest of the job's definition, so `rea status`
-- can flag jobs whose definition differs between nodes.
create table rea.node_jobs (
  cluster    text not null,
  node       text not null,
  job        text not null,
  def_digest text not null,
  primary key (cluster, node, job),
  foreign key (cluster, node) references rea.nodes on delete cascade
);

-- One row per job name: the leaderless claim lives here. Every decision of a
-- claim is an expression over this row inside one UPDATE, so PostgreSQL
-- re-evaluates it on the newest row version after waiting for the row lock
-- (READ COMMITTED EvalPlanQual): claims of one job are linearised by it.
create table rea.jobs (
  cluster        text not null references rea.clusters,
  job            text not null,
  last_scheduled timestamptz,          -- high-water mark: newest occurrence claimed
  prev_scheduled timestamptz,          -- the mark the last claim replaced (gap = missed occurrences)
  last_decision  text,                 -- outcome of the last claim, returned by it
  active         int not null default 0 check (active >= 0),   -- runs of this job 'started', cluster-wide
  current_fence  bigint,               -- fence of the newest started run
  replaced_fence bigint,               -- set by a claim with overlap = replace: the run to stop
  queued         timestamptz,          -- occurrence waiting for the active run (overlap = queue)
  promoted       timestamptz,          -- the queued occurrence the last promotion started
  paused         boolean not null default false,
  paused_at      timestamptz,
  paused_by      text,
  first_seen     timestamptz not null default clock_timestamp(),
  primary key (cluster, job)
);
create index jobs_queued on rea.jobs (cluster) where queued is not null;

create table rea.runs (
  id             bigint generated always as identity primary key,
  cluster        text not null,
  job            text not null,                  -- job name, or the one-shot's id
  scheduled      timestamptz,                    -- the occurrence (retries: the original one)
  attempt        int not null default 1,
  trigger        text not null check (trigger in ('schedule','catch_up','retry','manual','oneshot','dependency','reboot')),
  status         text not null check (status in ('started','succeeded','failed','timed_out','killed','skipped','interrupted','cancelled','missed','queued')),
  reason         text,
  prev_scheduled timestamptz,                    -- high-water mark this claim replaced
  node           text,
  epoch          bigint,
  fence          bigint unique,                  -- REA_FENCE; null for rows that never started
  claimed_at     timestamptz not null default clock_timestamp(),
  started_at     timestamptz,
  ended_at       timestamptz,
  pid            int,
  exit_code      int,
  signal         int,
  retry          jsonb,                          -- policy the claimer used {attempts, delay_ms, max_delay_ms, factor, jitter}
  detail         jsonb,                          -- resource usage, jitter/waited ms, ...
  late_report    jsonb                           -- what a node reported after its run had been declared interrupted
);
-- second line of defence: one row per (job, occurrence, attempt) for the
-- triggers that the claim protocol makes exactly-once
create unique index runs_occurrence on rea.runs (cluster, job, scheduled, attempt)
  where trigger in ('schedule', 'catch_up', 'retry');
create index runs_started on rea.runs (cluster, node, epoch) where status = 'started';
create index runs_job on rea.runs (cluster, job, id desc);
create index runs_failed on rea.runs (cluster, job, id desc)
  where status in ('failed', 'timed_out', 'killed', 'interrupted');

-- Captured output, kept out of the runs rows that the claim path touches.
create table rea.run_output (
  run_id       bigint primary key references rea.runs on delete cascade,
  output       text not null,
  output_bytes bigint not null
);

-- Work that any node may take: one-shots, retries. Claimed by
-- DELETE ... RETURNING on rows picked with FOR UPDATE SKIP LOCKED.
create table rea.pending (
  id           bigint generated always as identity primary key,
  cluster      text not null,
  kind         text not null check (kind in ('oneshot', 'retry')),
  job          text not null,                  -- job name, or the one-shot's id
  scheduled    timestamptz,                    -- retry: the original occurrence
  attempt      int not null default 1,
  due_at       timestamptz not null,
  affinity     text,                           -- only this node may take it (one-shots: --node)
  spec         jsonb,                          -- one-shot: argv, dir, env, timeout, retry, tags
  retry        jsonb,
  overlap      text,
  submitted_at timestamptz not null default clock_timestamp(),
  submitted_by text
);
create index pending_due on rea.pending (cluster, kind, due_at);
create unique index pending_oneshot_id on rea.pending (cluster, job) where kind = 'oneshot';

-- Stop requests for runs on other nodes (overlap = replace, cluster-wide
-- kill). Insert-only for the requester, so a claim never locks a run row.
create table rea.stop_requests (
  cluster    text not null,
  fence      bigint not null,
  reason     text not null,
  at         timestamptz not null default clock_timestamp(),
  primary key (cluster, fence)
);

-- Audit of cluster-level events (pause/resume, convictions, config digests).
create table rea.events (
  id      bigint generated always as identity primary key,
  cluster text not null,
  at      timestamptz not null default clock_timestamp(),
  node    text,
  kind    text not null,
  detail  jsonb
);

-- REA_FENCE = WAL timeline * 2^40 + sequence. A promoted replica is on a new
-- timeline, so its fences exceed every fence the old primary handed out,
-- even those lost with un-replicated commits (whose sequence values the new
-- primary would hand out again). plpgsql: its plan is cached per session.
create function rea.next_fence() returns bigint language plpgsql volatile as $$
begin
  return (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint << 40)
         + nextval('rea.fence_seq');
end $$;
