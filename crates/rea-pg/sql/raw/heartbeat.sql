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
    where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint and n.state = 'live'
    returning n.lease_until, n.responsive_since
  )
  select hb.lease_until, hb.responsive_since, clock_timestamp(),
    (select array_agg(s.fence) from rea.stop_requests s join rea.runs r on r.fence = s.fence
      where s.cluster = $1::text and r.cluster = $1::text and r.node = $2::text
        and r.epoch = $3::bigint and r.status = 'started')
  from hb
