-- run_output: a run's captured output, written once its end is recorded
-- (idempotent: an end sent twice writes it twice).
-- Parameters: $1 p_run_id, $2 p_output, $3 p_output_bytes.
insert into rea.run_output (run_id, output, output_bytes) values ($1, $2, $3)
  on conflict (run_id) do update set output = excluded.output, output_bytes = excluded.output_bytes
