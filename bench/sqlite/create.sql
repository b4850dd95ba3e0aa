-- One POST /v2/payment/order/create with an Idempotency-Key, as the SQLite store
-- runs its transaction (a project without webhook endpoints, so no event is
-- recorded). Generated from src/store/sqlite.rs by tests/sqlite_scripts.rs;
-- bench/sqlite_writes.py runs it.
-- connection
PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
-- checkpoint interval ms: 100
-- checkpoint passes: 8
-- checkpoint held frames: 256
-- statement: begin
BEGIN IMMEDIATE;
-- statement: insert_order
INSERT INTO "payment_orders" ("order_id", "project_id", "user_id", "server_id", "payment_system",
    "amount_cents", "status", "created_at", "idempotency_key", "request_hash")
SELECT :order_id, :project_id, CASE WHEN :user_id IS NOT NULL
        THEN (SELECT u."id" FROM "users" AS u WHERE u."id" = :user_id AND u."project_id" = :project_id
            AND (:email IS NULL OR u."email" = :email))
        ELSE (SELECT u."id" FROM "users" AS u WHERE u."email" = :email AND u."project_id" = :project_id)
    END, NULLIF(:server_id, 0), :payment_system,
    :amount_cents, :status, :created_at, :idempotency_key, :request_hash
WHERE CASE WHEN :user_id IS NOT NULL
        THEN (SELECT u."id" FROM "users" AS u WHERE u."id" = :user_id AND u."project_id" = :project_id
            AND (:email IS NULL OR u."email" = :email))
        ELSE (SELECT u."id" FROM "users" AS u WHERE u."email" = :email AND u."project_id" = :project_id)
    END IS NOT NULL AND (:server_id = 0 OR EXISTS (SELECT 1 FROM "servers" AS s
        WHERE s."id" = :server_id AND s."project_id" = :project_id))
ON CONFLICT DO NOTHING
RETURNING "user_id";
-- statement: subscribers
SELECT "id", "event_types" FROM "webhook_endpoints"
WHERE "project_id" = ?1 AND "enabled";
-- statement: commit
COMMIT;
