  update rea.nodes n set state = 'left', lease_until = clock_timestamp()
  where n.cluster = $1::text and n.node = $2::text and n.epoch = $3::bigint and n.state = 'live'
    and not exists (select 1 from rea.runs r where r.cluster = $1::text and r.node = $2::text
                      and r.epoch = $3::bigint and r.status = 'started')
  returning true
