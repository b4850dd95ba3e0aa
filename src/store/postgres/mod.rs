//! The PostgreSQL store: concurrent requests' statements in groups.
//!
//! Many stateless instances share one PostgreSQL, whose cost per request is
//! mostly a statement and a commit. So the token reads of concurrent
//! requests are one statement over arrays of their parameters, and their
//! completions one transaction (see [`group`] for how groups form). A lone
//! request is a group of one: there is one way to read and one way to
//! complete.
//!
//! A completion group is one READ COMMITTED transaction of two statements:
//! the status update of every pending order it names (locked in the order of
//! their ids), then the credits (summed per account, upserted in (user,
//! server) order) and one log row per order. The fixed lock order keeps
//! groups, of this instance or another, from waiting on each other in a
//! cycle. A statement that fails names the step (ORDER_UPDATE_FAILED or
//! PAYMENT_PROCESSING_ERROR) and changes nothing. When a group of several
//! fails at its credits (an order that would take a balance past its
//! ceiling), it runs again one order at a time, so that the bad order fails
//! alone; any other failure (the database unreachable, a lock held too long)
//! would fail the orders alone just the same, and is every order's answer.
//!
//! A group's statements are bounded by the statement timeout on the server;
//! a group as a whole is also bounded here ([`group_bound`]), so that a
//! connection that went silent (a network cut) frees its runner in time.
//!
//! Readiness asks the session whether it can write (`WRITABLE`); a
//! connection on which a write or that check was refused is closed rather
//! than pooled again (see [`super::readiness`]).

pub mod group;
mod relay;

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use entity::{
    operation_log::LogKind, payment_order::OrderStatus, webhook_delivery::DeliveryStatus,
};
use futures_util::FutureExt;
use sea_orm::{
    ActiveEnum, DatabaseConnection,
    sqlx::{self, PgPool, Postgres, Row, pool::PoolConnection},
};

use self::group::Groups;
use super::{
    AccountKey, CompleteError, CompletedOrder, Completion, GroupSizes, LOG_AUDIT, NewOrder,
    ORDER_STATUS, OrderInsert, RECORD_TOKEN_USE, Readiness, Store, StoreError, StoreFuture,
    Subscriber, TokenRow, deliveries, log_audits, money, now,
    readiness::{READ_ONLY, WriteHealth, close_if_refused},
    relay::RelayStore,
    token_row_of,
};
use crate::{
    config::PoolSettings,
    events::{self, EventType, NewEvent, new_webhook_id},
    money::Money,
};

/// Statements of one kind in flight at once, per instance. One made the
/// largest groups, but a group waiting on a row lock (an operator's long
/// transaction) would hold up every completion of the instance; with two,
/// requests keep flowing past one stalled statement.
const MAX_RUNNING: usize = 2;
/// Requests in one statement at most.
const MAX_GROUP: usize = 32;

/// The tokens of a group of requests by their hashes (`$1`), one row per
/// request in their order (`idx`), with each token's project state and
/// permissions and each request's account (`$2` user ids, `$3` e-mails, `$4`
/// server ids; NULL where no account is asked): the user by e-mail in the
/// token's project, the balance of the user (by id, else by e-mail) on the
/// server, the user by id (proved by the balance row, which carries its
/// user's project; read from users only without one), and the server.
/// `token_id` is NULL for an unknown token.
pub const READ_TOKENS: &str = r#"SELECT "r"."idx", "t"."id" AS "token_id", "t"."project_id", "t"."active" AS "token_active",
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
FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[])
    WITH ORDINALITY AS "r" ("token_hash", "user_id", "email", "server_id", "idx")
LEFT JOIN "app_tokens" AS "t" ON "t"."token_hash" = "r"."token_hash" OR "t"."previous_hash" = "r"."token_hash"
LEFT JOIN "projects" AS "p" ON "p"."id" = "t"."project_id"
LEFT JOIN "users" AS "by_email" ON "by_email"."email" = "r"."email" AND "by_email"."project_id" = "t"."project_id"
LEFT JOIN "balances" AS "b" ON "b"."user_id" = COALESCE("r"."user_id", "by_email"."id")
    AND "b"."server_id" = "r"."server_id" AND "b"."project_id" = "t"."project_id"
LEFT JOIN "servers" AS "s" ON "s"."id" = "r"."server_id" AND "s"."project_id" = "t"."project_id"
ORDER BY "r"."idx""#;

/// The status update of a group of completions (`$1` order ids, `$2`
/// project ids, `$3` payment systems, `$4` payment ids; `$5` the completed
/// status, `$6` the time, `$7` the pending status): the pending orders they
/// name, locked in the order of their ids, set completed under the same
/// guard as alone; one row per request in their order, with the order it
/// completed (NULL when none), whether that order's project has an enabled
/// endpoint (then its event is recorded), and the status of the order it
/// names (NULL when there is none).
pub const COMPLETE_ORDERS: &str = r#"WITH "r" AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[])
        WITH ORDINALITY AS "r" ("order_id", "project_id", "payment_system", "payment_id", "idx")
), "k" AS (
    SELECT "p"."id", "r"."idx", "r"."payment_id" FROM "payment_orders" AS "p"
    JOIN "r" ON "p"."order_id" = "r"."order_id" AND "p"."project_id" = "r"."project_id"
        AND "p"."payment_system" = "r"."payment_system"
    WHERE "p"."status" = $7
    ORDER BY "p"."id" FOR NO KEY UPDATE OF "p"
), "o" AS (
    UPDATE "payment_orders" SET "status" = $5, "completed_at" = $6, "payment_id" = "k"."payment_id"
    FROM "k" WHERE "payment_orders"."id" = "k"."id" AND "payment_orders"."status" = $7
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
ORDER BY "r"."idx""#;

/// The credits and log rows of the orders a group completed (`$1` their
/// places in the group, `$2` order row ids, `$3` users, `$4` servers, `$5`
/// amounts, `$6` projects; `$7` the log kind, `$8` the time): the amounts
/// summed per account and credited in (user, server) order, each order's
/// balance after its own credit (the group's orders of one account credited
/// in request order), one log row each. One row per order: its place and its
/// balance after.
pub const CREDIT_AND_LOG: &str = r#"WITH "o" AS (
    SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::int8[])
        AS "o" ("idx", "order_ref", "user_id", "server_id", "amount_cents", "project_id")
), "s" AS (
    SELECT "user_id", "server_id", "project_id", SUM("amount_cents")::int8 AS "total"
    FROM "o" GROUP BY "user_id", "server_id", "project_id"
), "b" AS (
    INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
    SELECT "user_id", "server_id", "total", 0, $8, "project_id" FROM "s" ORDER BY "user_id", "server_id"
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
    SELECT $7, "order_ref", "user_id", "server_id", 'main', "amount_cents", "after" - "amount_cents", "after", $8
    FROM "w" ORDER BY "idx"
)
SELECT "idx", "after" FROM "w" ORDER BY "idx""#;

/// The inserts of a group of new orders (`$1` order ids, `$2` projects, `$3`
/// user ids, `$4` e-mails, `$5` servers (0 = general account), `$6`
/// amounts, `$7` payment systems, `$8` idempotency keys, `$9` request
/// hashes; `$10` the pending status, `$11` the time): each request's user
/// resolved in its project (by id, and then the e-mail too when given must
/// be theirs; else by e-mail) and its server checked; the orders of those
/// with both inserted, a unique conflict (a key or order id taken, by
/// another request of the group too) inserting nothing. Inserted in key
/// order, so that two groups holding the same two keys never wait on each
/// other in a cycle. With each order inserted, in the same statement, its
/// `order.created` (`$12` webhook ids, `$13` and `$14` its body before and
/// after the resolved user's id, `$15` the type) when an enabled endpoint
/// of its project receives the type, and a delivery (`$16` pending) to each
/// such endpoint, due at once; this is the one place where the statement
/// itself decides who receives an event (`events::subscribed` in SQL), as
/// no statement may follow the insert's. One row per request
/// in their order: the resolved user, whether the server is the project's,
/// and whether its order was inserted.
pub const INSERT_ORDERS: &str = r#"WITH "r" AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::int8[], $6::int8[],
        $7::text[], $8::text[], $9::text[], $12::text[], $13::text[], $14::text[])
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
        "amount_cents", $10, $11, "idempotency_key", "request_hash"
    FROM "a" WHERE "resolved_user" IS NOT NULL AND "server_found"
    ORDER BY "project_id", "idempotency_key", "idx"
    ON CONFLICT DO NOTHING
    RETURNING "order_id"
), "v" AS (
    INSERT INTO "webhook_events" ("webhook_id", "project_id", "event_type", "order_id", "payload", "created_at")
    SELECT "a"."webhook_id", "a"."project_id", $15, "a"."order_id",
        "a"."body_head" || "a"."resolved_user"::text || "a"."body_tail", $11
    FROM "a" JOIN "i" ON "i"."order_id" = "a"."order_id"
    WHERE EXISTS (SELECT 1 FROM "webhook_endpoints" AS "e" WHERE "e"."project_id" = "a"."project_id"
        AND "e"."enabled" AND ("e"."event_types" IS NULL
            OR strpos(',' || "e"."event_types" || ',', ',' || $15 || ',') > 0))
    ORDER BY "a"."idx"
    RETURNING "id", "project_id"
), "d" AS (
    INSERT INTO "webhook_deliveries" ("event_id", "endpoint_id", "status", "attempts", "next_attempt_at",
        "created_at")
    SELECT "v"."id", "e"."id", $16, 0, now(), now()
    FROM "v" JOIN "webhook_endpoints" AS "e" ON "e"."project_id" = "v"."project_id" AND "e"."enabled"
        AND ("e"."event_types" IS NULL OR strpos(',' || "e"."event_types" || ',', ',' || $15 || ',') > 0)
)
SELECT "a"."idx", "a"."resolved_user", "a"."server_found", "i"."order_id" IS NOT NULL AS "inserted"
FROM "a" LEFT JOIN "i" ON "i"."order_id" = "a"."order_id"
ORDER BY "a"."idx""#;

/// The enabled endpoints of the projects `$1`: to whom the completions of
/// a group record events.
const SUBSCRIBERS: &str = r#"SELECT "id", "project_id", "event_types" FROM "webhook_endpoints"
WHERE "project_id" = ANY($1) AND "enabled""#;

/// Events (`$1` webhook ids, `$2` projects, `$3` types, `$4` order ids, `$5`
/// bodies, `$6` times) and their deliveries (`$7` the webhook id of each,
/// `$8` its endpoint; `$9` pending), due at once by the database's clock.
pub const RECORD_EVENTS: &str = r#"WITH "v" AS (
    INSERT INTO "webhook_events" ("webhook_id", "project_id", "event_type", "order_id", "payload", "created_at")
    SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
    RETURNING "id", "webhook_id"
)
INSERT INTO "webhook_deliveries" ("event_id", "endpoint_id", "status", "attempts", "next_attempt_at", "created_at")
SELECT "v"."id", "d"."endpoint_id", $9, 0, now(), now()
FROM unnest($7::text[], $8::int8[]) AS "d" ("webhook_id", "endpoint_id") JOIN "v" USING ("webhook_id")"#;

/// Whether the session can write: not on a standby (in recovery), and not
/// read-only (`default_transaction_read_only`, set for the server, the
/// database or the role, is read when a session starts).
const WRITABLE: &str = "SELECT pg_is_in_recovery() AS \"recovering\", current_setting('transaction_read_only') = 'on' AS \"read_only\"";

/// The reason of a standby.
const RECOVERING: &str = "database is in recovery (a standby)";

/// How long a group of `statements` statements may take in all: a
/// connection, each statement, and a second for the round trips.
fn group_bound(settings: &PoolSettings, statements: u32) -> Duration {
    settings.acquire_timeout + settings.statement_timeout * statements + Duration::from_secs(1)
}

/// One value of each of `items`: an array parameter of a group's statement.
fn column<'a, T, U>(items: &'a [T], value: impl Fn(&'a T) -> U) -> Vec<U> {
    items.iter().map(value).collect()
}

/// A token read waiting for its group.
struct TokenRead {
    token_hash: String,
    account: Option<AccountKey>,
}

type TokenOutcome = Result<Option<TokenRow>, StoreError>;
type CompleteOutcome = Result<CompletedOrder, CompleteError>;
type InsertOutcome = Result<OrderInsert, StoreError>;

pub struct PostgresStore {
    pool: PgPool,
    health: WriteHealth,
    token_reads: Arc<Groups<TokenRead, TokenOutcome>>,
    completions: Arc<Groups<Completion, CompleteOutcome>>,
    inserts: Arc<Groups<NewOrder, InsertOutcome>>,
}

impl PostgresStore {
    pub fn new(
        db: &DatabaseConnection,
        settings: &PoolSettings,
        sizes: Arc<dyn GroupSizes>,
    ) -> PostgresStore {
        let pool = db.get_postgres_connection_pool().clone();
        let (read_pool, read_sizes) = (pool.clone(), Arc::clone(&sizes));
        let read_bound = group_bound(settings, 1);
        let token_reads = Groups::new(
            MAX_RUNNING,
            MAX_GROUP,
            |_| None,
            Box::new(move |reads: Vec<TokenRead>| {
                read_sizes.token_reads(reads.len());
                let pool = read_pool.clone();
                async move {
                    let size = reads.len();
                    tokio::time::timeout(read_bound, read_tokens(&pool, &reads))
                        .await
                        .unwrap_or_else(|_| vec![Err(timed_out()); size])
                }
                .boxed()
            }),
        );
        let insert_sizes = Arc::clone(&sizes);
        let complete_bound = group_bound(settings, 2);
        let complete_pool = pool.clone();
        // A completion of an order already being completed waits for that
        // group: each statement updates an order at most once, and the first
        // webhook to arrive is the one that completes it.
        let completions = Groups::new(
            MAX_RUNNING,
            MAX_GROUP,
            |completion: &Completion| Some(completion.order_id.as_str()),
            Box::new(move |group: Vec<Completion>| {
                let (pool, sizes) = (complete_pool.clone(), Arc::clone(&sizes));
                async move { complete_group(&pool, &*sizes, complete_bound, group).await }.boxed()
            }),
        );
        let insert_pool = pool.clone();
        let insert_bound = group_bound(settings, 1);
        let inserts = Groups::new(
            MAX_RUNNING,
            MAX_GROUP,
            |_| None,
            Box::new(move |orders: Vec<NewOrder>| {
                insert_sizes.inserts(orders.len());
                let pool = insert_pool.clone();
                async move {
                    let size = orders.len();
                    tokio::time::timeout(insert_bound, insert_orders(&pool, &orders))
                        .await
                        .unwrap_or_else(|_| vec![Err(timed_out()); size])
                }
                .boxed()
            }),
        );
        PostgresStore {
            pool,
            health: WriteHealth::default(),
            token_reads,
            completions,
            inserts,
        }
    }
}

/// A group that took longer than its bound: its connection went silent.
fn timed_out() -> StoreError {
    StoreError::Unavailable("no answer from the database within the group's bound".into())
}

impl Store for PostgresStore {
    fn relay(&self) -> &dyn RelayStore {
        self
    }

    fn read_token<'a>(
        &'a self,
        token_hash: &'a str,
        account: Option<&'a AccountKey>,
    ) -> StoreFuture<'a, Result<Option<TokenRow>, StoreError>> {
        let read = TokenRead {
            token_hash: token_hash.to_owned(),
            account: account.cloned(),
        };
        Box::pin(async move {
            self.token_reads
                .submit(read)
                .await
                .unwrap_or_else(|| Err(StoreError::Failed("token read panicked".into())))
        })
    }

    fn complete<'a>(
        &'a self,
        completion: &'a Completion,
    ) -> StoreFuture<'a, Result<CompletedOrder, CompleteError>> {
        Box::pin(async move {
            let completed = self
                .completions
                .submit(completion.clone())
                .await
                .unwrap_or_else(|| {
                    Err(CompleteError::UpdateFailed(StoreError::Failed(
                        "completion panicked".into(),
                    )))
                });
            self.health.note(&completed);
            completed
        })
    }

    fn insert_order<'a>(
        &'a self,
        order: &'a NewOrder,
    ) -> StoreFuture<'a, Result<OrderInsert, StoreError>> {
        Box::pin(async move {
            let inserted = self
                .inserts
                .submit(order.clone())
                .await
                .unwrap_or_else(|| Err(StoreError::Failed("order insert panicked".into())));
            self.health.note(&inserted);
            inserted
        })
    }

    fn record_token_use<'a>(
        &'a self,
        token_id: i64,
        token_hash: &'a str,
        at: DateTime<Utc>,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let recorded = async {
                let mut conn = self.pool.acquire().await?;
                let recorded = sqlx::query(RECORD_TOKEN_USE)
                    .bind(token_hash)
                    .bind(at)
                    .bind(token_hash)
                    .bind(at)
                    .bind(token_id)
                    .execute(&mut *conn)
                    .await
                    .map(drop)
                    .map_err(StoreError::from);
                close_if_refused(&mut conn, &recorded);
                recorded
            }
            .await;
            self.health.note(&recorded);
            recorded
        })
    }

    fn readiness(&self) -> StoreFuture<'_, Readiness> {
        Box::pin(self.health.check_pool(&self.pool, check_writable))
    }
}

/// [`WRITABLE`] on a pooled connection, closed when it cannot write.
async fn check_writable(pool: &PgPool) -> Readiness {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(err) => return Readiness::of_error(&err.into()),
    };
    let state = sqlx::query_as::<_, (bool, bool)>(WRITABLE)
        .fetch_one(&mut *conn)
        .await;
    let readiness = match state {
        Ok((false, false)) => return Readiness::Ready,
        Ok((true, _)) => Readiness::NotReady(RECOVERING),
        Ok((false, true)) => Readiness::NotReady(READ_ONLY),
        Err(err) => return Readiness::of_error(&err.into()),
    };
    conn.close_on_drop();
    readiness
}

/// Runs [`READ_TOKENS`] for `reads`: one outcome each, in their order.
async fn read_tokens(pool: &PgPool, reads: &[TokenRead]) -> Vec<TokenOutcome> {
    let rows = sqlx::query(READ_TOKENS)
        .bind(column(reads, |r| r.token_hash.as_str()))
        .bind(column(reads, |r| {
            r.account.as_ref().and_then(|a| a.user_id)
        }))
        .bind(column(reads, |r| {
            r.account.as_ref().and_then(|a| a.email.as_deref())
        }))
        .bind(column(reads, |r| r.account.as_ref().map(|a| a.server_id)))
        .fetch_all(pool)
        .await;
    let rows = match rows {
        Ok(rows) if rows.len() == reads.len() => rows,
        Ok(rows) => {
            let err = StoreError::Failed(format!("{} rows for {} reads", rows.len(), reads.len()));
            return vec![Err(err); reads.len()];
        }
        Err(err) => return vec![Err(err.into()); reads.len()],
    };
    rows.iter()
        .zip(reads)
        .map(|(row, read)| token_row_of(row, read.account.is_some()).map_err(StoreError::from))
        .collect()
}

/// Runs [`INSERT_ORDERS`] for `orders`: one outcome each, in their order.
/// A request naming an order id, or in its project a key, that an earlier
/// request of the group names is not sent and is answered as a conflict:
/// inside one statement `ON CONFLICT DO NOTHING` would skip it without
/// saying which request lost.
async fn insert_orders(pool: &PgPool, orders: &[NewOrder]) -> Vec<InsertOutcome> {
    let mut order_ids = HashSet::new();
    let mut keys = HashSet::new();
    let first: Vec<bool> = orders
        .iter()
        .map(|o| {
            let key = o.idempotency_key.as_deref();
            let new_key = key.is_none_or(|key| keys.insert((o.project_id, key)));
            order_ids.insert(o.order_id.as_str()) && new_key
        })
        .collect();
    if first.iter().all(|&first| first) {
        return insert_firsts(pool, orders).await;
    }
    let firsts: Vec<NewOrder> = orders
        .iter()
        .zip(&first)
        .filter(|(_, first)| **first)
        .map(|(order, _)| order.clone())
        .collect();
    let mut outcomes = insert_firsts(pool, &firsts).await.into_iter();
    first
        .iter()
        .map(|&first| match first {
            true => outcomes.next().unwrap_or_else(|| Err(timed_out())),
            false => Ok(OrderInsert::Conflict),
        })
        .collect()
}

/// [`insert_orders`] of a group without duplicates. The statement commits
/// on its own; only a group with an operator's order (rare) runs in a
/// transaction, to write its audit row with it.
async fn insert_firsts(pool: &PgPool, orders: &[NewOrder]) -> Vec<InsertOutcome> {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(err) => return vec![Err(err.into()); orders.len()],
    };
    let outcomes = insert_firsts_on(&mut conn, orders).await;
    // A failure is the whole statement's: the first one tells.
    if let Some(failed) = outcomes.iter().find(|o| o.is_err()) {
        close_if_refused(&mut conn, failed);
    }
    outcomes
}

/// [`insert_firsts`] on `conn`.
async fn insert_firsts_on(
    conn: &mut PoolConnection<Postgres>,
    orders: &[NewOrder],
) -> Vec<InsertOutcome> {
    if !orders.iter().any(|o| o.audit.is_some()) {
        return insert_orders_on(&mut **conn, orders).await;
    }
    let audited = async {
        let mut txn = sqlx::Connection::begin(&mut **conn).await?;
        let outcomes = insert_orders_on(&mut *txn, orders).await;
        let inserted = outcomes
            .iter()
            .zip(orders)
            .filter(|(outcome, _)| matches!(outcome, Ok(OrderInsert::Inserted { .. })));
        log_audits(
            &mut txn,
            LOG_AUDIT,
            inserted.filter_map(|(_, o)| o.audit.as_ref()),
        )
        .await?;
        txn.commit().await?;
        Ok::<_, sqlx::Error>(outcomes)
    };
    audited
        .await
        .unwrap_or_else(|err| vec![Err(err.into()); orders.len()])
}

/// [`INSERT_ORDERS`] for `orders` on `db`, the pool or a transaction.
async fn insert_orders_on<'e>(
    db: impl sqlx::PgExecutor<'e>,
    orders: &[NewOrder],
) -> Vec<InsertOutcome> {
    let created_at = now();
    let webhook_ids: Vec<String> = orders.iter().map(|_| new_webhook_id()).collect();
    let mut heads = Vec::with_capacity(orders.len());
    let mut tails = Vec::with_capacity(orders.len());
    for order in orders {
        let (head, tail) = match order.created_event_around_user(created_at) {
            Ok(parts) => parts,
            Err(err) => return vec![Err(err); orders.len()],
        };
        heads.push(head);
        tails.push(tail);
    }
    let rows = sqlx::query(INSERT_ORDERS)
        .bind(column(orders, |o| o.order_id.as_str()))
        .bind(column(orders, |o| o.project_id))
        .bind(column(orders, |o| o.user_id))
        .bind(column(orders, |o| o.email.as_deref()))
        .bind(column(orders, |o| o.server_id))
        .bind(column(orders, |o| o.amount_cents))
        .bind(column(orders, |o| o.payment_system.as_str()))
        .bind(column(orders, |o| o.idempotency_key.as_deref()))
        .bind(column(orders, |o| o.request_hash.as_deref()))
        .bind(OrderStatus::Pending.to_value())
        .bind(created_at)
        .bind(webhook_ids)
        .bind(heads)
        .bind(tails)
        .bind(events::type_name(EventType::OrderCreated))
        .bind(DeliveryStatus::Pending.to_value())
        .fetch_all(db)
        .await;
    let rows = match rows {
        Ok(rows) if rows.len() == orders.len() => rows,
        Ok(rows) => {
            let err =
                StoreError::Failed(format!("{} rows for {} orders", rows.len(), orders.len()));
            return vec![Err(err); orders.len()];
        }
        Err(err) => return vec![Err(err.into()); orders.len()],
    };
    rows.iter()
        .map(|row| {
            let user: Option<i64> = row.try_get("resolved_user")?;
            Ok(match user {
                None => OrderInsert::UserNotFound,
                Some(_) if !row.try_get::<bool, _>("server_found")? => OrderInsert::ServerNotFound,
                Some(user_id) if row.try_get::<bool, _>("inserted")? => OrderInsert::Inserted {
                    user_id,
                    created_at,
                },
                Some(_) => OrderInsert::Conflict,
            })
        })
        .map(|outcome: Result<OrderInsert, sqlx::Error>| outcome.map_err(StoreError::from))
        .collect()
}

/// Records `events` with their deliveries to the enabled endpoints of
/// their projects that receive them, in `txn`, the transaction of their
/// changes: one statement to read the endpoints, one to write.
async fn record_events(
    txn: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    events: &[NewEvent],
) -> Result<(), sqlx::Error> {
    let mut projects: Vec<i64> = events.iter().map(|e| e.project_id).collect();
    projects.sort_unstable();
    projects.dedup();
    let subscribers: Vec<Subscriber> = sqlx::query(SUBSCRIBERS)
        .bind(projects)
        .fetch_all(&mut **txn)
        .await?
        .iter()
        .map(|row| {
            Ok(Subscriber {
                endpoint_id: row.try_get("id")?,
                project_id: row.try_get("project_id")?,
                event_types: row.try_get("event_types")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    let recorded = deliveries(&subscribers, events);
    if recorded.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = recorded.iter().map(|_| new_webhook_id()).collect();
    let (mut to_ids, mut to_endpoints) = (Vec::new(), Vec::new());
    for (id, (_, endpoints)) in ids.iter().zip(&recorded) {
        for endpoint in endpoints {
            to_ids.push(id.as_str());
            to_endpoints.push(*endpoint);
        }
    }
    sqlx::query(RECORD_EVENTS)
        .bind(&ids)
        .bind(column(&recorded, |(e, _)| e.project_id))
        .bind(column(&recorded, |(e, _)| e.event_type.to_value()))
        .bind(column(&recorded, |(e, _)| e.order_id.as_deref()))
        .bind(column(&recorded, |(e, _)| e.payload.as_str()))
        .bind(column(&recorded, |(e, _)| e.at))
        .bind(to_ids)
        .bind(to_endpoints)
        .bind(DeliveryStatus::Pending.to_value())
        .execute(&mut **txn)
        .await?;
    Ok(())
}

/// Completes `group` within `bound`; when it fails at its credits, runs
/// each of its completions again alone (see the module docs).
async fn complete_group(
    pool: &PgPool,
    sizes: &dyn GroupSizes,
    bound: Duration,
    group: Vec<Completion>,
) -> Vec<CompleteOutcome> {
    sizes.completions(group.len());
    let unavailable = || Err(CompleteError::Unavailable(timed_out()));
    let attempt = tokio::time::timeout(bound, complete_in_one_transaction(pool, &group)).await;
    match attempt {
        Ok(Ok(outcomes)) => outcomes,
        Ok(Err(
            err @ (CompleteError::ProcessingFailed(StoreError::Failed(_))
            | CompleteError::BalanceCeiling),
        )) if group.len() > 1 => {
            tracing::debug!(error = %err, size = group.len(), "completion group failed at its credits; completing its orders one by one");
            let mut outcomes = Vec::with_capacity(group.len());
            for completion in &group {
                let alone = std::slice::from_ref(completion);
                let attempt = tokio::time::timeout(bound, complete_in_one_transaction(pool, alone));
                outcomes.push(match attempt.await {
                    Ok(Ok(mut outcome)) => outcome.pop().unwrap_or_else(unavailable),
                    Ok(Err(err)) => Err(err),
                    Err(_) => unavailable(),
                });
            }
            outcomes
        }
        Ok(Err(err)) => vec![Err(err); group.len()],
        Err(_) => (0..group.len()).map(|_| unavailable()).collect(),
    }
}

/// One transaction: [`COMPLETE_ORDERS`], then [`CREDIT_AND_LOG`] for the
/// orders it completed. `Err` when it failed (nothing was changed); else an
/// outcome per completion of `group`, in its order.
async fn complete_in_one_transaction(
    pool: &PgPool,
    group: &[Completion],
) -> Result<Vec<CompleteOutcome>, CompleteError> {
    let mut conn = pool
        .acquire()
        .await
        .map_err(|err| CompleteError::Unavailable(err.into()))?;
    let outcomes = complete_on(&mut conn, group).await;
    close_if_refused(&mut conn, &outcomes);
    outcomes
}

/// [`complete_in_one_transaction`] on `conn`.
async fn complete_on(
    conn: &mut PoolConnection<Postgres>,
    group: &[Completion],
) -> Result<Vec<CompleteOutcome>, CompleteError> {
    // The guard of the status update relies on READ COMMITTED: a duplicate
    // that waited for another transaction's lock reads the order's new
    // status instead of failing to serialize.
    let mut txn = sqlx::Connection::begin_with(&mut **conn, "BEGIN ISOLATION LEVEL READ COMMITTED")
        .await
        .map_err(|err| CompleteError::Unavailable(err.into()))?;
    let completed_at = now();
    let updated = sqlx::query(COMPLETE_ORDERS)
        .bind(column(group, |c| c.order_id.as_str()))
        .bind(column(group, |c| c.project_id))
        .bind(column(group, |c| c.payment_system.as_str()))
        .bind(column(group, |c| c.payment_id.as_deref()))
        .bind(OrderStatus::Completed.to_value())
        .bind(completed_at)
        .bind(OrderStatus::Pending.to_value())
        .fetch_all(&mut *txn)
        .await
        .map_err(|err| CompleteError::at_update(err.into()))?;
    if updated.len() != group.len() {
        return Err(CompleteError::UpdateFailed(StoreError::Failed(format!(
            "{} rows for {} completions",
            updated.len(),
            group.len()
        ))));
    }
    let read = |err: sqlx::Error| CompleteError::at_credit(err.into());
    // What each request's update did: the completed order's (row id, user,
    // server, amount, payment id, project), or whether the order exists.
    let mut completed = Vec::new();
    // The completed orders whose project has an enabled endpoint: their
    // place in `outcomes`, their project and when they were created.
    let mut notified = Vec::new();
    let mut outcomes: Vec<CompleteOutcome> = Vec::with_capacity(group.len());
    for (row, request) in updated.iter().zip(group) {
        let idx: i64 = row.try_get("idx").map_err(read)?;
        match row.try_get::<Option<i64>, _>("order_ref").map_err(read)? {
            None => {
                let mut status: Option<String> = row.try_get("found_status").map_err(read)?;
                // Read again by a statement of its own: COMPLETE_ORDERS reads
                // the statuses of the orders it did not complete in its own
                // snapshot, taken before it waited for their locks, so an
                // order another transaction (a cancellation, a duplicate's
                // group) finalized meanwhile still reads `pending` there.
                if status.as_deref() == Some(OrderStatus::Pending.to_value().as_str()) {
                    status = sqlx::query_scalar(ORDER_STATUS)
                        .bind(&request.order_id)
                        .bind(request.project_id)
                        .bind(&request.payment_system)
                        .fetch_optional(&mut *txn)
                        .await
                        .map_err(|err| CompleteError::at_update(err.into()))?;
                }
                outcomes.push(Err(match status {
                    Some(status) => CompleteError::not_pending(&status),
                    None => CompleteError::OrderNotFound,
                }));
            }
            Some(order_ref) => {
                let order = CompletedOrder {
                    order_id: request.order_id.clone(),
                    payment_system: request.payment_system.clone(),
                    payment_id: row.try_get("payment_id").map_err(read)?,
                    amount: money(row.try_get("amount_cents").map_err(read)?)?,
                    completed_at,
                    user_id: row.try_get("user_id").map_err(read)?,
                    server_id: row.try_get("server_id").map_err(read)?,
                    balance_after: Money::ZERO,
                };
                let project_id: i64 = row.try_get("project_id").map_err(read)?;
                if row.try_get::<bool, _>("notify").map_err(read)? {
                    let created_at: DateTime<Utc> = row.try_get("created_at").map_err(read)?;
                    notified.push((outcomes.len(), project_id, created_at));
                }
                completed.push((idx, order_ref, project_id, outcomes.len()));
                outcomes.push(Ok(order));
            }
        }
    }
    if !completed.is_empty() {
        let order = |at: usize| match &outcomes[at] {
            Ok(order) => order,
            Err(_) => unreachable!("only completed orders are credited"),
        };
        let credited = sqlx::query(CREDIT_AND_LOG)
            .bind(column(&completed, |c| c.0))
            .bind(column(&completed, |c| c.1))
            .bind(column(&completed, |c| order(c.3).user_id))
            .bind(column(&completed, |c| order(c.3).server_id))
            .bind(column(&completed, |c| order(c.3).amount.cents()))
            .bind(column(&completed, |c| c.2))
            .bind(LogKind::OrderCredit.to_value())
            .bind(completed_at)
            .fetch_all(&mut *txn)
            .await
            .map_err(read)?;
        if credited.len() != completed.len() {
            return Err(CompleteError::ProcessingFailed(StoreError::Failed(
                format!("{} credits for {} orders", credited.len(), completed.len()),
            )));
        }
        // Both lists are in `idx` order.
        for (row, &(_, _, _, at)) in credited.iter().zip(&completed) {
            let after: i64 = row.try_get("after").map_err(read)?;
            if let Ok(order) = &mut outcomes[at] {
                order.balance_after = money(after)?;
            }
        }
    }
    if !notified.is_empty() {
        let events: Vec<NewEvent> = notified
            .iter()
            .filter_map(|&(at, project_id, created_at)| match &outcomes[at] {
                Ok(order) => Some(order.event(project_id, created_at)),
                Err(_) => None,
            })
            .collect();
        record_events(&mut txn, &events).await.map_err(read)?;
    }
    let audits = outcomes.iter().zip(group).filter(|(o, _)| o.is_ok());
    log_audits(
        &mut txn,
        LOG_AUDIT,
        audits.filter_map(|(_, c)| c.audit.as_ref()),
    )
    .await
    .map_err(read)?;
    txn.commit().await.map_err(read)?;
    Ok(outcomes)
}
