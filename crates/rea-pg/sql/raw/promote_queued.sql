-- overlap = queue: the occurrence waiting on a job's row starts once no run
-- of the job is active; any live node that defines the job may promote it.
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_jobs.
  with me as (
    select 1 from rea.nodes n
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  j as (
    update rea.jobs j set promoted = j.queued, queued = null, active = j.active + 1,
           last_decision = 'start', current_fence = rea.next_fence()
    where j.cluster = $1::text and j.job = any ($4::text[]) and j.queued is not null
      and j.active = 0 and not j.paused and exists (select 1 from me)
    returning j.job, j.current_fence, j.promoted as was_queued)
  update rea.runs r set status = 'started', node = $2::text, epoch = $3::bigint, fence = j.current_fence,
         claimed_at = clock_timestamp()
  from j
  where r.cluster = $1::text and r.job = j.job and r.scheduled = j.was_queued
    and r.attempt = 1 and r.status = 'queued'
  returning r.id, r.job, r.fence, r.scheduled
