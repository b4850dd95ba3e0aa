-- BASELINE (before issue 6 optimizations): kept to reproduce the "before" ceilings
-- with BENCH_PGBENCH_DIR=bench/pgbench/baseline. They run on the schema of that
-- time (before migrations m20261124_000002 and 000004), not on today's.
-- The statements masterpay issues for one GET /v2/master-account/balance
-- (server_id 0), as captured with log_statement = 'all'. Run by bench/run
-- with pgbench -M prepared (parameters bound like sqlx binds them):
-- variables users, tokhash, project, tokid come from -D.
\set uid random(1, :users)
SELECT "app_tokens"."id", "app_tokens"."project_id", "app_tokens"."name", "app_tokens"."token_hash", "app_tokens"."active", "app_tokens"."created_at", "app_tokens"."last_used_at" FROM "app_tokens" WHERE "app_tokens"."token_hash" = :tokhash LIMIT :one;
SELECT "token_permissions"."id", "token_permissions"."token_id", "token_permissions"."permission" FROM "token_permissions" WHERE "token_permissions"."token_id" = :tokid;
SELECT "projects"."id", "projects"."name", "projects"."active", "projects"."created_at" FROM "projects" WHERE "projects"."id" = :project LIMIT :one;
SELECT "users"."id", "users"."project_id", "users"."email", "users"."created_at" FROM "users" WHERE "users"."project_id" = :project AND "users"."id" = :uid LIMIT :one;
SELECT "balances"."id", "balances"."user_id", "balances"."server_id", "balances"."main_cents", "balances"."bonus_cents", "balances"."updated_at" FROM "balances" WHERE "balances"."user_id" = :uid AND "balances"."server_id" = :zero LIMIT :one;
