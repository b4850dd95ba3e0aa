-- The statement masterpay issues for one GET /v2/master-account/balance
-- (server_id 0, by user_id) on PostgreSQL, as captured with log_statement =
-- 'all': the token lookup (token, project state and permissions) with the
-- balance joined to it, and the user read only when there is no balance row
-- (balances::join_by_id), one statement (see tokens::authenticate). Run by bench/run with pgbench -M prepared
-- (parameters bound like sqlx binds them); users, tokhash, zero,
-- perm_balance and perm_complete come from -D.
\set uid random(1, :users)
SELECT "app_tokens"."id", "app_tokens"."project_id", "app_tokens"."active", "app_tokens"."last_used_at", "projects"."active", (SELECT COUNT(*) FROM "token_permissions" WHERE "token_permissions"."token_id" = "app_tokens"."id" AND "token_permissions"."permission" = :perm_balance), (SELECT COUNT(*) FROM "token_permissions" WHERE "token_permissions"."token_id" = "app_tokens"."id" AND "token_permissions"."permission" = :perm_complete), COALESCE("balances"."user_id", (SELECT "users"."id" FROM "users" WHERE "users"."project_id" = "app_tokens"."project_id" AND "users"."id" = :uid)), "balances"."main_cents", "balances"."bonus_cents" FROM "app_tokens" LEFT JOIN "projects" ON "projects"."id" = "app_tokens"."project_id" LEFT JOIN "balances" ON "balances"."user_id" = :uid AND "balances"."server_id" = :zero AND "balances"."project_id" = "app_tokens"."project_id" WHERE "app_tokens"."token_hash" = :tokhash;
