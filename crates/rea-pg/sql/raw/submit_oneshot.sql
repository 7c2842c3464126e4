  insert into rea.pending (cluster, kind, job, attempt, due_at, spec, affinity, retry, submitted_by)
  values ($1::text, 'oneshot', $2::text, 1, $3::timestamptz, $4::jsonb, $5::text, $6::jsonb, $7::text)
  returning id
