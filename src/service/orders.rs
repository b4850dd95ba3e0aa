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
//! PAYMENT_PROCESSING_ERROR). See `docs/benchmarks.md` for what it bought.

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
    db::{Reader, is_unavailable},
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
    INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at")
    SELECT "user_id", "server_id", "amount_cents", 0, $2 FROM o
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
async fn complete_in_one_statement(
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

/// Why an order the update did not match was not completed: it is missing
/// (or foreign, or of another payment system), or completed already.
async fn not_completed(
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
async fn complete_step_by_step(
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
    let (before, after) = super::balances::add_in_txn(
        &txn,
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
