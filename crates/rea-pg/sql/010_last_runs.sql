-- rea multi-node schema, migration 9: each job's last run that ran, what
-- the cluster-wide `rea status` reads (`Reader::status`) instead of a
-- probe of the job's runs per job (a lateral join walking `runs_job` past
-- the runs that did not run: started, skipped, missed...), which grows
-- with those runs. Measured at 10,000 jobs and 1,000,000 runs (BENCHMARKS.md,
-- stop 32): `rea status` p50 220 ms before, 135 ms with this table.
-- Kept by triggers on rea.runs, so no statement of the nodes changes and
-- older binaries keep it too. A row per name in rea.runs' `job` column
-- that has a run that ran (one-shots' ids among them: the probe it
-- replaces would have found them too, were a job named like one).

-- The statuses of a run that ran (`RAN_SQL` in src/reader.rs, tested to
-- be the same list): one definition, so a later status is one `create or
-- replace` of this function in a later migration, not an edit of the
-- triggers. Inlined by the planner (a one-expression SQL function).
create or replace function rea.ran(status text) returns boolean
language sql immutable parallel safe as $$
  select $1 in ('succeeded', 'failed', 'timed_out', 'killed', 'interrupted', 'oom_killed')
$$;

create table if not exists rea.last_runs (
  cluster text not null,
  job     text not null,
  run_id  bigint not null,   -- rea.runs.id: the largest among the job's runs that ran
  primary key (cluster, job)
);

-- A run that ran (inserted so, or ended): the job's last run unless a
-- larger one is there already (ids grow; two ends of one job racing on
-- two nodes keep the larger whichever commits first).
create or replace function rea.last_runs_ran() returns trigger
language plpgsql as $$
begin
  insert into rea.last_runs as l (cluster, job, run_id)
  values (new.cluster, new.job, new.id)
  on conflict (cluster, job) do update set run_id = excluded.run_id
    where l.run_id < excluded.run_id;
  return null;
end
$$;

drop trigger if exists last_runs_ran on rea.runs;
create trigger last_runs_ran after insert or update of status, cluster, job on rea.runs
  for each row when (rea.ran(new.status))
  execute function rea.last_runs_ran();

-- The job's last run again, where the one recorded may no longer be it:
-- a run's status leaving the list (no rea statement does so; an operator
-- might), its job renamed, runs deleted (no rea statement deletes runs
-- either; an operator trimming the history would). The job's row goes
-- when none of its runs ran; `Reader::status` reads a run that is gone
-- as no last run all the same.
create or replace function rea.last_runs_recount(p_cluster text, p_job text) returns void
language plpgsql as $$
declare
  v_id bigint;
begin
  select x.id into v_id from rea.runs x
   where x.cluster = p_cluster and x.job = p_job and rea.ran(x.status)
   order by x.id desc limit 1;
  if v_id is null then
    delete from rea.last_runs l where l.cluster = p_cluster and l.job = p_job;
  else
    insert into rea.last_runs as l (cluster, job, run_id) values (p_cluster, p_job, v_id)
    on conflict (cluster, job) do update set run_id = excluded.run_id
      where l.run_id <> excluded.run_id;
  end if;
end
$$;

create or replace function rea.last_runs_unran() returns trigger
language plpgsql as $$
begin
  if exists (select 1 from rea.last_runs l
              where l.cluster = old.cluster and l.job = old.job and l.run_id = old.id) then
    perform rea.last_runs_recount(old.cluster, old.job);
  end if;
  return null;
end
$$;

drop trigger if exists last_runs_unran on rea.runs;
create trigger last_runs_unran after update of status, cluster, job on rea.runs
  for each row when (rea.ran(old.status)
                     and (not rea.ran(new.status) or new.cluster <> old.cluster or new.job <> old.job))
  execute function rea.last_runs_unran();

-- Deleted runs, once per statement (a trim deletes many): the jobs whose
-- recorded last run went are counted again.
create or replace function rea.last_runs_gone() returns trigger
language plpgsql as $$
declare
  k record;
begin
  for k in select distinct g.cluster, g.job from gone g
             join rea.last_runs l on l.cluster = g.cluster and l.job = g.job and l.run_id = g.id
  loop
    perform rea.last_runs_recount(k.cluster, k.job);
  end loop;
  return null;
end
$$;

drop trigger if exists last_runs_gone on rea.runs;
create trigger last_runs_gone after delete on rea.runs
  referencing old table as gone
  for each statement execute function rea.last_runs_gone();

create or replace function rea.last_runs_truncated() returns trigger
language plpgsql as $$
begin
  delete from rea.last_runs;
  return null;
end
$$;

drop trigger if exists last_runs_truncated on rea.runs;
create trigger last_runs_truncated after truncate on rea.runs
  for each statement execute function rea.last_runs_truncated();

-- The runs already there (the triggers above hold rea.runs' lock from
-- their creation to this migration's commit: no run ends in between).
insert into rea.last_runs as l (cluster, job, run_id)
select cluster, job, max(id) from rea.runs where rea.ran(status) group by cluster, job
on conflict (cluster, job) do update set run_id = excluded.run_id
  where l.run_id < excluded.run_id;
