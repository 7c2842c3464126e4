-- rea multi-node schema, migration 4: the parameters a trigger passed
-- (`rea trigger --param`), beside its audit entry. Older binaries insert
-- without it (null).
alter table rea.audit add column if not exists params jsonb;
