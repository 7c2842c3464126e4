-- rea multi-node schema, migration 8: each job's daily roll-up, what the
-- web console's 90-day heatmap reads (`Reader::days`) instead of the job's
-- runs. As the embedded history's (rea-history(5), `days/`): per job and
-- UTC quarter hour, its final runs (skipped aside) that succeeded, that did
-- not, and their durations; the reader cuts the days in the job's zone.
-- Kept by a trigger on rea.runs, so no statement of the nodes changes and
-- older binaries keep it too; 92 days are kept (a job's older rows go
-- when its runs end). Measured at 1,000,000 runs (a busy job's 25,000 in
-- 90 days, load average 16): its 90 days by GROUP BY over its runs took
-- 280-450 ms (160-430 ms with an index on its runs' instants); from this
-- table (8,900 rows of it) 15-55 ms.
create table if not exists rea.run_days (
  cluster  text not null,
  job      text not null,
  day      date not null,      -- UTC
  slot     smallint not null,  -- quarter hour of the UTC day, 0..95
  ok       bigint not null default 0,
  bad      bigint not null default 0,
  ms       bigint not null default 0,
  primary key (cluster, job, day, slot)
);

create or replace function rea.run_days_count() returns trigger
language plpgsql as $$
declare
  counted constant text[] := array['succeeded', 'failed', 'timed_out', 'killed', 'interrupted', 'oom_killed'];
  was_counted boolean := tg_op = 'UPDATE' and old.status = any(counted);
  is_counted boolean := new.status = any(counted);
  v_utc timestamp;
  v_ms bigint;
begin
  if was_counted = is_counted and (not is_counted or old.status = new.status) then
    return null;
  end if;
  if was_counted then
    v_utc := coalesce(old.ended_at, old.started_at, old.claimed_at) at time zone 'UTC';
    v_ms := case when jsonb_typeof(old.detail -> 'duration_ms') = 'number'
               then greatest(0, least((old.detail ->> 'duration_ms')::numeric, 1e15))::bigint else 0 end;
    update rea.run_days d
       set ok = d.ok - (old.status = 'succeeded')::int,
           bad = d.bad - (old.status <> 'succeeded')::int,
           ms = d.ms - v_ms
     where d.cluster = old.cluster and d.job = old.job and d.day = v_utc::date
       and d.slot = (extract(hour from v_utc) * 4 + floor(extract(minute from v_utc) / 15))::smallint;
  end if;
  if is_counted then
    v_utc := coalesce(new.ended_at, new.started_at, new.claimed_at) at time zone 'UTC';
    v_ms := case when jsonb_typeof(new.detail -> 'duration_ms') = 'number'
               then greatest(0, least((new.detail ->> 'duration_ms')::numeric, 1e15))::bigint else 0 end;
    insert into rea.run_days as d (cluster, job, day, slot, ok, bad, ms)
    values (new.cluster, new.job, v_utc::date,
            (extract(hour from v_utc) * 4 + floor(extract(minute from v_utc) / 15))::smallint,
            (new.status = 'succeeded')::int, (new.status <> 'succeeded')::int, v_ms)
    on conflict (cluster, job, day, slot) do update
       set ok = d.ok + excluded.ok, bad = d.bad + excluded.bad, ms = d.ms + excluded.ms;
    delete from rea.run_days d
     where d.cluster = new.cluster and d.job = new.job and d.day < v_utc::date - 92;
  end if;
  return null;
end
$$;

drop trigger if exists run_days_count on rea.runs;
create trigger run_days_count after insert or update of status on rea.runs
  for each row execute function rea.run_days_count();

-- The runs of the last 92 days already there.
insert into rea.run_days (cluster, job, day, slot, ok, bad, ms)
select cluster, job, (at at time zone 'UTC')::date,
       (extract(hour from at at time zone 'UTC') * 4
        + floor(extract(minute from at at time zone 'UTC') / 15))::smallint,
       count(*) filter (where status = 'succeeded'),
       count(*) filter (where status <> 'succeeded'),
       coalesce(sum(case when jsonb_typeof(detail -> 'duration_ms') = 'number'
                         then greatest(0, least((detail ->> 'duration_ms')::numeric, 1e15))::bigint else 0 end), 0)
from (select cluster, job, status, detail, coalesce(ended_at, started_at, claimed_at) as at
        from rea.runs
       where status in ('succeeded', 'failed', 'timed_out', 'killed', 'interrupted', 'oom_killed')
         and coalesce(ended_at, started_at, claimed_at) >= now() - interval '93 days') r
group by 1, 2, 3, 4
on conflict (cluster, job, day, slot) do nothing;
