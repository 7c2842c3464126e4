  insert into rea.pending (cluster, kind, job, attempt, due_at, spec, affinity, retry, submitted_by)
  select $1::text, 'oneshot', t.job, 1, t.due_at, t.spec, null, t.retry, $2::text
  from unnest($3::text[], $4::timestamptz[], $5::jsonb[], $6::jsonb[])
       with ordinality as t(job, due_at, spec, retry, n)
  order by t.n
  on conflict (cluster, job) where kind = 'oneshot' do nothing
  returning job
