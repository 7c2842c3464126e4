-- after a conviction: keep what really happened, without changing the status
-- the cluster already acted on. Not an ownership write: no lease needed.
-- Parameters: $1 p_cluster, $2 p_node, $3 p_epoch, $4 p_run, $5 p_status, $6 p_exit_code.
  update rea.runs set late_report = jsonb_build_object(
      'status', $5::text, 'exit_code', $6::int, 'reported_at', clock_timestamp())
  where id = $4::bigint and cluster = $1::text and node = $2::text and epoch = $3::bigint
    and status = 'interrupted' and late_report is null
  returning true
