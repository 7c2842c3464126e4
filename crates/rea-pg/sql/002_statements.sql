-- The statements of the multi-node protocol, as SQL/plpgsql functions so the
-- test scripts (psql, pgbench) and the Rust client run exactly the same text.
-- In the daemon each is one prepared statement (one round trip); the function
-- bodies ARE those statements ($n parameters named p_*).
--
-- Conventions: every statement that writes on behalf of a node ("ownership
-- write") carries (cluster, node, epoch) and succeeds only if that node's
-- row is live with lease_until > clock_timestamp() — in the same statement,
-- so no write rests on a belief the node formed earlier.

-------------------------------------------------------------------------------
-- register: a node (re)joins. A live lease under the same name can only be
-- taken over by the same host_id (machine-id + state dir): the daemon holds
-- the state-dir lock, so its predecessor there is dead. Anything else waits
-- for a sweeper to convict the old holder ('name_in_use').
create or replace function rea.register(
  p_cluster text, p_node text, p_host_id text, p_lease_ms int, p_heartbeat_ms int,
  p_hostname text default null, p_pid int default null, p_version text default null)
returns table (outcome text, epoch bigint, lease_until timestamptz, db_now timestamptz)
language plpgsql as $$
declare r record;
begin
  insert into rea.clusters (cluster) values (p_cluster) on conflict do nothing;
  insert into rea.nodes as n (cluster, node, epoch, state, host_id, lease_ms, heartbeat_ms,
      registered_at, heartbeat_at, lease_until, responsive_since, session_pid, session_start,
      hostname, pid, version)
    select p_cluster, p_node, nextval('rea.epoch_seq'), 'live', p_host_id, p_lease_ms, p_heartbeat_ms,
      clock_timestamp(), clock_timestamp(), clock_timestamp() + p_lease_ms * interval '1 ms',
      clock_timestamp(), pg_backend_pid(), a.backend_start, p_hostname, p_pid, p_version
    from pg_stat_get_activity(pg_backend_pid()) a
  on conflict (cluster, node) do update set
      epoch = excluded.epoch, state = 'live', host_id = excluded.host_id,
      lease_ms = excluded.lease_ms, heartbeat_ms = excluded.heartbeat_ms,
      registered_at = excluded.registered_at, heartbeat_at = excluded.heartbeat_at,
      lease_until = excluded.lease_until, responsive_since = excluded.responsive_since,
      session_pid = excluded.session_pid, session_start = excluded.session_start,
      convicted_at = null, convicted_by = null,
      hostname = excluded.hostname, pid = excluded.pid, version = excluded.version
    where n.state <> 'live' or n.host_id = excluded.host_id
  returning n.epoch, n.lease_until into r;
  if r is null then
    return query select 'name_in_use'::text, null::bigint, n.lease_until, clock_timestamp()
      from rea.nodes n where n.cluster = p_cluster and n.node = p_node;
    return;
  end if;
  insert into rea.events (cluster, node, kind, detail)
    values (p_cluster, p_node, 'registered', jsonb_build_object('epoch', r.epoch, 'host_id', p_host_id));
  return query select 'registered'::text, r.epoch, r.lease_until, clock_timestamp();
end $$;

-------------------------------------------------------------------------------

-------------------------------------------------------------------------------

-------------------------------------------------------------------------------
-- sweep: any live node may run it (each daemon does, after its heartbeat).
-- 1. convict: V's lease expired more than p_grace_ms ago (DB clock), AND the
--    sweeper itself has been responsive (same session, heartbeats <= 2 h apart)
--    for V's whole lease + grace, AND the server has been up that long. So V
--    had lease+grace of working database to renew and did not: a database
--    restart, failover or stall resets every sweeper's responsive_since and
--    convicts nobody.
-- 2. interrupt every 'started' run whose epoch is not its node's live epoch
--    (just convicted, superseded by a same-host re-registration, or a claim
--    that raced a conviction) — idempotent, in a new snapshot.
-- 3. decrement the jobs' active counts; 4. queue retries where the run's
--    policy has attempts left.
-- Sweepers are serialised by a try-lock (a busy sweeper means skip this turn).
create or replace function rea.sweep(p_cluster text, p_node text, p_epoch bigint, p_grace_ms int)
returns table (convicted text[], interrupted int, retries int)
language plpgsql as $$
declare v_conv text[]; v_int int; v_rt int;
begin
  if not pg_try_advisory_xact_lock(hashtextextended('rea.sweep:' || p_cluster, 0)) then
    return query select null::text[], 0, 0; return;
  end if;
  if not exists (select 1 from rea.nodes n where n.cluster = p_cluster and n.node = p_node
                   and n.epoch = p_epoch and n.state = 'live' and n.lease_until > clock_timestamp()) then
    return query select null::text[], -1, 0; return;      -- the sweeper's own lease is not live
  end if;

  with s as (
    select n.responsive_since from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch and n.state = 'live'),
  v as (
    update rea.nodes v set state = 'convicted', convicted_at = clock_timestamp(), convicted_by = p_node
    from s
    where v.cluster = p_cluster and v.state = 'live' and v.node <> p_node
      and v.lease_until < clock_timestamp() - p_grace_ms * interval '1 ms'
      and s.responsive_since <= clock_timestamp() - (v.lease_ms + p_grace_ms) * interval '1 ms'
      and pg_postmaster_start_time() <= clock_timestamp() - (v.lease_ms + p_grace_ms) * interval '1 ms'
    returning v.node)
  select array_agg(v.node order by v.node) into v_conv from v;
  if v_conv is not null then
    insert into rea.events (cluster, node, kind, detail)
      values (p_cluster, p_node, 'convicted', to_jsonb(v_conv));
  end if;

  with o as (
    update rea.runs r set status = 'interrupted', ended_at = clock_timestamp(),
           reason = 'node ' || r.node || ' lost its lease while the run was started (swept by ' || p_node || ')'
    from rea.nodes n
    where r.cluster = p_cluster and r.status = 'started'
      and n.cluster = r.cluster and n.node = r.node
      and (n.epoch <> r.epoch or n.state <> 'live')
    returning r.*),
  sr as (
    delete from rea.stop_requests s using o where s.cluster = o.cluster and s.fence = o.fence),
  j as (
    update rea.jobs j set active = j.active - c.n
    from (select o.job, count(*)::int as n from o where o.trigger <> 'oneshot' group by o.job) c
    where j.cluster = p_cluster and j.job = c.job
    returning 1),
  rt as (
    insert into rea.pending (cluster, kind, job, scheduled, attempt, due_at, retry, spec, affinity)
    select o.cluster, case when o.trigger = 'oneshot' then 'oneshot' else 'retry' end,
           o.job, o.scheduled, o.attempt + 1,
           clock_timestamp() + least(coalesce((o.retry ->> 'max_delay_ms')::float8, 1e12),
                                     coalesce((o.retry ->> 'delay_ms')::float8, 0)
                                       * power(coalesce((o.retry ->> 'factor')::float8, 2), o.attempt - 1))
                               * (1 + coalesce((o.retry ->> 'jitter')::float8, 0) * random())
                               * interval '1 ms',
           o.retry,
           case when o.trigger = 'oneshot' then o.detail -> 'spec' end,
           case when o.trigger = 'oneshot' then o.detail ->> 'affinity' end
    from o where o.retry is not null and o.attempt < coalesce((o.retry ->> 'attempts')::int, 1)
    returning 1)
  select (select count(*) from o), (select count(*) from rt), (select count(*) from j)
    into v_int, v_rt;
  return query select v_conv, v_int, v_rt;
end $$;

-------------------------------------------------------------------------------
-- pauses are cluster-wide and live on the job's row, so a claim sees a pause
-- committed before it on the row version it decides on.
create or replace function rea.pause(p_cluster text, p_jobs text[], p_by text, p_paused boolean)
returns setof text language sql as $$
  insert into rea.clusters (cluster) values (p_cluster) on conflict do nothing;
  insert into rea.events (cluster, node, kind, detail)
    values (p_cluster, p_by, case when p_paused then 'pause' else 'resume' end, to_jsonb(p_jobs));
  insert into rea.jobs as j (cluster, job, paused, paused_at, paused_by)
  select p_cluster, x, p_paused, case when p_paused then clock_timestamp() end,
         case when p_paused then p_by end
  from unnest(p_jobs) x
  on conflict (cluster, job) do update set paused = excluded.paused,
      paused_at = excluded.paused_at, paused_by = excluded.paused_by
    where j.paused is distinct from excluded.paused
  returning job
$$;

create or replace function rea.pause_all(p_cluster text, p_by text, p_paused boolean)
returns bigint language sql as $$
  insert into rea.clusters (cluster) values (p_cluster) on conflict do nothing;
  update rea.clusters set pause_new_jobs = p_paused where cluster = p_cluster;
  insert into rea.events (cluster, node, kind, detail)
    values (p_cluster, p_by, case when p_paused then 'pause_all' else 'resume_all' end, null);
  with u as (
    update rea.jobs set paused = p_paused,
           paused_at = case when p_paused then clock_timestamp() end,
           paused_by = case when p_paused then p_by end
    where cluster = p_cluster and paused is distinct from p_paused returning 1)
  select count(*) from u
$$;

-------------------------------------------------------------------------------
-- config: each node publishes its file digest and per-job definition
-- digests on start and reload; job rows are created with the high-water mark
-- at "now" on the DB clock (a new job never catches up on its past).
create or replace function rea.publish_config(
  p_cluster text, p_node text, p_epoch bigint, p_digest text, p_jobs text[], p_job_digests text[])
returns boolean language plpgsql as $$
begin
  update rea.nodes set digest = p_digest
    where cluster = p_cluster and node = p_node and epoch = p_epoch and state = 'live';
  if not found then return false; end if;
  delete from rea.node_jobs where cluster = p_cluster and node = p_node;
  insert into rea.node_jobs (cluster, node, job, def_digest)
    select p_cluster, p_node, j, d from unnest(p_jobs, p_job_digests) as t(j, d);
  insert into rea.jobs (cluster, job, last_scheduled, paused)
    select p_cluster, j, clock_timestamp(), c.pause_new_jobs
    from unnest(p_jobs) j, rea.clusters c where c.cluster = p_cluster
    order by j
  on conflict (cluster, job) do update set
      last_scheduled = coalesce(rea.jobs.last_scheduled, excluded.last_scheduled)
    where rea.jobs.last_scheduled is null;
  return true;
end $$;

-- `rea status`: jobs whose definition differs between live nodes.
create or replace view rea.definition_drift as
  select nj.cluster, nj.job, count(distinct nj.def_digest) as variants,
         jsonb_object_agg(nj.node, nj.def_digest) as by_node
  from rea.node_jobs nj join rea.nodes n using (cluster, node)
  where n.state = 'live'
  group by nj.cluster, nj.job
  having count(distinct nj.def_digest) > 1;
