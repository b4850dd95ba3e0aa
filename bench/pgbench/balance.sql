-- The statements masterpay issues for one GET /v2/master-account/balance
-- (server_id 0, by user_id), as captured with log_statement = 'all': the
-- token lookup (token, project state and permissions in one statement), then
-- the user joined with its balance. Run by bench/run with pgbench -M prepared
-- (parameters bound like sqlx binds them); users, tokhash, project, zero,
-- perm_balance and perm_complete come from -D.
\set uid random(1, :users)
SELECT "app_tokens"."id", "app_tokens"."project_id", "app_tokens"."active", "app_tokens"."last_used_at", "projects"."active", (SELECT COUNT(*) FROM "token_permissions" WHERE "token_permissions"."token_id" = "app_tokens"."id" AND "token_permissions"."permission" = :perm_balance), (SELECT COUNT(*) FROM "token_permissions" WHERE "token_permissions"."token_id" = "app_tokens"."id" AND "token_permissions"."permission" = :perm_complete) FROM "app_tokens" LEFT JOIN "projects" ON "projects"."id" = "app_tokens"."project_id" WHERE "app_tokens"."token_hash" = :tokhash;
SELECT "users"."id", "balances"."main_cents", "balances"."bonus_cents" FROM "users" LEFT JOIN "balances" ON "balances"."user_id" = "users"."id" AND "balances"."server_id" = :zero WHERE "users"."project_id" = :project AND "users"."id" = :uid;
