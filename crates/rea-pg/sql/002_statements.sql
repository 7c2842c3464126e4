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
-- heartbeat: renews the lease on the DB clock; keeps responsive_since only if
-- this is the same session and the previous heartbeat is at most 2 heartbeat
-- intervals old (a DB stall, a reconnect or this node's own freeze resets it).
-- Renewal of an expired-but-not-convicted lease is allowed: nobody acted on it.
-- Zero rows = this epoch was convicted (or superseded): re-register and apply
-- on_lease_lost to local runs. Also returns stop requests for this node's runs.
create or replace function rea.heartbeat(p_cluster text, p_node text, p_epoch bigint)
returns table (lease_until timestamptz, responsive_since timestamptz, db_now timestamptz, stop_fences bigint[])
language sql as $$
  with hb as (
    update rea.nodes n set
      responsive_since = case
          when n.session_pid = pg_backend_pid() and n.session_start = a.backend_start
           and clock_timestamp() - n.heartbeat_at <= 2 * n.heartbeat_ms * interval '1 ms'
          then n.responsive_since else clock_timestamp() end,
      heartbeat_at = clock_timestamp(),
      lease_until = clock_timestamp() + n.lease_ms * interval '1 ms',
      session_pid = pg_backend_pid(),
      session_start = a.backend_start
    from pg_stat_get_activity(pg_backend_pid()) a
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch and n.state = 'live'
    returning n.lease_until, n.responsive_since
  )
  select hb.lease_until, hb.responsive_since, clock_timestamp(),
    (select array_agg(s.fence) from rea.stop_requests s join rea.runs r on r.fence = s.fence
      where s.cluster = p_cluster and r.cluster = p_cluster and r.node = p_node
        and r.epoch = p_epoch and r.status = 'started')
  from hb
$$;

-------------------------------------------------------------------------------
-- claim: THE statement. Node p_node (epoch p_epoch) claims occurrence
-- p_scheduled of job p_job. One UPDATE of the job's row both advances the
-- high-water mark (only if this occurrence is newer) and takes the overlap /
-- pause decision on the newest row version; the run row is inserted from its
-- RETURNING. Exactly one row comes back:
--   started | skipped (overlap or paused) | queued | missed   -> this node won
--   lost     -> another node claimed this or a newer occurrence (not a failure)
--   already_yours -> this epoch claimed it before (a retry after a lost reply)
--   no_lease -> this node's lease is not live on the DB clock (renew first)
--   early    -> the occurrence is in the DB clock's future by > p_max_early_ms
--   unknown_job
-- p_mode 'run' | 'missed' (advance the mark and record the occurrence as missed
-- without running: catch_up = none, or older occurrences of catch_up = once).
create or replace function rea.claim(
  p_cluster text, p_node text, p_epoch bigint, p_job text, p_scheduled timestamptz,
  p_trigger text default 'schedule', p_overlap text default 'skip',
  p_retry jsonb default null, p_mode text default 'run', p_max_early_ms int default 1000)
returns table (outcome text, run_id bigint, fence bigint, prev_scheduled timestamptz, replaced_fence bigint)
language sql as $$
  with me as (
    select n.node from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch
      and n.state = 'live' and n.lease_until > clock_timestamp()
    for share                       -- a concurrent conviction waits for us, or we see it
  ),
  j as (
    update rea.jobs j set
      prev_scheduled = j.last_scheduled,
      last_scheduled = p_scheduled,
      last_decision = case
          when p_mode = 'missed' then 'missed'
          when j.paused then 'paused'
          when j.active = 0 or p_overlap in ('allow', 'replace') then 'start'
          when p_overlap = 'queue' and j.queued is null then 'queue'
          else 'skip' end,
      active = j.active + case
          when p_mode <> 'missed' and not j.paused
           and (j.active = 0 or p_overlap in ('allow', 'replace')) then 1 else 0 end,
      current_fence = case
          when p_mode <> 'missed' and not j.paused
           and (j.active = 0 or p_overlap in ('allow', 'replace'))
          then rea.next_fence() else j.current_fence end,
      replaced_fence = case
          when p_mode <> 'missed' and not j.paused and p_overlap = 'replace' and j.active > 0
          then j.current_fence end,
      queued = case
          when p_mode <> 'missed' and not j.paused and j.active > 0
           and p_overlap = 'queue' and j.queued is null then p_scheduled else j.queued end
    from me
    where j.cluster = p_cluster and j.job = p_job
      and (j.last_scheduled is null or j.last_scheduled < p_scheduled)
      and p_scheduled <= clock_timestamp() + p_max_early_ms * interval '1 ms'
    returning j.last_decision, j.current_fence, j.prev_scheduled, j.replaced_fence
  ),
  ins as (
    insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, reason,
                          prev_scheduled, node, epoch, fence, retry)
    select p_cluster, p_job, p_scheduled, 1, p_trigger,
      case j.last_decision when 'start' then 'started' when 'queue' then 'queued'
                           when 'missed' then 'missed' else 'skipped' end,
      case j.last_decision
          when 'paused' then 'the job is paused (rea resume to resume)'
          when 'skip' then case when p_overlap = 'queue'
              then 'the previous run is still running and one run is already queued (overlap = "queue")'
              else 'the previous run is still running (overlap = "skip")' end end,
      j.prev_scheduled, p_node, p_epoch,
      case when j.last_decision = 'start' then j.current_fence end,
      p_retry
    from j
    returning id, status, fence
  ),
  stop as (
    insert into rea.stop_requests (cluster, fence, reason)
    select p_cluster, j.replaced_fence, 'replaced by a newer run (overlap = "replace")'
    from j where j.replaced_fence is not null
    on conflict do nothing
  ),
  mine as (   -- a retry after an ambiguous error (reply lost): is it already ours?
    select r.id, r.fence, r.prev_scheduled from rea.runs r
    where r.cluster = p_cluster and r.job = p_job and r.scheduled = p_scheduled
      and r.attempt = 1 and r.node = p_node and r.epoch = p_epoch
      and r.trigger in ('schedule', 'catch_up') and not exists (select 1 from ins)
  )
  select coalesce(ins.status,
           case when not exists (select 1 from me) then 'no_lease'
                when exists (select 1 from mine) then 'already_yours'
                when p_scheduled > clock_timestamp() + p_max_early_ms * interval '1 ms' then 'early'
                when not exists (select 1 from rea.jobs x where x.cluster = p_cluster and x.job = p_job)
                  then 'unknown_job'
                else 'lost' end) as outcome,
         coalesce(ins.id, (select id from mine)) as run_id,
         coalesce(ins.fence, (select fence from mine)) as fence,
         coalesce(j.prev_scheduled, (select prev_scheduled from mine)) as prev_scheduled,
         j.replaced_fence as replaced_fence
  from (select 1) one left join j on true left join ins on true
$$;

-------------------------------------------------------------------------------
-- run start: the process is spawned; record pid/start (ownership write).
create or replace function rea.run_started(
  p_cluster text, p_node text, p_epoch bigint, p_run bigint, p_pid int, p_detail jsonb default null)
returns boolean language sql as $$
  with me as (
    select 1 from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch
      and n.state = 'live' and n.lease_until > clock_timestamp() for share)
  update rea.runs r set pid = p_pid, started_at = clock_timestamp(),
         detail = coalesce(r.detail, '{}') || coalesce(p_detail, '{}')
  where r.id = p_run and r.cluster = p_cluster and r.node = p_node and r.epoch = p_epoch
    and r.status = 'started' and exists (select 1 from me)
  returning true
$$;

-------------------------------------------------------------------------------
-- run end: final status, conditional on the writer's live lease AND the run
-- still being 'started' by this epoch. Decrements the job's active count in
-- the same statement; queues a retry if the node asks for one (p_retry_delay_ms,
-- computed by the node's backoff policy; due on the DB clock).
-- Zero ended = lease not live (renew and retry the write: it waits in the
-- backlog) or the run was already declared interrupted (write late_report).
create or replace function rea.run_ended(
  p_cluster text, p_node text, p_epoch bigint, p_run bigint, p_status text,
  p_exit_code int default null, p_signal int default null, p_reason text default null,
  p_detail jsonb default null, p_retry_delay_ms bigint default null)
returns table (ended boolean, job text, queued_waiting boolean, retry_id bigint)
language sql as $$
  with me as (
    select 1 from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  r as (
    update rea.runs r set status = p_status, ended_at = clock_timestamp(),
           exit_code = p_exit_code, signal = p_signal, reason = p_reason,
           detail = coalesce(r.detail, '{}') || coalesce(p_detail, '{}')
    where r.id = p_run and r.cluster = p_cluster and r.node = p_node and r.epoch = p_epoch
      and r.status = 'started' and exists (select 1 from me)
    returning r.*),
  j as (
    update rea.jobs j set active = j.active - 1
    from r where r.trigger <> 'oneshot' and j.cluster = r.cluster and j.job = r.job
    returning j.queued is not null and j.active = 0 as queued_waiting),
  sr as (
    delete from rea.stop_requests s using r where s.cluster = r.cluster and s.fence = r.fence),
  rt as (
    insert into rea.pending (cluster, kind, job, scheduled, attempt, due_at, retry, spec, affinity)
    select r.cluster, case when r.trigger = 'oneshot' then 'oneshot' else 'retry' end,
           r.job, r.scheduled, r.attempt + 1,
           clock_timestamp() + p_retry_delay_ms * interval '1 ms', r.retry,
           case when r.trigger = 'oneshot' then r.detail -> 'spec' end,
           case when r.trigger = 'oneshot' then r.detail ->> 'affinity' end
    from r where p_retry_delay_ms is not null
    returning id)
  select exists (select 1 from r), (select r.job from r), coalesce((select queued_waiting from j), false),
         (select id from rt)
$$;

-- after a conviction: keep what really happened, without changing the status
-- the cluster already acted on. Not an ownership write: no lease needed.
create or replace function rea.late_report(
  p_cluster text, p_node text, p_epoch bigint, p_run bigint, p_status text, p_exit_code int default null)
returns boolean language sql as $$
  update rea.runs set late_report = jsonb_build_object(
      'status', p_status, 'exit_code', p_exit_code, 'reported_at', clock_timestamp())
  where id = p_run and cluster = p_cluster and node = p_node and epoch = p_epoch
    and status = 'interrupted' and late_report is null
  returning true
$$;

-- leave: clean shutdown, only once this epoch has no started run left
-- (the daemon waits for or ends its runs first); frees the name at once.
create or replace function rea.leave(p_cluster text, p_node text, p_epoch bigint)
returns boolean language sql as $$
  update rea.nodes n set state = 'left', lease_until = clock_timestamp()
  where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch and n.state = 'live'
    and not exists (select 1 from rea.runs r where r.cluster = p_cluster and r.node = p_node
                      and r.epoch = p_epoch and r.status = 'started')
  returning true
$$;

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
-- one-shots: submit (from any node or a CLI without a daemon) and claim with
-- SKIP LOCKED: a batch of due one-shots is deleted from pending and turned
-- into started runs in the same statement; concurrent claimers skip each
-- other's locked rows, and a claimer that dies mid-statement rolls back.
create or replace function rea.submit_oneshot(
  p_cluster text, p_id text, p_due timestamptz, p_spec jsonb, p_affinity text default null,
  p_retry jsonb default null, p_by text default null)
returns bigint language sql as $$
  insert into rea.pending (cluster, kind, job, attempt, due_at, spec, affinity, retry, submitted_by)
  values (p_cluster, 'oneshot', p_id, 1, p_due, p_spec, p_affinity, p_retry, p_by)
  returning id
$$;

create or replace function rea.claim_oneshots(
  p_cluster text, p_node text, p_epoch bigint, p_limit int)
returns table (run_id bigint, oneshot text, fence bigint, spec jsonb)
language sql as $$
  with me as (
    select 1 from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  p as (
    delete from rea.pending p
    where p.id in (
        select q.id from rea.pending q
        where q.cluster = p_cluster and q.kind = 'oneshot' and q.due_at <= clock_timestamp()
          and (q.affinity is null or q.affinity = p_node)
        order by q.due_at, q.id
        limit p_limit
        for update skip locked)
      and exists (select 1 from me)
    returning p.*)
  insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, node, epoch, fence, retry, detail)
  select p.cluster, p.job, p.due_at, p.attempt, 'oneshot', 'started', p_node, p_epoch,
         rea.next_fence(), p.retry,
         jsonb_build_object('spec', p.spec, 'affinity', p.affinity, 'pending_id', p.id)
  from p
  returning id, job, fence, detail -> 'spec'
$$;

-- retries: one due retry of a job this node defines. Superseded (a newer
-- occurrence was claimed since), paused and overlap decisions are taken on
-- the job's row, like claim.
create or replace function rea.claim_retry(
  p_cluster text, p_node text, p_epoch bigint, p_jobs text[], p_overlap text default 'skip')
returns table (outcome text, run_id bigint, job text, fence bigint)
language sql as $$
  with me as (
    select 1 from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  p as (
    delete from rea.pending p
    where p.id = (
        select q.id from rea.pending q
        where q.cluster = p_cluster and q.kind = 'retry' and q.due_at <= clock_timestamp()
          and q.job = any (p_jobs)
        order by q.due_at, q.id limit 1
        for update skip locked)
      and exists (select 1 from me)
    returning p.*),
  j as (
    update rea.jobs j set
      last_decision = case
          when j.last_scheduled > p.scheduled then 'superseded'
          when j.paused then 'paused'
          when j.active = 0 or p_overlap in ('allow', 'replace') then 'start'
          else 'skip' end,
      active = j.active + case
          when not coalesce(j.last_scheduled > p.scheduled, false) and not j.paused
           and (j.active = 0 or p_overlap in ('allow', 'replace')) then 1 else 0 end,
      current_fence = case
          when not coalesce(j.last_scheduled > p.scheduled, false) and not j.paused
           and (j.active = 0 or p_overlap in ('allow', 'replace'))
          then rea.next_fence() else j.current_fence end
    from p
    where j.cluster = p.cluster and j.job = p.job
    returning j.job, j.last_decision, j.current_fence),
  ins as (
    insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, reason, node, epoch, fence, retry)
    select p.cluster, p.job, p.scheduled, p.attempt, 'retry',
           case j.last_decision when 'start' then 'started' else 'skipped' end,
           case j.last_decision
               when 'superseded' then 'superseded by a newer occurrence'
               when 'paused' then 'the job is paused (rea resume to resume)'
               when 'skip' then 'the previous run is still running (overlap = "skip")' end,
           p_node, p_epoch, case when j.last_decision = 'start' then j.current_fence end, p.retry
    from p join j on j.job = p.job
    returning id, job, status, fence)
  select ins.status, ins.id, ins.job, ins.fence from ins
$$;

-- overlap = queue: the occurrence waiting on a job's row starts once no run
-- of the job is active; any live node that defines the job may promote it.
create or replace function rea.promote_queued(p_cluster text, p_node text, p_epoch bigint, p_jobs text[])
returns table (run_id bigint, job text, fence bigint)
language sql as $$
  with me as (
    select 1 from rea.nodes n
    where n.cluster = p_cluster and n.node = p_node and n.epoch = p_epoch
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  j as (
    update rea.jobs j set promoted = j.queued, queued = null, active = j.active + 1,
           last_decision = 'start', current_fence = rea.next_fence()
    where j.cluster = p_cluster and j.job = any (p_jobs) and j.queued is not null
      and j.active = 0 and not j.paused and exists (select 1 from me)
    returning j.job, j.current_fence, j.promoted as was_queued)
  update rea.runs r set status = 'started', node = p_node, epoch = p_epoch, fence = j.current_fence,
         claimed_at = clock_timestamp()
  from j
  where r.cluster = p_cluster and r.job = j.job and r.scheduled = j.was_queued
    and r.attempt = 1 and r.status = 'queued'
  returning r.id, r.job, r.fence
$$;

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
