-- BASELINE (before issue 6 optimizations): kept to reproduce the "before" ceilings
-- with BENCH_PGBENCH_DIR=bench/pgbench/baseline. They run on the schema of that
-- time (before migrations m20261124_000002 and 000004), not on today's.
-- The statements masterpay issues for one POST /v2/payment/order/complete
-- that completes a pending order, as captured with log_statement = 'all'.
-- Run by bench/run with pgbench -M prepared; each transaction takes a
-- distinct order of base+1 .. base+pool (a permutation, like complete.lua).
\set g :k * :nclients + :client_id
\set k :k + 1
\set oid :base + (:g * 1000003) % :pool + 1
SELECT "app_tokens"."id", "app_tokens"."project_id", "app_tokens"."name", "app_tokens"."token_hash", "app_tokens"."active", "app_tokens"."created_at", "app_tokens"."last_used_at" FROM "app_tokens" WHERE "app_tokens"."token_hash" = :tokhash LIMIT :one;
SELECT "token_permissions"."id", "token_permissions"."token_id", "token_permissions"."permission" FROM "token_permissions" WHERE "token_permissions"."token_id" = :tokid;
SELECT "projects"."id", "projects"."name", "projects"."active", "projects"."created_at" FROM "projects" WHERE "projects"."id" = :project LIMIT :one;
BEGIN;
UPDATE "payment_orders" SET "status" = :completed, "completed_at" = now(), "payment_id" = 'bench_' || :g::text WHERE "payment_orders"."order_id" = 'Order:' || lpad(:oid::text, 10, '0') AND "payment_orders"."project_id" = :project AND "payment_orders"."payment_system" = :psys AND "payment_orders"."status" <> :completed;
SELECT "payment_orders"."id", "payment_orders"."order_id", "payment_orders"."project_id", "payment_orders"."user_id", "payment_orders"."server_id", "payment_orders"."payment_system", "payment_orders"."amount_cents", "payment_orders"."status", "payment_orders"."payment_id", "payment_orders"."created_at", "payment_orders"."completed_at" FROM "payment_orders" WHERE "payment_orders"."order_id" = 'Order:' || lpad(:oid::text, 10, '0') AND "payment_orders"."project_id" = :project AND "payment_orders"."payment_system" = :psys LIMIT :one \gset o_
INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at") VALUES (:o_user_id, :zero, :o_amount_cents, :zero, now()) ON CONFLICT ("user_id", "server_id") DO UPDATE SET "main_cents" = "balances"."main_cents" + :o_amount_cents, "updated_at" = now();
SELECT "balances"."id", "balances"."user_id", "balances"."server_id", "balances"."main_cents", "balances"."bonus_cents", "balances"."updated_at" FROM "balances" WHERE "balances"."user_id" = :o_user_id AND "balances"."server_id" = :zero LIMIT :one \gset b_
INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type", "amount_cents", "balance_before_cents", "balance_after_cents", "created_at") VALUES ('order_credit', :o_id, :o_user_id, :zero, 'main', :o_amount_cents, :b_main_cents::bigint - :o_amount_cents::bigint, :b_main_cents, now()) RETURNING "id", "kind", "order_ref", "user_id", "server_id", "balance_type", "amount_cents", "balance_before_cents", "balance_after_cents", "created_at";
COMMIT;
