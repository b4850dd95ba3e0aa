-- One POST /v2/payment/order/complete that completes a pending order, as the
-- service runs it on PostgreSQL: the token read, then the completion's
-- transaction (status update; credit and log row), a group of one. Generated
-- from src/store/postgres by tests/pgbench_scripts.rs; bench/run runs it with
-- pgbench -M prepared, each transaction taking a distinct order of
-- base+1 .. base+pool (a permutation, like complete.lua).
\set g :k * :nclients + :client_id
\set k :k + 1
\set oid :base + (:g * 1000003) % :pool + 1
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
FROM unnest(ARRAY[:tokhash]::text[], ARRAY[NULL]::int8[], ARRAY[NULL]::text[], ARRAY[NULL]::int8[])
    WITH ORDINALITY AS "r" ("token_hash", "user_id", "email", "server_id", "idx")
LEFT JOIN "app_tokens" AS "t" ON "t"."token_hash" = "r"."token_hash" OR "t"."previous_hash" = "r"."token_hash"
LEFT JOIN "projects" AS "p" ON "p"."id" = "t"."project_id"
LEFT JOIN "users" AS "by_email" ON "by_email"."email" = "r"."email" AND "by_email"."project_id" = "t"."project_id"
LEFT JOIN "balances" AS "b" ON "b"."user_id" = COALESCE("r"."user_id", "by_email"."id")
    AND "b"."server_id" = "r"."server_id" AND "b"."project_id" = "t"."project_id"
LEFT JOIN "servers" AS "s" ON "s"."id" = "r"."server_id" AND "s"."project_id" = "t"."project_id"
ORDER BY "r"."idx";
BEGIN;
WITH "r" AS (
    SELECT * FROM unnest(ARRAY['Order:' || lpad(:oid::text, 10, '0')]::text[], ARRAY[:project]::int8[], ARRAY[:psys]::text[], ARRAY['bench_' || :g::text]::text[])
        WITH ORDINALITY AS "r" ("order_id", "project_id", "payment_system", "payment_id", "idx")
), "k" AS (
    SELECT "p"."id", "r"."idx", "r"."payment_id" FROM "payment_orders" AS "p"
    JOIN "r" ON "p"."order_id" = "r"."order_id" AND "p"."project_id" = "r"."project_id"
        AND "p"."payment_system" = "r"."payment_system"
    WHERE "p"."status" = :pending
    ORDER BY "p"."id" FOR NO KEY UPDATE OF "p"
), "o" AS (
    UPDATE "payment_orders" SET "status" = :completed, "completed_at" = now(), "payment_id" = "k"."payment_id"
    FROM "k" WHERE "payment_orders"."id" = "k"."id" AND "payment_orders"."status" = :pending
    RETURNING "k"."idx", "payment_orders"."id", "payment_orders"."user_id",
        COALESCE("payment_orders"."server_id", 0) AS "server_id", "payment_orders"."amount_cents",
        "payment_orders"."payment_id", "payment_orders"."project_id", "payment_orders"."created_at"
)
SELECT "r"."idx", "o"."id" AS "order_ref", "o"."user_id", "o"."server_id", "o"."amount_cents",
    "o"."payment_id", "o"."project_id", "o"."created_at",
    EXISTS (SELECT 1 FROM "webhook_endpoints" AS "e"
        WHERE "e"."project_id" = "o"."project_id" AND "e"."enabled") AS "notify",
    (SELECT "p"."status" FROM "payment_orders" AS "p" WHERE "p"."order_id" = "r"."order_id"
        AND "p"."project_id" = "r"."project_id" AND "p"."payment_system" = "r"."payment_system") AS "found_status"
FROM "r" LEFT JOIN "o" ON "o"."idx" = "r"."idx"
ORDER BY "r"."idx" \gset
WITH "o" AS (
    SELECT * FROM unnest(ARRAY[:idx]::int8[], ARRAY[:order_ref]::int8[], ARRAY[:user_id]::int8[], ARRAY[:server_id]::int8[], ARRAY[:amount_cents]::int8[], ARRAY[:project_id]::int8[])
        AS "o" ("idx", "order_ref", "user_id", "server_id", "amount_cents", "project_id")
), "s" AS (
    SELECT "user_id", "server_id", "project_id", SUM("amount_cents")::int8 AS "total"
    FROM "o" GROUP BY "user_id", "server_id", "project_id"
), "b" AS (
    INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
    SELECT "user_id", "server_id", "total", 0, now(), "project_id" FROM "s" ORDER BY "user_id", "server_id"
    ON CONFLICT ("user_id", "server_id") DO UPDATE
    SET "main_cents" = "balances"."main_cents" + EXCLUDED."main_cents", "updated_at" = EXCLUDED."updated_at"
    RETURNING "user_id", "server_id", "main_cents"
), "w" AS (
    SELECT "o"."idx", "o"."order_ref", "o"."user_id", "o"."server_id", "o"."amount_cents",
        ("b"."main_cents" - "s"."total" + SUM("o"."amount_cents") OVER (
            PARTITION BY "o"."user_id", "o"."server_id" ORDER BY "o"."idx"))::int8 AS "after"
    FROM "o" JOIN "s" USING ("user_id", "server_id") JOIN "b" USING ("user_id", "server_id")
), "l" AS (
    INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
        "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
    SELECT :kind, "order_ref", "user_id", "server_id", 'main', "amount_cents", "after" - "amount_cents", "after", now()
    FROM "w" ORDER BY "idx"
)
SELECT "idx", "after" FROM "w" ORDER BY "idx";
COMMIT;
