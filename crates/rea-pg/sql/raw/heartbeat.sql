-- heartbeat: renews the lease on the DB clock; keeps responsive_since only if
-- this is the same session and the previous heartbeat is at most 2 heartbeat
-- intervals old (a DB stall, a reconnect or this node's own freeze resets it).
-- Renewal of an expired-but-not-convicted lease is allowed: nobody acted on it.
-- Zero rows = this epoch was convicted (or superseded): re-register and apply
-- on_lease_lost to local runs. Also returns stop requests for this node's runs,
-- and the DB clock when the statement arrived and when it answered (the node
-- measures its clock's offset against their middle).
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch.
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
        and r.epoch = $3::bigint and r.status = 'started'),
    statement_timestamp()
  from hb
