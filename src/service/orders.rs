//! Payment orders: creation (command line) and completion, the operation
//! behind `POST /v2/payment/order/complete`.
//!
//! Completion is one transaction: mark the order completed, credit the
//! user's main balance, write the operation-log row. The status update is a
//! conditional `UPDATE ... WHERE status <> 'completed'`, so of any number of
//! concurrent completions of one order exactly one sees a changed row; the
//! others report ORDER_ALREADY_COMPLETED. The unique `order_ref` of the log is
//! a second guard in the schema itself. Any failure rolls everything back,
//! so a retry is always safe.
//!
//! On PostgreSQL the three steps are one statement (data-modifying CTEs),
//! one round trip and one commit; when it fails, the classic transaction of
//! separate statements runs to name the failing step (ORDER_UPDATE_FAILED or
//! PAYMENT_PROCESSING_ERROR). On a SQLite file the classic transaction's
//! statements run on the inline write connection (`Reader::write_inline`),
//! without a thread hand-off per statement; through the pool only while
//! another process holds the write lock. See `docs/benchmarks.md` for what
//! each bought.

use chrono::{DateTime, Utc};
use entity::{balance, operation_log, payment_order};
use rand::{Rng, TryRngCore, distr::Alphanumeric, rngs::OsRng};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait,
    DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter,
    QueryResult, Statement, Value, sea_query::Query,
};

use super::{AdminError, begin_write, now, servers, users, validate};
use crate::{
    db::{Reader, is_busy_error, is_unavailable, write_error},
    money::Money,
};

/// What `order create` needs.
#[derive(Debug, Clone)]
pub struct NewOrder {
    pub project_id: i64,
    pub user_id: i64,
    pub server_id: Option<i64>,
    pub amount: Money,
    pub payment_system: String,
    /// Generated (`Order:` + 11 random letters and digits) when absent.
    pub order_id: Option<String>,
}

pub async fn create(
    db: &DatabaseConnection,
    new: NewOrder,
) -> Result<payment_order::Model, AdminError> {
    if !validate::is_payment_system(&new.payment_system) {
        return Err(AdminError::Invalid(format!(
            "payment system {:?} must be cstm: followed by 4 to 20 lower-case letters",
            new.payment_system
        )));
    }
    if let Some(order_id) = &new.order_id
        && !validate::is_order_id(order_id)
    {
        return Err(AdminError::Invalid(format!(
            "order id {order_id:?} must be Order: followed by 8 to 11 letters or digits"
        )));
    }
    if new.amount == Money::ZERO {
        return Err(AdminError::Invalid("amount must be greater than 0".into()));
    }
    users::get_in_project(db, new.project_id, new.user_id).await?;
    let server_id = match new.server_id {
        None | Some(0) => None,
        Some(id) => Some(servers::get_in_project(db, new.project_id, id).await?.id),
    };
    let order_id = new.order_id.clone().unwrap_or_else(generate_order_id);
    payment_order::ActiveModel {
        order_id: Set(order_id.clone()),
        project_id: Set(new.project_id),
        user_id: Set(new.user_id),
        server_id: Set(server_id),
        payment_system: Set(new.payment_system),
        amount_cents: Set(new.amount.cents()),
        status: Set(payment_order::STATUS_PENDING.to_owned()),
        payment_id: Set(None),
        created_at: Set(now()),
        completed_at: Set(None),
        ..Default::default()
    }
    .insert(db)
    .await
    .map_err(|err| {
        AdminError::conflict_on_unique(err, || format!("order id {order_id} already exists"))
    })
}

/// `Order:` plus 11 characters from [A-Za-z0-9], drawn from the OS CSPRNG.
pub fn generate_order_id() -> String {
    let suffix: String = OsRng
        .unwrap_err()
        .sample_iter(Alphanumeric)
        .take(11)
        .map(char::from)
        .collect();
    format!("Order:{suffix}")
}

/// A completion request whose formats were already validated.
#[derive(Debug, Clone)]
pub struct Completion {
    pub project_id: i64,
    pub order_id: String,
    pub payment_system: String,
    /// `None` when the caller gave none, `null` or `""`.
    pub payment_id: Option<String>,
}

/// The order as it stands after a successful completion.
#[derive(Debug, Clone)]
pub struct CompletedOrder {
    pub order_id: String,
    pub payment_system: String,
    pub payment_id: Option<String>,
    pub amount: Money,
    pub completed_at: DateTime<Utc>,
    pub user_id: i64,
    pub server_id: i64,
    pub balance_after: Money,
}

#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// Missing, of another project, or stored with another payment system.
    #[error("order not found")]
    OrderNotFound,
    #[error("order already completed")]
    AlreadyCompleted,
    /// The status update itself failed; nothing was changed.
    #[error("status update failed: {0}")]
    UpdateFailed(DbErr),
    /// Crediting or logging failed after the status update; rolled back.
    #[error("payment processing failed: {0}")]
    ProcessingFailed(DbErr),
    /// The database could not be reached; nothing was changed.
    #[error("database unavailable: {0}")]
    Unavailable(DbErr),
}

fn processing(err: DbErr) -> CompleteError {
    if is_unavailable(&err) {
        CompleteError::Unavailable(err)
    } else {
        CompleteError::ProcessingFailed(err)
    }
}

/// What completion needs of an order row.
struct OrderRow {
    id: i64,
    order_id: String,
    payment_system: String,
    user_id: i64,
    server_id: Option<i64>,
    amount_cents: i64,
    payment_id: Option<String>,
}

/// The columns of [`OrderRow`], in its order.
const ORDER_COLUMNS: [payment_order::Column; 7] = [
    payment_order::Column::Id,
    payment_order::Column::OrderId,
    payment_order::Column::PaymentSystem,
    payment_order::Column::UserId,
    payment_order::Column::ServerId,
    payment_order::Column::AmountCents,
    payment_order::Column::PaymentId,
];

impl OrderRow {
    fn from_row(row: &QueryResult) -> Result<OrderRow, DbErr> {
        Ok(OrderRow {
            id: row.try_get_by_index(0)?,
            order_id: row.try_get_by_index(1)?,
            payment_system: row.try_get_by_index(2)?,
            user_id: row.try_get_by_index(3)?,
            server_id: row.try_get_by_index(4)?,
            amount_cents: row.try_get_by_index(5)?,
            payment_id: row.try_get_by_index(6)?,
        })
    }
}

/// Reads the order a completion names (any status) inside `txn`.
async fn read_order(
    txn: &DatabaseTransaction,
    filter: Condition,
) -> Result<Option<OrderRow>, CompleteError> {
    let query = Query::select()
        .columns(ORDER_COLUMNS)
        .from(payment_order::Entity)
        .cond_where(filter)
        .to_owned();
    match txn.query_one(&query).await.map_err(processing)? {
        Some(row) => Ok(Some(OrderRow::from_row(&row).map_err(processing)?)),
        None => Ok(None),
    }
}

/// Completes an order exactly once; see the module docs.
///
/// On PostgreSQL the three steps run as one statement (see
/// [`PG_COMPLETE`]); should it fail, the step-by-step transaction runs
/// instead, so that the error names the step that failed.
pub async fn complete(
    statements: &Reader,
    request: Completion,
) -> Result<CompletedOrder, CompleteError> {
    statements.before_write();
    let db = statements.pool();
    if db.get_database_backend() == DbBackend::Sqlite
        && let Some(done) = complete_inline_sqlite(statements, &request).await
    {
        return done;
    }
    if db.get_database_backend() == DbBackend::Postgres {
        match complete_in_one_statement(statements, &request).await {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => return Err(not_completed(statements, &request).await?),
            Err(err) if is_unavailable(&err) => return Err(CompleteError::Unavailable(err)),
            Err(err) => {
                // Nothing was changed (one statement is atomic). The steps
                // below fail again at the same place, or succeed if the
                // cause was passing; either way the answer is exact.
                tracing::debug!(error = %err, "one-statement completion failed; retrying step by step");
            }
        }
    }
    complete_step_by_step(db, request).await
}

/// PostgreSQL: status update, credit and log in one statement, committed on
/// its own (data-modifying CTEs run atomically, all or nothing). The update's
/// `status <> 'completed'` guard under the order's row lock keeps it exactly
/// once: a concurrent duplicate waits for the lock, then matches no row, and
/// the credit and the log, which read the update's rows, do nothing.
/// One round trip and one commit, instead of five statements, on a direct
/// connection (no ping after it, see `db::direct_pg`).
///
/// Parameters: $1 completed status, $2 completion time, $3 payment id,
/// $4 order id, $5 project id, $6 payment system, $7 log kind.
const PG_COMPLETE: &str = r#"WITH o AS (
    UPDATE "payment_orders" SET "status" = $1, "completed_at" = $2, "payment_id" = $3
    WHERE "order_id" = $4 AND "project_id" = $5 AND "payment_system" = $6 AND "status" <> $1
    RETURNING "id", "user_id", COALESCE("server_id", 0) AS "server_id", "amount_cents", "payment_id"
), b AS (
    INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
    SELECT "user_id", "server_id", "amount_cents", 0, $2, $5 FROM o
    ON CONFLICT ("user_id", "server_id") DO UPDATE
    SET "main_cents" = "balances"."main_cents" + EXCLUDED."main_cents", "updated_at" = EXCLUDED."updated_at"
    RETURNING "main_cents"
), l AS (
    INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
        "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
    SELECT $7, o."id", o."user_id", o."server_id", 'main', o."amount_cents",
        b."main_cents" - o."amount_cents", b."main_cents", $2
    FROM o, b
)
SELECT o."user_id", o."server_id", o."amount_cents", o."payment_id", b."main_cents" FROM o, b"#;

/// Runs [`PG_COMPLETE`]; `None` when no order was updated.
pub(super) async fn complete_in_one_statement(
    statements: &Reader,
    request: &Completion,
) -> Result<Option<CompletedOrder>, DbErr> {
    let completed_at = now();
    let stmt = Statement::from_sql_and_values(
        DbBackend::Postgres,
        PG_COMPLETE,
        [
            Value::from(payment_order::STATUS_COMPLETED),
            Value::from(completed_at),
            Value::from(request.payment_id.clone()),
            Value::from(request.order_id.as_str()),
            Value::from(request.project_id),
            Value::from(request.payment_system.as_str()),
            Value::from(operation_log::KIND_ORDER_CREDIT),
        ],
    );
    let Some(row) = statements.autocommit_one(stmt).await? else {
        return Ok(None);
    };
    let amount_cents: i64 = row.try_get_by_index(2)?;
    let after: i64 = row.try_get_by_index(4)?;
    Ok(Some(CompletedOrder {
        order_id: request.order_id.clone(),
        payment_system: request.payment_system.clone(),
        payment_id: row.try_get_by_index(3)?,
        amount: Money::from_cents(amount_cents).map_err(|err| DbErr::Custom(err.to_string()))?,
        completed_at,
        user_id: row.try_get_by_index(0)?,
        server_id: row.try_get_by_index(1)?,
        balance_after: Money::from_cents(after).unwrap_or(Money::MAX),
    }))
}

/// SQLite: the statements of [`complete_step_by_step`] on the inline write
/// connection (`Reader::write_inline`), in the calling thread, in one
/// IMMEDIATE transaction: no hand-off to sqlx's connection thread for each
/// statement, BEGIN and COMMIT (about ten thread wake-ups per completion).
/// `None` when there is no inline connection (an in-memory database) or
/// another process held the write lock for 10 ms: then nothing was done,
/// and the step-by-step transaction runs through the pool instead.
async fn complete_inline_sqlite(
    statements: &Reader,
    request: &Completion,
) -> Option<Result<CompletedOrder, CompleteError>> {
    let mut step = SqliteStep::Begin;
    let result = statements
        .write_inline(|conn| complete_in_sqlite_transaction(conn, request, &mut step))
        .await?;
    let err = match result {
        Ok(done) => return Some(done),
        // BEGIN IMMEDIATE failed: nothing was done.
        Err(err) if step == SqliteStep::Begin && is_busy_error(&err) => return None,
        Err(err) => write_error(err),
    };
    // As `complete_step_by_step` answers: the failing step names the error.
    Some(Err(match step {
        SqliteStep::Begin => CompleteError::Unavailable(err),
        SqliteStep::Update => CompleteError::UpdateFailed(err),
        SqliteStep::Rest => CompleteError::ProcessingFailed(err),
    }))
}

/// Where an inline SQLite completion failed, for its error code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SqliteStep {
    Begin,
    Update,
    Rest,
}

/// The status update of [`complete_step_by_step`] on SQLite. ?1 completed
/// status, ?2 completion time, ?3 payment id, ?4 order id, ?5 project id,
/// ?6 payment system.
const SQLITE_UPDATE_ORDER: &str = r#"UPDATE "payment_orders" SET "status" = ?1, "completed_at" = ?2, "payment_id" = ?3
WHERE "order_id" = ?4 AND "project_id" = ?5 AND "payment_system" = ?6 AND "status" <> ?1
RETURNING "id", "user_id", "server_id", "amount_cents", "payment_id""#;

/// Whether the order exists at all, when the update matched nothing.
/// ?1 order id, ?2 project id, ?3 payment system.
const SQLITE_FIND_ORDER: &str = r#"SELECT "id" FROM "payment_orders"
WHERE "order_id" = ?1 AND "project_id" = ?2 AND "payment_system" = ?3"#;

/// The credit (`balances::add_in_txn` on the main balance). ?1 user id,
/// ?2 server id, ?3 amount, ?4 time, ?5 project id (the order's, which is
/// its user's).
const SQLITE_CREDIT: &str = r#"INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
VALUES (?1, ?2, ?3, 0, ?4, ?5)
ON CONFLICT ("user_id", "server_id") DO UPDATE
SET "main_cents" = "balances"."main_cents" + ?3, "updated_at" = ?4
RETURNING "main_cents""#;

/// The operation-log row. ?1 kind, ?2 order row id, ?3 user id, ?4 server
/// id, ?5 amount, ?6 balance before, ?7 balance after, ?8 time.
const SQLITE_LOG: &str = r#"INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
    "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
VALUES (?1, ?2, ?3, ?4, 'main', ?5, ?6, ?7, ?8)"#;

/// The body of [`complete_inline_sqlite`]; `step` tells where it failed.
/// Returning early drops the transaction, which rolls it back.
fn complete_in_sqlite_transaction(
    conn: &mut rusqlite::Connection,
    request: &Completion,
    step: &mut SqliteStep,
) -> rusqlite::Result<Result<CompletedOrder, CompleteError>> {
    use rusqlite::{OptionalExtension, TransactionBehavior, params};
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Once the write lock is held, as the pool's transaction does.
    let completed_at = now();
    *step = SqliteStep::Update;
    // The time as sqlx writes a `DateTime<Utc>` to SQLite, so the column
    // reads the same whichever path wrote it.
    let at = completed_at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false);
    let updated = txn
        .prepare_cached(SQLITE_UPDATE_ORDER)?
        .query_row(
            params![
                payment_order::STATUS_COMPLETED,
                at,
                request.payment_id,
                request.order_id,
                request.project_id,
                request.payment_system,
            ],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, Option<i64>>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, Option<String>>(4)?,
                ))
            },
        )
        .optional()?;
    *step = SqliteStep::Rest;
    let Some((order_ref, user_id, server_id, amount_cents, payment_id)) = updated else {
        let found = txn
            .prepare_cached(SQLITE_FIND_ORDER)?
            .query_row(
                params![request.order_id, request.project_id, request.payment_system],
                |_| Ok(()),
            )
            .optional()?;
        return Ok(Err(match found {
            None => CompleteError::OrderNotFound,
            Some(()) => CompleteError::AlreadyCompleted,
        }));
    };
    let amount = match Money::from_cents(amount_cents) {
        Ok(amount) => amount,
        Err(err) => {
            return Ok(Err(CompleteError::ProcessingFailed(DbErr::Custom(
                err.to_string(),
            ))));
        }
    };
    let server_id = server_id.unwrap_or(balance::GENERAL_ACCOUNT);
    let after: i64 = txn.prepare_cached(SQLITE_CREDIT)?.query_row(
        params![user_id, server_id, amount_cents, at, request.project_id],
        |row| row.get(0),
    )?;
    let before = after - amount_cents;
    txn.prepare_cached(SQLITE_LOG)?.execute(params![
        operation_log::KIND_ORDER_CREDIT,
        order_ref,
        user_id,
        server_id,
        amount_cents,
        before,
        after,
        at,
    ])?;
    txn.commit()?;
    Ok(Ok(CompletedOrder {
        order_id: request.order_id.clone(),
        payment_system: request.payment_system.clone(),
        payment_id,
        amount,
        completed_at,
        user_id,
        server_id,
        balance_after: Money::from_cents(after).unwrap_or(Money::MAX),
    }))
}

/// Why an order the update did not match was not completed: it is missing
/// (or foreign, or of another payment system), or completed already.
pub(super) async fn not_completed(
    statements: &Reader,
    request: &Completion,
) -> Result<CompleteError, CompleteError> {
    let query = Query::select()
        .column(payment_order::Column::Id)
        .from(payment_order::Entity)
        .and_where(payment_order::Column::OrderId.eq(&request.order_id))
        .and_where(payment_order::Column::ProjectId.eq(request.project_id))
        .and_where(payment_order::Column::PaymentSystem.eq(&request.payment_system))
        .to_owned();
    let stmt = statements.backend().build(&query);
    let found = statements.one(stmt).await.map_err(processing)?;
    Ok(match found {
        None => CompleteError::OrderNotFound,
        Some(_) => CompleteError::AlreadyCompleted,
    })
}

/// The completion as one transaction of separate statements: BEGIN, the
/// status update (returning the order where the backend can), the credit
/// (an upsert, likewise returning the new balance), the log insert, COMMIT.
/// MariaDB/MySQL, which have no `UPDATE ... RETURNING`, read the order and
/// the balance back instead.
pub(super) async fn complete_step_by_step(
    db: &DatabaseConnection,
    request: Completion,
) -> Result<CompletedOrder, CompleteError> {
    let backend = db.get_database_backend();
    let returning = backend != DbBackend::MySql;
    // SQLite has one writer at a time. Writers of this process queue here,
    // in order, instead of polling the file lock in SQLite's busy handler,
    // whose back-off sleeps (up to 100 ms each) made the tail latency.
    let _writer = match backend {
        DbBackend::Sqlite => Some(crate::db::SQLITE_WRITER.lock().await),
        _ => None,
    };
    let txn = begin_write(db).await.map_err(CompleteError::Unavailable)?;
    let completed_at = now();
    let matches_request = || {
        Condition::all()
            .add(payment_order::Column::OrderId.eq(&request.order_id))
            .add(payment_order::Column::ProjectId.eq(request.project_id))
            .add(payment_order::Column::PaymentSystem.eq(&request.payment_system))
    };

    // 1. Update the status, the first statement of the transaction, so that
    //    on SQLite it takes the write lock before anything is read.
    let mut update = Query::update();
    update
        .table(payment_order::Entity)
        .value(
            payment_order::Column::Status,
            payment_order::STATUS_COMPLETED,
        )
        .value(payment_order::Column::CompletedAt, completed_at)
        .value(payment_order::Column::PaymentId, request.payment_id.clone())
        .cond_where(
            matches_request()
                .add(payment_order::Column::Status.ne(payment_order::STATUS_COMPLETED)),
        );
    let update_failed = |err: DbErr| {
        if is_unavailable(&err) {
            CompleteError::Unavailable(err)
        } else {
            CompleteError::UpdateFailed(err)
        }
    };
    let updated = if returning {
        update.returning(Query::returning().columns(ORDER_COLUMNS));
        match txn.query_one(&update).await.map_err(update_failed)? {
            Some(row) => Some(OrderRow::from_row(&row).map_err(processing)?),
            None => None,
        }
    } else if txn
        .execute(&update)
        .await
        .map_err(update_failed)?
        .rows_affected()
        > 0
    {
        // 2. Read the order (locked by the update).
        read_order(&txn, matches_request()).await?
    } else {
        None
    };
    let order = match updated {
        Some(order) => order,
        // Nothing changed: the order is missing (or foreign, or of another
        // payment system), or it was completed already.
        None => {
            return Err(match read_order(&txn, matches_request()).await? {
                None => CompleteError::OrderNotFound,
                Some(_) => CompleteError::AlreadyCompleted,
            });
        }
    };
    let amount = Money::from_cents(order.amount_cents)
        .map_err(|err| CompleteError::ProcessingFailed(DbErr::Custom(err.to_string())))?;
    let server_id = order.server_id.unwrap_or(balance::GENERAL_ACCOUNT);

    // 3. Credit the main balance.
    // The order matched the request's project, so that is its user's too.
    let (before, after) = super::balances::add_in_txn(
        &txn,
        request.project_id,
        order.user_id,
        server_id,
        balance::Column::MainCents,
        amount.cents(),
    )
    .await
    .map_err(processing)?;

    // 4. Log the operation.
    operation_log::Entity::insert(operation_log::ActiveModel {
        kind: Set(operation_log::KIND_ORDER_CREDIT.to_owned()),
        order_ref: Set(Some(order.id)),
        user_id: Set(order.user_id),
        server_id: Set(server_id),
        balance_type: Set("main".to_owned()),
        amount_cents: Set(amount.cents()),
        balance_before_cents: Set(before),
        balance_after_cents: Set(after),
        created_at: Set(completed_at),
        ..Default::default()
    })
    .exec_without_returning(&txn)
    .await
    .map_err(processing)?;

    txn.commit().await.map_err(processing)?;
    Ok(CompletedOrder {
        order_id: order.order_id,
        payment_system: order.payment_system,
        payment_id: order.payment_id,
        amount,
        completed_at,
        user_id: order.user_id,
        server_id,
        balance_after: Money::from_cents(after).unwrap_or(Money::MAX),
    })
}

/// An order by its order id, for the command line and tests.
pub async fn find(
    db: &DatabaseConnection,
    order_id: &str,
) -> Result<Option<payment_order::Model>, AdminError> {
    Ok(payment_order::Entity::find()
        .filter(payment_order::Column::OrderId.eq(order_id))
        .one(db)
        .await?)
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};

    use super::*;
    use crate::db::PoolSettings;

    struct Fixture {
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
        db: DatabaseConnection,
        reader: Reader,
        project_id: i64,
        user_id: i64,
    }

    /// A migrated SQLite file with one project and one user.
    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("orders.db");
        let url = format!("sqlite://{}", path.display());
        let (db, project_id, user_id) =
            crate::service::testing::shop(&url, "buyer@example.com").await;
        Fixture {
            reader: Reader::new(db.clone(), &url, &PoolSettings::default()),
            _dir: dir,
            path,
            db,
            project_id,
            user_id,
        }
    }

    impl Fixture {
        async fn order(&self, order_id: &str, cents: i64) -> Completion {
            create(
                &self.db,
                NewOrder {
                    project_id: self.project_id,
                    user_id: self.user_id,
                    server_id: None,
                    amount: Money::from_cents(cents).unwrap(),
                    payment_system: "cstm:paygate".into(),
                    order_id: Some(order_id.into()),
                },
            )
            .await
            .unwrap();
            Completion {
                project_id: self.project_id,
                order_id: order_id.into(),
                payment_system: "cstm:paygate".into(),
                payment_id: Some(format!("pay-{order_id}")),
            }
        }

        /// `completed_at` as stored (text), and the order's log row.
        async fn stored(&self, order_id: &str) -> (String, LogRow) {
            let row = self
                .db
                .query_one_raw(Statement::from_sql_and_values(
                    DbBackend::Sqlite,
                    r#"SELECT o."completed_at", l."kind", l."user_id", l."server_id", l."balance_type",
                        l."amount_cents", l."balance_before_cents", l."balance_after_cents", l."created_at"
                    FROM "payment_orders" o JOIN "operation_log" l ON l."order_ref" = o."id"
                    WHERE o."order_id" = ?"#,
                    [Value::from(order_id)],
                ))
                .await
                .unwrap()
                .expect("completed and logged");
            let text = |i| row.try_get_by_index::<String>(i).unwrap();
            let int = |i| row.try_get_by_index::<i64>(i).unwrap();
            let log = LogRow {
                kind_user_server: (text(1), int(2), int(3), text(4)),
                cents: (int(5), int(6), int(7)),
                created_at: text(8),
            };
            (text(0), log)
        }

        /// The user's general-account main balance, in cents.
        async fn main_cents(&self) -> i64 {
            self.scalar(&format!(
                r#"SELECT "main_cents" FROM "balances" WHERE "user_id" = {} AND "server_id" = 0"#,
                self.user_id
            ))
            .await
        }

        async fn log_rows(&self) -> i64 {
            self.scalar(r#"SELECT COUNT(*) FROM "operation_log""#).await
        }

        async fn scalar(&self, sql: &str) -> i64 {
            let row = self
                .db
                .query_one_raw(Statement::from_string(DbBackend::Sqlite, sql))
                .await
                .unwrap()
                .expect("one row");
            row.try_get_by_index(0).unwrap()
        }
    }

    /// An operation-log row: (kind, user, server, balance type), (amount,
    /// before, after) in cents, and its time as stored.
    struct LogRow {
        kind_user_server: (String, i64, i64, String),
        cents: (i64, i64, i64),
        created_at: String,
    }

    /// On a SQLite file `complete` runs on the inline write connection, and
    /// writes what the pool's transaction writes: the same status, credit
    /// and log row, the time in sqlx's own text format; exactly once.
    #[tokio::test]
    async fn sqlite_completions_run_inline_and_write_what_the_pool_writes() {
        let f = fixture().await;
        let pooled = f.order("Order:pooled01", 1_000).await;
        let inline = f.order("Order:inline01", 250).await;

        let by_pool = complete_step_by_step(&f.db, pooled).await.unwrap();
        assert_eq!(f.reader.inline_writes(), (0, 0));
        let by_inline = complete(&f.reader, inline.clone()).await.unwrap();
        assert_eq!(f.reader.inline_writes(), (1, 0), "the inline writer ran");
        assert_eq!(by_pool.balance_after, Money::from_cents(1_000).unwrap());
        assert_eq!(by_inline.balance_after, Money::from_cents(1_250).unwrap());
        assert_eq!(by_inline.amount, Money::from_cents(250).unwrap());
        assert_eq!(by_inline.payment_id.as_deref(), Some("pay-Order:inline01"));
        assert_eq!(by_inline.user_id, f.user_id);
        assert_eq!(by_inline.server_id, balance::GENERAL_ACCOUNT);

        let (pool_at, pool_log) = f.stored("Order:pooled01").await;
        let (inline_at, inline_log) = f.stored("Order:inline01").await;
        let text = |at: DateTime<Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false);
        assert_eq!(pool_at, text(by_pool.completed_at), "sqlx's format");
        assert_eq!(inline_at, text(by_inline.completed_at), "the same format");
        assert_eq!(pool_log.kind_user_server, inline_log.kind_user_server);
        assert_eq!(pool_log.cents, (1_000, 0, 1_000));
        assert_eq!(inline_log.cents, (250, 1_000, 1_250));
        assert_eq!(inline_log.created_at, inline_at);

        let order = find(&f.db, "Order:inline01").await.unwrap().unwrap();
        assert_eq!(order.status, payment_order::STATUS_COMPLETED);
        assert_eq!(order.completed_at, Some(by_inline.completed_at));

        // Exactly once: a duplicate changes nothing, a missing order is told
        // apart.
        assert!(matches!(
            complete(&f.reader, inline.clone()).await,
            Err(CompleteError::AlreadyCompleted)
        ));
        let mut missing = inline;
        missing.order_id = "Order:missing1".into();
        assert!(matches!(
            complete(&f.reader, missing).await,
            Err(CompleteError::OrderNotFound)
        ));
        assert_eq!(f.reader.inline_writes(), (3, 0));
        assert_eq!(f.main_cents().await, 1_250);
        assert_eq!(f.log_rows().await, 2);
    }

    /// While another process holds the write lock, the inline attempt
    /// changes nothing and hands over, and the pool's transaction waits for
    /// the lock and completes the order, once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_foreign_write_lock_sends_the_completion_through_the_pool() {
        let f = fixture().await;
        let request = f.order("Order:locked01", 500).await;
        let other = rusqlite::Connection::open(&f.path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let reader = f.reader.clone();
        let completion = tokio::spawn(async move { complete(&reader, request).await });
        // Waits for the inline attempt to meet the lock; the bound only
        // turns a path that never tries inline into a failure, not a hang.
        for waited in 0.. {
            if f.reader.inline_writes().1 > 0 {
                break;
            }
            assert!(waited < 10_000, "the inline attempt never met the lock");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let order = find(&f.db, "Order:locked01").await.unwrap().unwrap();
        assert_eq!(order.status, payment_order::STATUS_PENDING);
        other.execute_batch("ROLLBACK").unwrap();

        let done = completion.await.unwrap().unwrap();
        assert_eq!(done.balance_after, Money::from_cents(500).unwrap());
        assert_eq!(f.reader.inline_writes(), (0, 1), "the pool completed it");
        assert_eq!(f.main_cents().await, 500);
        assert_eq!(f.log_rows().await, 1);
    }
}
