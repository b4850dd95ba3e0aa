-- One GET /v2/master-account/balance (server_id 0, by user_id) as the service
-- runs it on PostgreSQL: the token with the account read in the same statement,
-- a group of one. Generated from src/store/postgres by tests/pgbench_scripts.rs;
-- bench/run runs it with pgbench -M prepared (users, tokhash, zero from -D).
\set uid random(1, :users)
SELECT "r"."idx", "t"."id" AS "token_id", "t"."project_id", "t"."active" AS "token_active",
    "t"."expires_at", "p"."active" AS "project_active",
    CASE WHEN "t"."token_hash" = "r"."token_hash" THEN NULL ELSE "t"."previous_until" END AS "grace_until",
    CASE WHEN "t"."token_hash" = "r"."token_hash" THEN "t"."last_used_at" ELSE "t"."previous_last_used_at" END
        AS "last_used_at",
    (SELECT string_agg("g"."permission", ',') FROM "token_permissions" AS "g"
        WHERE "g"."token_id" = "t"."id") AS "permissions",
    CASE WHEN "b"."user_id" = "r"."user_id" THEN "b"."user_id"
        ELSE (SELECT "u"."id" FROM "users" AS "u"
            WHERE "u"."id" = "r"."user_id" AND "u"."project_id" = "t"."project_id")
    END AS "user_by_id",
    "by_email"."id" AS "user_by_email", "b"."main_cents", "b"."bonus_cents", "s"."id" AS "server_found"
FROM unnest(ARRAY[:tokhash]::text[], ARRAY[:uid]::int8[], ARRAY[NULL]::text[], ARRAY[:zero]::int8[])
    WITH ORDINALITY AS "r" ("token_hash", "user_id", "email", "server_id", "idx")
LEFT JOIN "app_tokens" AS "t" ON "t"."token_hash" = "r"."token_hash" OR "t"."previous_hash" = "r"."token_hash"
LEFT JOIN "projects" AS "p" ON "p"."id" = "t"."project_id"
LEFT JOIN "users" AS "by_email" ON "by_email"."email" = "r"."email" AND "by_email"."project_id" = "t"."project_id"
LEFT JOIN "balances" AS "b" ON "b"."user_id" = COALESCE("r"."user_id", "by_email"."id")
    AND "b"."server_id" = "r"."server_id" AND "b"."project_id" = "t"."project_id"
LEFT JOIN "servers" AS "s" ON "s"."id" = "r"."server_id" AND "s"."project_id" = "t"."project_id"
ORDER BY "r"."idx";
