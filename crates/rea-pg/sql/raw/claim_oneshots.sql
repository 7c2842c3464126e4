-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_limit.
  with me as (
    select 1 from rea.nodes n
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
      and n.state = 'live' and n.lease_until > clock_timestamp() for share),
  p as (
    delete from rea.pending p
    where p.id in (
        select q.id from rea.pending q
        where q.cluster = $1::text and q.kind = 'oneshot' and q.due_at <= clock_timestamp()
          and (q.affinity is null or q.affinity = $2::text)
        order by q.due_at, q.id
        limit $4::int
        for update skip locked)
      and exists (select 1 from me)
    returning p.*)
  insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, node, epoch, fence, retry, detail)
  select p.cluster, p.job, p.due_at, p.attempt, 'oneshot', 'started', $2::text, $3::bigint,
         rea.next_fence(), p.retry,
         jsonb_build_object('spec', p.spec, 'affinity', p.affinity, 'pending_id', p.id)
  from p
  returning id, job, fence, detail -> 'spec', attempt
