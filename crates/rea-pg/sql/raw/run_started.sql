-- run start: the process is spawned; record pid/start (ownership write).
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_run, $5 p_pid, $6 p_detail.
  with me as (
    select 1 from rea.nodes n
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint
      and n.state = 'live' and n.lease_until > clock_timestamp() for share)
  update rea.runs r set pid = $5::int, started_at = clock_timestamp(),
         detail = coalesce(r.detail, '{}') || coalesce($6::jsonb, '{}')
  where r.id = $4::bigint and r.cluster = $1::text and r.node = $2::text and r.epoch = $3::bigint
    and r.status = 'started' and exists (select 1 from me)
  returning true
