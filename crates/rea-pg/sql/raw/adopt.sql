-- rea's own addition to the design's statements (not in the proven set):
-- a run this node decided alone (trigger manual, dependency or reboot)
-- takes the cluster-wide overlap decision on the job's row and a fence, as
-- a claim does, but does not touch the high-water mark (no occurrence is
-- claimed). Conditional on the writer's live lease, like every ownership
-- write. 'replace' is taken as 'allow' here (no stop request). The run's
-- `scheduled` is the request's instant, moved just past the job's mark if
-- the mark is newer (a job whose row was created after the request, or a
-- node clock behind the database's): a retry of the run is superseded only
-- by an occurrence claimed after it, as claim_retry expects.
-- Parameters: $1..$8 as claim's, $9 p_run (the engine's run id, kept in
-- the row's detail from the start, as claim keeps it).
with me as (
  select 1 from rea.nodes n
  where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
    and n.state = 'live' and n.lease_until > clock_timestamp()
  for share),
j as (
  update rea.jobs j set
    last_decision = case when j.active = 0 or $7::text in ('allow', 'replace') then 'start' else 'skip' end,
    active = j.active + case when j.active = 0 or $7::text in ('allow', 'replace') then 1 else 0 end,
    current_fence = case when j.active = 0 or $7::text in ('allow', 'replace')
                    then rea.next_fence() else j.current_fence end
  from me
  where j.cluster = $1::text and j.job = $4::text
  returning j.last_decision, j.current_fence,
            greatest($5::timestamptz, j.last_scheduled + interval '1 microsecond') as scheduled),
ins as (
  insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, reason, node, epoch, fence, retry, detail)
  select $1::text, $4::text, coalesce(j.scheduled, $5::timestamptz), 1, $6::text,
         case j.last_decision when 'start' then 'started' else 'skipped' end,
         case when j.last_decision = 'skip' then 'the previous run is still running (overlap = "skip")' end,
         $2::text, $3::bigint, case when j.last_decision = 'start' then j.current_fence end, $8::jsonb,
         jsonb_build_object('run', $9::text)
  from j
  returning id, status, reason, fence)
select coalesce(ins.status, case when not exists (select 1 from me) then 'no_lease' else 'unknown_job' end),
       ins.id, ins.fence, ins.reason
from (select 1) one left join ins on true
