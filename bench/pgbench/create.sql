-- One POST /v2/payment/order/create with an Idempotency-Key (a random user,
-- server_id 0, amount 10.25) as the service runs it on PostgreSQL: the token
-- read (READ_TOKENS, a group of one, no account), then, each in a statement of
-- its own, the key's lookup (no order has the key), the user's lookup and the
-- insert. Mirrors src/service/orders.rs `create`; written by hand, because
-- tests/pgbench_scripts.rs cannot generate it: sea-orm builds the last three
-- statements (here as PostgreSQL logs them, with pgbench's variables and
-- now() in place of the bound parameters, NULL for the NULL ones). bench/run
-- runs it with pgbench -M prepared; each transaction has a key and an order id
-- of its own (request count * clients + client, as in complete.sql, scattered
-- by a large prime, and the round; the keys' "9000" tells them from
-- create.lua's "8000").
\set uid random(1, :users)
\set g :k * :nclients + :client_id
\set k :k + 1
\set kg (:g * 1000003) % 1000000000000
\set oid (:g * 1000003) % 100000000 * 1000 + :round
SELECT "r"."idx", "t"."id" AS "token_id", "t"."project_id", "t"."active" AS "token_active",
    "t"."last_used_at", "p"."active" AS "project_active",
    (SELECT string_agg("g"."permission", ',') FROM "token_permissions" AS "g"
        WHERE "g"."token_id" = "t"."id") AS "permissions",
    CASE WHEN "b"."user_id" = "r"."user_id" THEN "b"."user_id"
        ELSE (SELECT "u"."id" FROM "users" AS "u"
            WHERE "u"."id" = "r"."user_id" AND "u"."project_id" = "t"."project_id")
    END AS "user_by_id",
    "by_email"."id" AS "user_by_email", "b"."main_cents", "b"."bonus_cents", "s"."id" AS "server_found"
FROM unnest(ARRAY[:tokhash]::text[], ARRAY[NULL]::int8[], ARRAY[NULL]::text[], ARRAY[NULL]::int8[])
    WITH ORDINALITY AS "r" ("token_hash", "user_id", "email", "server_id", "idx")
LEFT JOIN "app_tokens" AS "t" ON "t"."token_hash" = "r"."token_hash"
LEFT JOIN "projects" AS "p" ON "p"."id" = "t"."project_id"
LEFT JOIN "users" AS "by_email" ON "by_email"."email" = "r"."email" AND "by_email"."project_id" = "t"."project_id"
LEFT JOIN "balances" AS "b" ON "b"."user_id" = COALESCE("r"."user_id", "by_email"."id")
    AND "b"."server_id" = "r"."server_id" AND "b"."project_id" = "t"."project_id"
LEFT JOIN "servers" AS "s" ON "s"."id" = "r"."server_id" AND "s"."project_id" = "t"."project_id"
ORDER BY "r"."idx";
SELECT "payment_orders"."id", "payment_orders"."order_id", "payment_orders"."project_id", "payment_orders"."user_id", "payment_orders"."server_id", "payment_orders"."payment_system", "payment_orders"."amount_cents", "payment_orders"."status", "payment_orders"."payment_id", "payment_orders"."created_at", "payment_orders"."completed_at", "payment_orders"."cancelled_at", "payment_orders"."idempotency_key", "payment_orders"."request_hash" FROM "payment_orders" WHERE "payment_orders"."project_id" = :project AND "payment_orders"."idempotency_key" = lpad(:kg::text, 12, '0') || '-0000-4000-9000-' || lpad(:round::text, 8, '0') LIMIT :one;
SELECT "users"."id" FROM "users" WHERE "users"."project_id" = :project AND "users"."id" = :uid LIMIT :one;
INSERT INTO "payment_orders" ("order_id", "project_id", "user_id", "server_id", "payment_system", "amount_cents", "status", "payment_id", "created_at", "completed_at", "cancelled_at", "idempotency_key", "request_hash") VALUES ('Order:' || lpad(:oid::text, 11, '0'), :project, :uid, NULL, :psys, :cents, :pending, NULL, now(), NULL, NULL, lpad(:kg::text, 12, '0') || '-0000-4000-9000-' || lpad(:round::text, 8, '0'), :reqhash) RETURNING "id", "order_id", "project_id", "user_id", "server_id", "payment_system", "amount_cents", "status", "payment_id", "created_at", "completed_at", "cancelled_at", "idempotency_key", "request_hash";
