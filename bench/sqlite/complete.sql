-- One POST /v2/payment/order/complete that completes a pending order, as the SQLite
-- store runs its transaction (a project without webhook endpoints, so no event is
-- recorded). Generated from src/store/sqlite.rs by tests/sqlite_scripts.rs;
-- bench/sqlite_writes.py runs it.
-- connection
PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
-- checkpoint interval ms: 100
-- checkpoint passes: 8
-- checkpoint held frames: 256
-- statement: begin
BEGIN IMMEDIATE;
-- statement: complete_order
UPDATE "payment_orders"
SET "status" = ?1, "completed_at" = ?2, "payment_id" = ?3
WHERE "order_id" = ?4 AND "project_id" = ?5 AND "payment_system" = ?6 AND "status" = ?7
RETURNING "id", "user_id", "server_id", "amount_cents", "payment_id", "created_at";
-- statement: credit_main
INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
VALUES (?1, ?2, ?3, 0, ?4, ?5)
ON CONFLICT ("user_id", "server_id") DO UPDATE
SET "main_cents" = "balances"."main_cents" + ?3, "updated_at" = ?4
RETURNING "main_cents";
-- statement: log_credit
INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
    "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
VALUES (?1, ?2, ?3, ?4, 'main', ?5, ?6, ?7, ?8);
-- statement: subscribers
SELECT "id", "event_types" FROM "webhook_endpoints"
WHERE "project_id" = ?1 AND "enabled";
-- statement: commit
COMMIT;
