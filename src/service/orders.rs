//! Payment orders over their whole life: creation (idempotent with a key),
//! reading, cancellation and completion; the API and the command line both
//! call these.
//!
//! An order is created `pending` and ends either `completed` (its amount
//! credited exactly once) or `cancelled` (nothing credited); both are final.
//! Completion and cancellation are each one status update guarded by
//! `status = 'pending'`, so of any number of them racing on one order,
//! concurrent or not, on any number of instances, exactly one matches the
//! row: the database's row lock decides, and the loser finds the order in
//! its final status. Completion is the store's (status update, credit and
//! log row in one transaction, see `store`), and so is an order's insert
//! (its user resolved with it; grouped on PostgreSQL); reading and
//! cancelling are written once here with sea-orm for every backend.
//!
//! An `Idempotency-Key` is kept with the order it created, unique per
//! project (the schema's unique index): of many concurrent creations with
//! one key, one inserts and the others conflict and find its order, so one
//! key creates one order. A repeat is told from another request under the
//! same key by the SHA-256 of the request's fields
//! ([`OrderRequest::fingerprint`]).

use chrono::{DateTime, Utc};
use entity::payment_order::{self, OrderStatus};
use sea_orm::{
    ActiveEnum, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait,
    PaginatorTrait, QueryFilter, QuerySelect, QueryTrait,
    sea_query::{Expr, ExprTrait},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    admin_audit::{self, Actor, AuditedChange, Change},
    begin_write,
    keyset::{Keyset, Listed},
    now, outbox,
    users::UserRef,
};
pub use crate::store::{CompleteError, CompletedOrder, Completion};
use crate::{
    domain::{Email, IdempotencyKey, OrderId, PaymentSystem},
    events,
    money::Money,
    store::{NewOrder, OrderInsert, Store, StoreError},
};

/// An order as the API and the command line show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub order_id: OrderId,
    pub project_id: i64,
    pub status: OrderStatus,
    pub user_id: i64,
    /// 0 for the general account.
    pub server_id: i64,
    pub amount: Money,
    pub payment_system: PaymentSystem,
    pub payment_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    /// When the last completion was refused with an answer no retry
    /// changes, and why (see [`CompleteError::BalanceCeiling`]).
    pub refused_at: Option<DateTime<Utc>>,
    pub refusal: Option<String>,
}

impl TryFrom<payment_order::Model> for Order {
    type Error = StoreError;

    fn try_from(row: payment_order::Model) -> Result<Order, StoreError> {
        // Only what the schema's constraints or this service's parsing let
        // in is stored: anything else is a database to look into.
        let broken = |what: &str, err: &dyn std::fmt::Display| {
            StoreError::Failed(format!("order {what} in database {err}"))
        };
        Ok(Order {
            amount: Money::from_cents(row.amount_cents).map_err(|err| broken("amount", &err))?,
            order_id: row.order_id.parse().map_err(|err| broken("id", &err))?,
            payment_system: row
                .payment_system
                .parse()
                .map_err(|err| broken("payment system", &err))?,
            project_id: row.project_id,
            status: row.status,
            user_id: row.user_id,
            server_id: row.server_id.unwrap_or(entity::balance::GENERAL_ACCOUNT),
            payment_id: row.payment_id,
            created_at: row.created_at,
            completed_at: row.completed_at,
            cancelled_at: row.cancelled_at,
            refused_at: row.refused_at,
            refusal: row.refusal,
        })
    }
}

impl Order {
    /// The order as its events show it.
    pub fn data(&self) -> events::OrderData<'_> {
        events::OrderData {
            order_id: &self.order_id,
            status: self.status,
            user_id: self.user_id,
            server_id: self.server_id,
            amount: self.amount,
            payment_system: &self.payment_system,
            payment_id: self.payment_id.as_deref(),
            created_at: self.created_at,
            completed_at: self.completed_at,
            cancelled_at: self.cancelled_at,
        }
    }
}

/// A creation as the caller asks for it.
#[derive(Debug, Clone)]
pub struct OrderRequest {
    pub project_id: i64,
    pub who: UserRef,
    /// 0 for the general account.
    pub server_id: i64,
    pub amount: Money,
    pub payment_system: PaymentSystem,
    /// Generated (`Order:` + 11 random letters and digits) when absent; only
    /// the command line names one.
    pub order_id: Option<OrderId>,
}

impl OrderRequest {
    /// SHA-256 (hex) of what the request asks for, as validated: the same
    /// for a repeat of it whatever its JSON spelling (key order, `10.5` or
    /// `10.50`, the e-mail's case), different for any other request.
    pub fn fingerprint(&self) -> String {
        // Written as it was when the fields were plain strings: the hashes
        // stored with earlier orders must still match their repeats.
        let text = format!(
            "user_id={:?}\nemail={:?}\nserver_id={}\namount_cents={}\npayment_system={}\norder_id={:?}",
            self.who.user_id(),
            self.who.email().map(Email::as_str),
            self.server_id,
            self.amount.cents(),
            self.payment_system,
            self.order_id.as_deref(),
        );
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

/// The outcome of a creation.
#[derive(Debug, Clone)]
pub struct Created {
    /// The order as it was created (status pending), also for a replay.
    pub order: Order,
    /// True when an earlier request with the same key created it.
    pub replayed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// A field's value breaks a rule its type does not carry (an amount of
    /// zero, a negative server id): the field, and why.
    #[error("{1}")]
    Invalid(&'static str, String),
    #[error("user not found in the project")]
    UserNotFound,
    #[error("server not found in the project")]
    ServerNotFound,
    /// The key was used before for another request.
    #[error("idempotency key reused with another request")]
    KeyReused,
    /// The order id the command line asked for is taken.
    #[error("order id {0} already exists")]
    OrderIdTaken(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<DbErr> for CreateError {
    fn from(err: DbErr) -> CreateError {
        CreateError::Store(err.into())
    }
}

/// How often a generated order id that happens to be taken is drawn again
/// (62^11 ids: this is for completeness, not for load).
const ORDER_ID_DRAWS: usize = 3;

/// Creates a pending order, once per `idempotency_key` (see the module
/// docs). The user is resolved before the server, as in a balance lookup;
/// with a key that was used before, the earlier request's answer (or
/// [`CreateError::KeyReused`]) comes first.
pub async fn create(
    db: &DatabaseConnection,
    store: &dyn Store,
    request: &OrderRequest,
    idempotency_key: Option<&IdempotencyKey>,
) -> Result<Created, CreateError> {
    insert(db, store, request, idempotency_key, None).await
}

/// Creates a pending order for `actor` (the panel, the command line), as
/// [`create`] does for the API but without an idempotency key, with its
/// row of the audit log in the insert's transaction.
pub async fn create_as(
    db: &DatabaseConnection,
    store: &dyn Store,
    actor: &Actor,
    request: &OrderRequest,
) -> Result<Order, CreateError> {
    let created = insert(db, store, request, None, Some(actor)).await?;
    Ok(created.order)
}

/// The one path of an order's creation: [`create`] and [`create_as`].
async fn insert(
    db: &DatabaseConnection,
    store: &dyn Store,
    request: &OrderRequest,
    idempotency_key: Option<&IdempotencyKey>,
    actor: Option<&Actor>,
) -> Result<Created, CreateError> {
    check_request(request)?;
    let request_hash = idempotency_key.map(|_| request.fingerprint());
    let email = request.who.email().map(Email::to_string);
    let mut draws = 0;
    loop {
        let order_id = order_id_for(request);
        let audit = actor.map(|actor| {
            let change = Change::new("order.create", "order", &order_id).after(json!({
                "project_id": request.project_id,
                "user_id": request.who.user_id(),
                "email": email,
                "server_id": request.server_id,
                "amount": request.amount.to_string(),
                "payment_system": request.payment_system,
                "status": OrderStatus::Pending.to_value(),
            }));
            admin_audit::row(actor, change)
        });
        let order = NewOrder {
            order_id: order_id.to_string(),
            project_id: request.project_id,
            user_id: request.who.user_id(),
            email: email.clone(),
            server_id: request.server_id,
            amount_cents: request.amount.cents(),
            payment_system: request.payment_system.to_string(),
            idempotency_key: idempotency_key.map(IdempotencyKey::to_string),
            request_hash: request_hash.clone(),
            audit,
        };
        let inserted = store.insert_order(&order).await?;
        if let OrderInsert::Inserted {
            user_id,
            created_at,
        } = inserted
        {
            return Ok(Created {
                order: Order {
                    order_id,
                    project_id: order.project_id,
                    status: OrderStatus::Pending,
                    user_id,
                    server_id: order.server_id,
                    amount: request.amount,
                    payment_system: request.payment_system.clone(),
                    payment_id: None,
                    created_at,
                    completed_at: None,
                    cancelled_at: None,
                    refused_at: None,
                    refusal: None,
                },
                replayed: false,
            });
        }
        // Not inserted: a request with this key came first (concurrently,
        // or long ago) and its answer is this one's.
        if let Some(key) = idempotency_key
            && let Some(created) =
                replay(db, request.project_id, key, request_hash.as_deref()).await?
        {
            return Ok(created);
        }
        match inserted {
            OrderInsert::UserNotFound => return Err(CreateError::UserNotFound),
            OrderInsert::ServerNotFound => return Err(CreateError::ServerNotFound),
            _ => order_id_taken(request, order_id, &mut draws)?,
        }
    }
}

/// The order id to insert `request` under: its own, or a fresh draw.
fn order_id_for(request: &OrderRequest) -> OrderId {
    request.order_id.clone().unwrap_or_else(generate_order_id)
}

/// After `order_id` was found taken: the error when the request named it,
/// or when [`ORDER_ID_DRAWS`] drawn ids were all taken; `Ok` to draw again.
fn order_id_taken(
    request: &OrderRequest,
    order_id: OrderId,
    draws: &mut usize,
) -> Result<(), CreateError> {
    if request.order_id.is_some() {
        return Err(CreateError::OrderIdTaken(order_id.into()));
    }
    *draws += 1;
    if *draws == ORDER_ID_DRAWS {
        return Err(CreateError::Store(StoreError::Failed(format!(
            "{ORDER_ID_DRAWS} order ids drawn were all taken"
        ))));
    }
    Ok(())
}

/// An order as the audit log shows it.
fn audited(order: &Order) -> Value {
    json!({
        "project_id": order.project_id,
        "user_id": order.user_id,
        "server_id": order.server_id,
        "amount": order.amount.to_string(),
        "payment_system": order.payment_system,
        "status": order.status.to_value(),
        "payment_id": order.payment_id,
        "cancelled_at": order.cancelled_at,
    })
}

/// The order created earlier with `key` in the project, answered as then;
/// [`CreateError::KeyReused`] when it was created for another request.
async fn replay(
    db: &DatabaseConnection,
    project_id: i64,
    key: &IdempotencyKey,
    fingerprint: Option<&str>,
) -> Result<Option<Created>, CreateError> {
    let Some(row) = payment_order::Entity::find()
        .filter(payment_order::Column::ProjectId.eq(project_id))
        .filter(payment_order::Column::IdempotencyKey.eq(key.as_str()))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    if row.request_hash.as_deref() != fingerprint {
        return Err(CreateError::KeyReused);
    }
    let mut order = Order::try_from(row)?;
    // The answer of the creation: the order as it was created.
    order.status = OrderStatus::Pending;
    order.payment_id = None;
    order.completed_at = None;
    order.cancelled_at = None;
    order.refused_at = None;
    order.refusal = None;
    Ok(Some(Created {
        order,
        replayed: true,
    }))
}

/// The rules of a creation its fields' types do not carry.
fn check_request(request: &OrderRequest) -> Result<(), CreateError> {
    if let Err(err) = request.amount.positive() {
        return Err(CreateError::Invalid("amount", format!("amount {err}")));
    }
    if request.server_id < 0 {
        return Err(CreateError::Invalid(
            "server_id",
            "server id must be >= 0".into(),
        ));
    }
    Ok(())
}

/// `Order:` plus 11 characters from [A-Za-z0-9], drawn from the OS CSPRNG.
pub fn generate_order_id() -> OrderId {
    format!("Order:{}", super::random_alphanumeric(11))
        .parse()
        .expect("Order: and 11 letters and digits make an order id")
}

/// The order `order_id` of `project_id` (of any project when `None`).
pub async fn get(
    db: &DatabaseConnection,
    project_id: Option<i64>,
    order_id: &str,
) -> Result<Option<Order>, StoreError> {
    let mut query =
        payment_order::Entity::find().filter(payment_order::Column::OrderId.eq(order_id));
    if let Some(project_id) = project_id {
        query = query.filter(payment_order::Column::ProjectId.eq(project_id));
    }
    query.one(db).await?.map(Order::try_from).transpose()
}

/// A cancellation of `order_id` of `project_id`.
#[derive(Debug, Clone)]
pub struct Cancellation {
    pub project_id: i64,
    pub order_id: OrderId,
    /// Must be the order's, as on completion.
    pub payment_system: PaymentSystem,
}

#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// Missing, of another project, or stored with another payment system.
    #[error("order not found")]
    OrderNotFound,
    #[error("order already completed")]
    AlreadyCompleted,
    #[error("order already cancelled")]
    AlreadyCancelled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Cancels a pending order: one guarded status update (see the module
/// docs), in a write transaction with the order's `order.cancelled` (when
/// its project has an endpoint that receives it). A completed or cancelled
/// order is left as it is. The API cancels with `by` none; with an actor
/// (the panel, the command line) the transaction also writes its row of
/// the audit log.
pub async fn cancel(
    db: &DatabaseConnection,
    by: Option<&Actor>,
    request: &Cancellation,
) -> Result<Order, CancelError> {
    let Some(actor) = by else {
        let txn = begin_write(db).await.map_err(StoreError::from)?;
        let order = cancel_on(&txn, request).await?;
        txn.commit().await.map_err(StoreError::from)?;
        return Ok(order);
    };
    let txn = AuditedChange::begin(db, actor)
        .await
        .map_err(StoreError::from)?;
    let order = cancel_on(&*txn, request).await?;
    let before = Order {
        status: OrderStatus::Pending,
        cancelled_at: None,
        ..order.clone()
    };
    let change = Change::new("order.cancel", "order", &order.order_id)
        .before(audited(&before))
        .after(audited(&order));
    txn.commit(change).await.map_err(StoreError::from)?;
    Ok(order)
}

/// [`cancel`] on `db`, a connection or a transaction.
async fn cancel_on<C: ConnectionTrait>(
    db: &C,
    request: &Cancellation,
) -> Result<Order, CancelError> {
    let named = || {
        payment_order::Column::OrderId
            .eq(request.order_id.as_str())
            .and(payment_order::Column::ProjectId.eq(request.project_id))
            .and(payment_order::Column::PaymentSystem.eq(request.payment_system.as_str()))
    };
    let cancelled = payment_order::Entity::update_many()
        .col_expr(
            payment_order::Column::Status,
            Expr::value(OrderStatus::Cancelled),
        )
        .col_expr(payment_order::Column::CancelledAt, Expr::value(now()))
        .filter(named())
        .filter(payment_order::Column::Status.eq(OrderStatus::Pending))
        .exec(db)
        .await
        .map_err(StoreError::from)?
        .rows_affected
        == 1;
    // Whatever the update did, the order is now in a final status (or
    // missing), which no later request changes: read it.
    let row = payment_order::Entity::find()
        .filter(named())
        .one(db)
        .await
        .map_err(StoreError::from)?
        .ok_or(CancelError::OrderNotFound)?;
    let order = Order::try_from(row)?;
    if cancelled {
        outbox::record(db, order.project_id, || {
            vec![events::order_cancelled(order.project_id, &order.data())]
        })
        .await
        .map_err(StoreError::from)?;
    }
    match order.status {
        _ if cancelled => Ok(order),
        OrderStatus::Completed => Err(CancelError::AlreadyCompleted),
        OrderStatus::Cancelled => Err(CancelError::AlreadyCancelled),
        OrderStatus::Pending => Err(CancelError::Store(StoreError::Failed(
            "a pending order was not cancelled".into(),
        ))),
    }
}

/// What an order refused by [`CompleteError::BalanceCeiling`] records.
pub const BALANCE_CEILING_REFUSAL: &str = "the credit would take the user's main balance past \
     999999999999999.99, the largest balance kept; complete the order once the balance allows";

/// Completes an order exactly once: marks it completed, credits its amount
/// to the main balance of its user on its server (the general account when
/// it has none) and logs the operation, in one transaction of the store.
/// Of any number of completions and cancellations of one order, concurrent
/// or not, on any number of instances, one succeeds; a failure changes
/// nothing, so a retry is always safe. A refusal no retry changes
/// ([`CompleteError::BalanceCeiling`]) is recorded with the order, which
/// stays pending.
pub async fn complete(
    db: &DatabaseConnection,
    store: &dyn Store,
    request: &Completion,
) -> Result<CompletedOrder, CompleteError> {
    let completed = store.complete(request).await;
    if let Err(CompleteError::BalanceCeiling) = completed {
        record_refusal(db, request, BALANCE_CEILING_REFUSAL).await;
    }
    completed
}

/// Records on the pending order `request` names that its completion was
/// refused for `reason`. The answer stands whether or not this is written:
/// a failure is logged, and the next refusal writes it again.
async fn record_refusal(db: &DatabaseConnection, request: &Completion, reason: &str) {
    use payment_order::Column;
    let recorded = payment_order::Entity::update_many()
        .col_expr(Column::RefusedAt, Expr::value(now()))
        .col_expr(Column::Refusal, Expr::value(reason))
        .filter(Column::OrderId.eq(&request.order_id))
        .filter(Column::ProjectId.eq(request.project_id))
        .filter(Column::PaymentSystem.eq(&request.payment_system))
        .filter(Column::Status.eq(OrderStatus::Pending))
        .exec(db)
        .await;
    if let Err(err) = recorded {
        tracing::error!(order_id = %request.order_id, error = %err, "recording a refused completion failed");
    }
}

/// Completes the pending order `order_id` of `project_id` for `actor` (the
/// panel, the command line), as [`complete`] does for the API, with its row
/// of the audit log in the completion's transaction: an order refused
/// earlier is completed this way once its balance allows.
pub async fn complete_as(
    db: &DatabaseConnection,
    store: &dyn Store,
    actor: &Actor,
    project_id: i64,
    order_id: &str,
) -> Result<CompletedOrder, CompleteError> {
    let order = get(db, Some(project_id), order_id)
        .await?
        .ok_or(CompleteError::OrderNotFound)?;
    let after = Order {
        status: OrderStatus::Completed,
        ..order.clone()
    };
    let change = Change::new("order.complete", "order", &order.order_id)
        .before(audited(&order))
        .after(audited(&after));
    let request = Completion {
        project_id,
        order_id: order.order_id.into(),
        payment_system: order.payment_system.into(),
        payment_id: order.payment_id,
        audit: Some(admin_audit::row(actor, change)),
    };
    complete(db, store, &request).await
}

/// Which orders `list` shows; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct OrderFilter {
    /// One project's orders; every project's when `None`.
    pub project_id: Option<i64>,
    /// Exactly this order id.
    pub order_id: Option<OrderId>,
    pub user_id: Option<i64>,
    pub status: Option<OrderStatus>,
    /// Created at or after this moment.
    pub from: Option<DateTime<Utc>>,
    /// Created before this moment.
    pub until: Option<DateTime<Utc>>,
}

impl OrderFilter {
    fn select(&self) -> sea_orm::Select<payment_order::Entity> {
        use payment_order::Column;
        payment_order::Entity::find()
            .apply_if(self.project_id, |q, id| q.filter(Column::ProjectId.eq(id)))
            .apply_if(self.order_id.as_deref(), |q, id| {
                q.filter(Column::OrderId.eq(id))
            })
            .apply_if(self.from, |q, from| q.filter(Column::CreatedAt.gte(from)))
            .apply_if(self.until, |q, until| q.filter(Column::CreatedAt.lt(until)))
            .apply_if(self.user_id, |q, id| q.filter(Column::UserId.eq(id)))
            .apply_if(self.status, |q, status| q.filter(Column::Status.eq(status)))
    }
}

/// The page `page` of the orders that `filter` keeps, newest first.
pub async fn list(
    db: &DatabaseConnection,
    filter: &OrderFilter,
    page: Keyset,
) -> Result<Listed<Order>, StoreError> {
    let rows = page
        .select(filter.select(), payment_order::Column::Id)
        .all(db)
        .await?;
    page.cut(rows, |row| row.id).try_map(Order::try_from)
}

/// How many orders `filter` keeps.
pub async fn count(db: &DatabaseConnection, filter: &OrderFilter) -> Result<u64, StoreError> {
    Ok(filter.select().count(db).await?)
}

/// How many orders each project has in each status among those created
/// at or after `since`: `(project_id, status, count)`, one per pair that
/// has any.
pub async fn counts_created_since(
    db: &DatabaseConnection,
    since: DateTime<Utc>,
) -> Result<Vec<(i64, OrderStatus, i64)>, DbErr> {
    use payment_order::Column;
    payment_order::Entity::find()
        .select_only()
        .column(Column::ProjectId)
        .column(Column::Status)
        .column_as(Column::Id.count(), "count")
        .filter(Column::CreatedAt.gte(since))
        .group_by(Column::ProjectId)
        .group_by(Column::Status)
        .into_tuple::<(i64, OrderStatus, i64)>()
        .all(db)
        .await
}
