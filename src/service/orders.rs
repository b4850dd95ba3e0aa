//! Payment orders: creation (command line) and completion, the operation
//! behind `POST /v2/payment/order/complete`.
//!
//! Completion is the store's: each backend writes the status update, the
//! credit and the operation-log row in one transaction, the update guarded
//! (`status <> 'completed'`) so that it matches a pending order only once.
//! The unique `order_ref` of the log is a second guard in the schema itself.

use chrono::{DateTime, Utc};
use entity::payment_order;
use rand::{Rng, TryRngCore, distr::Alphanumeric, rngs::OsRng};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter,
};

use super::{AdminError, now, servers, users, validate};
pub use crate::store::{CompleteError, Completion};
use crate::{
    money::Money,
    store::{Store, StoreError},
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
        status: Set(payment_order::OrderStatus::Pending),
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

/// The order as it stands after a successful completion.
#[derive(Debug, Clone)]
pub struct CompletedOrder {
    pub order_id: String,
    pub payment_system: String,
    pub payment_id: Option<String>,
    pub amount: Money,
    pub completed_at: DateTime<Utc>,
    pub user_id: i64,
    /// 0 for the general account.
    pub server_id: i64,
    pub balance_after: Money,
}

/// Completes an order exactly once: marks it completed, credits its amount
/// to the main balance of its user on its server (the general account when
/// it has none) and logs the operation, in one transaction of the store.
/// Of any number of completions of one order, concurrent or not, on any
/// number of instances, one succeeds and the others answer
/// [`CompleteError::AlreadyCompleted`]; a failure changes nothing, so a
/// retry is always safe.
pub async fn complete(
    store: &dyn Store,
    request: &Completion,
) -> Result<CompletedOrder, CompleteError> {
    let done = store.complete(request).await?;
    let money = |cents: i64| {
        Money::from_cents(cents).map_err(|err| {
            CompleteError::ProcessingFailed(StoreError::Failed(format!(
                "amount out of range in database: {err}"
            )))
        })
    };
    Ok(CompletedOrder {
        amount: money(done.amount_cents)?,
        balance_after: money(done.balance_after_cents)?,
        order_id: done.order_id,
        payment_system: done.payment_system,
        payment_id: done.payment_id,
        completed_at: done.completed_at,
        user_id: done.user_id,
        server_id: done.server_id,
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
