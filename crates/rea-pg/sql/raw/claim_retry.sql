-- retries: one due retry of a job this node defines. Superseded (a newer
-- occurrence was claimed since), paused and overlap decisions are taken on
-- the job's row, like claim. The last column: the failed run's parameters.
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_jobs, $5 p_overlap.
  with me as (
    select 1 from rea.nodes n
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  p as (
    delete from rea.pending p
    where p.id = (
        select q.id from rea.pending q
        where q.cluster = $1::text and q.kind = 'retry' and q.due_at <= clock_timestamp()
          and q.job = any ($4::text[])
        order by q.due_at, q.id limit 1
        for update skip locked)
      and exists (select 1 from me)
    returning p.*),
  j as (
    update rea.jobs j set
      last_decision = case
          when j.last_scheduled > p.scheduled then 'superseded'
          when j.paused then 'paused'
          when j.active = 0 or $5::text in ('allow', 'replace') then 'start'
          else 'skip' end,
      active = j.active + case
          when not coalesce(j.last_scheduled > p.scheduled, false) and not j.paused
           and (j.active = 0 or $5::text in ('allow', 'replace')) then 1 else 0 end,
      current_fence = case
          when not coalesce(j.last_scheduled > p.scheduled, false) and not j.paused
           and (j.active = 0 or $5::text in ('allow', 'replace'))
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
           $2::text, $3::bigint, case when j.last_decision = 'start' then j.current_fence end, p.retry
    from p join j on j.job = p.job
    returning id, job, status, fence, scheduled, attempt)
  select ins.status, ins.id, ins.job, ins.fence, ins.scheduled, ins.attempt,
         (select p.spec -> 'params' from p) from ins
