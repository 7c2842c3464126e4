-- rea multi-node schema, migration 2: the audit log (`rea audit`), one row
-- per state-changing control request any node answered, refused ones
-- included. Written by each node's audit task (its own connection, in
-- batches), trimmed to the newest rows by the same task; read by
-- `rea audit` in cluster mode.
create table rea.audit (
  id       bigserial primary key,
  cluster  text not null,
  ts       timestamptz not null,       -- when the node answered (its clock)
  node     text not null,
  uid      bigint not null,
  "user"   text,
  tenant   text,                        -- null: the system tenant
  source   text not null,               -- cli, socket, top, web
  action   text not null,               -- trigger, pause, resume, cancel, submit, edit, reload, kill
  target   text[] not null,
  result   text not null check (result in ('ok', 'refused')),
  code     text,
  message  text
);
create index audit_cluster_id on rea.audit (cluster, id desc);
