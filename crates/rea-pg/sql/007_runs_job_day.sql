-- rea multi-node schema, migration 6: a job's runs by the instant their
-- record bears (ended, else started, else claimed), so that the web
-- console's 90-day heatmap (`Reader::days`: a GROUP BY over the job's
-- runs of those days) reads an index range, not every run of the job.
create index if not exists runs_job_ts
    on rea.runs (cluster, job, (coalesce(ended_at, started_at, claimed_at)));
