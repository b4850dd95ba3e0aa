-- One POST /v2/payment/order/create with an Idempotency-Key (a random user,
-- server_id 0, amount 10.25) as the service runs it on PostgreSQL: the token
-- read, then the order's insert with the user resolved in it (and its event
-- recorded, which for the bench's project without endpoints records none), each
-- a group of one. Generated from src/store/postgres by tests/pgbench_scripts.rs; bench/run
-- runs it with pgbench -M prepared, each transaction with a key and an order id
-- of its own (request count * clients + client, scattered by a large prime, and
-- the round; the keys' "9000" tells them from create.lua's "8000").
\set uid random(1, :users)
\set g :k * :nclients + :client_id
\set k :k + 1
\set kg (:g * 1000003) % 1000000000000
\set oid (:g * 1000003) % 100000000 * 1000 + :round
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
WITH "r" AS (
    SELECT * FROM unnest(ARRAY['Order:' || lpad(:oid::text, 11, '0')]::text[], ARRAY[:project]::int8[], ARRAY[:uid]::int8[], ARRAY[NULL]::text[], ARRAY[:zero]::int8[], ARRAY[:cents]::int8[],
        ARRAY[:psys]::text[], ARRAY[lpad(:kg::text, 12, '0') || '-0000-4000-9000-' || lpad(:round::text, 8, '0')]::text[], ARRAY[:reqhash]::text[], ARRAY['msg_' || md5(:g::text)]::text[], ARRAY['{"user_id":']::text[], ARRAY['}']::text[])
        WITH ORDINALITY AS "r" ("order_id", "project_id", "user_id", "email", "server_id",
            "amount_cents", "payment_system", "idempotency_key", "request_hash", "webhook_id",
            "body_head", "body_tail", "idx")
), "a" AS (
    SELECT "r".*,
        CASE WHEN "r"."user_id" IS NOT NULL
            THEN (SELECT "u"."id" FROM "users" AS "u" WHERE "u"."id" = "r"."user_id"
                AND "u"."project_id" = "r"."project_id"
                AND ("r"."email" IS NULL OR "u"."email" = "r"."email"))
            ELSE (SELECT "u"."id" FROM "users" AS "u" WHERE "u"."email" = "r"."email"
                AND "u"."project_id" = "r"."project_id")
        END AS "resolved_user",
        ("r"."server_id" = 0 OR EXISTS (SELECT 1 FROM "servers" AS "s"
            WHERE "s"."id" = "r"."server_id" AND "s"."project_id" = "r"."project_id")) AS "server_found"
    FROM "r"
), "i" AS (
    INSERT INTO "payment_orders" ("order_id", "project_id", "user_id", "server_id", "payment_system",
        "amount_cents", "status", "created_at", "idempotency_key", "request_hash")
    SELECT "order_id", "project_id", "resolved_user", NULLIF("server_id", 0), "payment_system",
        "amount_cents", :pending, now(), "idempotency_key", "request_hash"
    FROM "a" WHERE "resolved_user" IS NOT NULL AND "server_found"
    ORDER BY "project_id", "idempotency_key", "idx"
    ON CONFLICT DO NOTHING
    RETURNING "order_id"
), "v" AS (
    INSERT INTO "webhook_events" ("webhook_id", "project_id", "event_type", "order_id", "payload", "created_at")
    SELECT "a"."webhook_id", "a"."project_id", 'order.created', "a"."order_id",
        "a"."body_head" || "a"."resolved_user"::text || "a"."body_tail", now()
    FROM "a" JOIN "i" ON "i"."order_id" = "a"."order_id"
    WHERE EXISTS (SELECT 1 FROM "webhook_endpoints" AS "e" WHERE "e"."project_id" = "a"."project_id"
        AND "e"."enabled" AND ("e"."event_types" IS NULL
            OR strpos(',' || "e"."event_types" || ',', ',' || 'order.created' || ',') > 0))
    ORDER BY "a"."idx"
    RETURNING "id", "project_id"
), "d" AS (
    INSERT INTO "webhook_deliveries" ("event_id", "endpoint_id", "status", "attempts", "next_attempt_at",
        "created_at")
    SELECT "v"."id", "e"."id", :pending, 0, now(), now()
    FROM "v" JOIN "webhook_endpoints" AS "e" ON "e"."project_id" = "v"."project_id" AND "e"."enabled"
        AND ("e"."event_types" IS NULL OR strpos(',' || "e"."event_types" || ',', ',' || 'order.created' || ',') > 0)
)
SELECT "a"."idx", "a"."resolved_user", "a"."server_found", "i"."order_id" IS NOT NULL AS "inserted"
FROM "a" LEFT JOIN "i" ON "i"."order_id" = "a"."order_id"
ORDER BY "a"."idx";
