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
-- A missed claim stands for p_count occurrences (it is the newest), kept in
-- the row's detail as {"count": N}.
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_job, $5 p_scheduled, $6 p_trigger, $7 p_overlap, $8 p_retry, $9 p_mode, $10 p_max_early_ms, $11 p_count, $12 p_run
-- (the engine's run id, node-qualified: kept in the row's detail from the
-- claim on, so the row is known by the id every node shows).
  with me as (
    select n.node from rea.nodes n
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
      and n.state = 'live' and n.lease_until > clock_timestamp()
    for share                       -- a concurrent conviction waits for us, or we see it
  ),
  j as (
    update rea.jobs j set
      prev_scheduled = j.last_scheduled,
      last_scheduled = $5::timestamptz,
      last_decision = case
          when $9::text = 'missed' then 'missed'
          when j.paused then 'paused'
          when j.active = 0 or $7::text in ('allow', 'replace') then 'start'
          when $7::text = 'queue' and j.queued is null then 'queue'
          else 'skip' end,
      active = j.active + case
          when $9::text <> 'missed' and not j.paused
           and (j.active = 0 or $7::text in ('allow', 'replace')) then 1 else 0 end,
      current_fence = case
          when $9::text <> 'missed' and not j.paused
           and (j.active = 0 or $7::text in ('allow', 'replace'))
          then rea.next_fence() else j.current_fence end,
      replaced_fence = case
          when $9::text <> 'missed' and not j.paused and $7::text = 'replace' and j.active > 0
          then j.current_fence end,
      queued = case
          when $9::text <> 'missed' and not j.paused and j.active > 0
           and $7::text = 'queue' and j.queued is null then $5::timestamptz else j.queued end
    from me
    where j.cluster = $1::text and j.job = $4::text
      and (j.last_scheduled is null or j.last_scheduled < $5::timestamptz)
      and $5::timestamptz <= clock_timestamp() + $10::int * interval '1 ms'
    returning j.last_decision, j.current_fence, j.prev_scheduled, j.replaced_fence
  ),
  ins as (
    insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, reason,
                          prev_scheduled, node, epoch, fence, retry, detail)
    select $1::text, $4::text, $5::timestamptz, 1, $6::text,
      case j.last_decision when 'start' then 'started' when 'queue' then 'queued'
                           when 'missed' then 'missed' else 'skipped' end,
      case j.last_decision
          when 'paused' then 'the job is paused (rea resume to resume)'
          when 'skip' then case when $7::text = 'queue'
              then 'the previous run is still running and one run is already queued (overlap = "queue")'
              else 'the previous run is still running (overlap = "skip")' end end,
      j.prev_scheduled, $2::text, $3::bigint,
      case when j.last_decision = 'start' then j.current_fence end,
      $8::jsonb,
      case when j.last_decision = 'missed' then jsonb_build_object('count', $11::bigint)
           else jsonb_build_object('run', $12::text) end
    from j
    returning id, status, fence, reason
  ),
  stop as (
    insert into rea.stop_requests (cluster, fence, reason)
    select $1::text, j.replaced_fence, 'replaced by a newer run (overlap = "replace")'
    from j where j.replaced_fence is not null
    on conflict do nothing
  ),
  mine as (   -- a retry after an ambiguous error (reply lost): is it already ours?
    select r.id, r.fence, r.prev_scheduled from rea.runs r
    where r.cluster = $1::text and r.job = $4::text and r.scheduled = $5::timestamptz
      and r.attempt = 1 and r.node = $2::text and r.epoch = $3::bigint
      and r.trigger in ('schedule', 'catch_up') and not exists (select 1 from ins)
  )
  select coalesce(ins.status,
           case when not exists (select 1 from me) then 'no_lease'
                when exists (select 1 from mine) then 'already_yours'
                when $5::timestamptz > clock_timestamp() + $10::int * interval '1 ms' then 'early'
                when not exists (select 1 from rea.jobs x where x.cluster = $1::text and x.job = $4::text)
                  then 'unknown_job'
                else 'lost' end) as outcome,
         coalesce(ins.id, (select id from mine)) as run_id,
         coalesce(ins.fence, (select fence from mine)) as fence,
         coalesce(j.prev_scheduled, (select prev_scheduled from mine)) as prev_scheduled,
         j.replaced_fence as replaced_fence,
         ins.reason as reason
  from (select 1) one left join j on true left join ins on true
