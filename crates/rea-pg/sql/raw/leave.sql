-- leave: clean shutdown, only once this epoch has no started run left
-- (the daemon waits for or ends its runs first); frees the name at once.
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch.
  update rea.nodes n set state = 'left', lease_until = clock_timestamp()
  where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint and n.state = 'live'
    and not exists (select 1 from rea.runs r where r.cluster = $1::text and r.node = $2::text
                      and r.epoch = $3::bigint and r.status = 'started')
  returning true
