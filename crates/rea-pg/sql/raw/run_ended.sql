-- run end: final status, conditional on the writer's live lease AND the run
-- still being 'started' by this epoch. Decrements the job's active count in
-- the same statement; queues a retry if the node asks for one (p_retry_delay_ms,
-- computed by the node's backoff policy; due on the DB clock). A job's retry
-- keeps the failed run's parameters (its record's `params`) in `spec`.
-- Zero ended = lease not live (renew and retry the write: it waits in the
-- backlog) or the run was already declared interrupted (write late_report).
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_run, $5 p_status, $6 p_exit_code, $7 p_signal, $8 p_reason, $9 p_detail, $10 p_retry_delay_ms.
  with me as (
    select 1 from rea.nodes n
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  r as (
    update rea.runs r set status = $5::text, ended_at = clock_timestamp(),
           exit_code = $6::int, signal = $7::int, reason = $8::text,
           detail = coalesce(r.detail, '{}') || coalesce($9::jsonb, '{}')
    where r.id = $4::bigint and r.cluster = $1::text and r.node = $2::text and r.epoch = $3::bigint
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
           clock_timestamp() + $10::bigint * interval '1 ms', r.retry,
           case when r.trigger = 'oneshot' then r.detail -> 'spec'
                when r.detail ? 'params' then jsonb_build_object('params', r.detail -> 'params') end,
           case when r.trigger = 'oneshot' then r.detail ->> 'affinity' end
    from r where $10::bigint is not null
    returning id)
  select exists (select 1 from r), (select r.job from r), coalesce((select queued_waiting from j), false),
         (select id from rt)
