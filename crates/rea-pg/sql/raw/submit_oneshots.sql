-- one-shots: submit (from any node or a CLI without a daemon) and claim with
-- SKIP LOCKED: a batch of due one-shots is deleted from pending and turned
-- into started runs in the same statement; concurrent claimers skip each
-- other's locked rows, and a claimer that dies mid-statement rolls back.
-- (Here for a batch: the submissions that reached the node together, one
-- statement and one commit; an id already pending is left out of the answer.)
-- submit_oneshot(p_cluster, p_id, p_due, p_spec, p_affinity, p_retry, p_by) of the design, for a batch: $1 cluster, $2 by, then arrays of ids, dues, specs, retries.
  insert into rea.pending (cluster, kind, job, attempt, due_at, spec, affinity, retry, submitted_by)
  select $1::text, 'oneshot', t.job, 1, t.due_at, t.spec, null, t.retry, $2::text
  from unnest($3::text[], $4::timestamptz[], $5::jsonb[], $6::jsonb[])
       with ordinality as t(job, due_at, spec, retry, n)
  order by t.n
  on conflict (cluster, job) where kind = 'oneshot' do nothing
  returning job
