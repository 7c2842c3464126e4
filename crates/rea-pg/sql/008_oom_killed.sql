-- rea multi-node schema, migration 7: `oom_killed`, a run's end of its own
-- (the kernel's out-of-memory killer ended a process of the run's cgroup
-- and the run did not succeed). Older binaries can run beside it: a row
-- they cannot name reads as a run without a status, and they never write
-- one. Rows written before it keep `failed` or `killed` with
-- `oom_killed: true` in `detail`.
alter table rea.runs drop constraint if exists runs_status_check;
alter table rea.runs add constraint runs_status_check
  check (status in ('started','succeeded','failed','timed_out','killed','skipped',
                    'interrupted','cancelled','missed','queued','oom_killed')) not valid;
alter table rea.runs validate constraint runs_status_check;
drop index if exists rea.runs_failed;
create index runs_failed on rea.runs (cluster, job, id desc)
  where status in ('failed', 'timed_out', 'killed', 'interrupted', 'oom_killed');
