-- next_oneshot_due: in how many milliseconds the next one-shot this node may
-- take is due, on the database's clock (null: none pending); the node polls
-- for it then rather than at its next tick.
-- Parameters: $1 p_cluster, $2 p_node.
select (extract(epoch from min(due_at) - clock_timestamp()) * 1000)::bigint
  from rea.pending where cluster = $1 and kind = 'oneshot'
    and (affinity is null or affinity = $2)
