  update rea.runs set late_report = jsonb_build_object(
      'status', $5::text, 'exit_code', $6::int, 'reported_at', clock_timestamp())
  where id = $4::bigint and cluster = $1::text and node = $2::text and epoch = $3::bigint
    and status = 'interrupted' and late_report is null
  returning true
