//! Events recorded by the changes written here with sea-orm (a
//! cancellation, a balance set by an operator), in their transaction; the
//! store records those of the changes it makes (order creation and
//! completion) with its own statements, the same way.
//!
//! An event is recorded only when an enabled endpoint of its project
//! receives its type, with one pending delivery per such endpoint, due at
//! once by the database's clock. For a project without an enabled endpoint
//! (most) the cost is the one indexed read of [`subscribers`].

use entity::{webhook_delivery, webhook_endpoint, webhook_event};
use sea_orm::{
    ActiveEnum, ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter,
    sea_query::{Expr, Query, SimpleExpr},
};

use super::now;
use crate::{
    events::{NewEvent, new_webhook_id},
    store::{Subscriber, deliveries},
};

/// The enabled endpoints of `project_ids`.
pub async fn subscribers<C: ConnectionTrait>(
    db: &C,
    project_ids: &[i64],
) -> Result<Vec<Subscriber>, DbErr> {
    use webhook_endpoint::Column;
    Ok(webhook_endpoint::Entity::find()
        .filter(Column::ProjectId.is_in(project_ids.iter().copied()))
        .filter(Column::Enabled.eq(true))
        .all(db)
        .await?
        .into_iter()
        .map(|endpoint| Subscriber {
            endpoint_id: endpoint.id,
            project_id: endpoint.project_id,
            event_types: endpoint.event_types,
        })
        .collect())
}

/// Records `events`, made by `make` only when their project has an enabled
/// endpoint, on `txn`: the transaction of their change.
pub async fn record<C: ConnectionTrait>(
    txn: &C,
    project_id: i64,
    make: impl FnOnce() -> Vec<NewEvent>,
) -> Result<(), DbErr> {
    let subscribers = subscribers(txn, &[project_id]).await?;
    if subscribers.is_empty() {
        return Ok(());
    }
    let events = make();
    for (event, endpoints) in deliveries(&subscribers, &events) {
        insert(txn, event, &endpoints).await?;
    }
    Ok(())
}

/// Records `event` with pending deliveries to `endpoints`, on `txn`.
pub(super) async fn insert<C: ConnectionTrait>(
    txn: &C,
    event: &NewEvent,
    endpoints: &[i64],
) -> Result<webhook_event::Model, DbErr> {
    let recorded = webhook_event::ActiveModel {
        webhook_id: Set(new_webhook_id()),
        project_id: Set(event.project_id),
        event_type: Set(event.event_type),
        order_id: Set(event.order_id.clone()),
        payload: Set(event.payload.clone()),
        created_at: Set(event.at),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    enqueue(txn, recorded.id, endpoints).await?;
    Ok(recorded)
}

/// Pending deliveries of `event_id` to `endpoints`, due at once by the
/// database's clock.
pub(super) async fn enqueue<C: ConnectionTrait>(
    txn: &C,
    event_id: i64,
    endpoints: &[i64],
) -> Result<(), DbErr> {
    if endpoints.is_empty() {
        return Ok(());
    }
    let due = database_now(txn.get_database_backend());
    let mut insert = Query::insert();
    insert.into_table(webhook_delivery::Entity).columns([
        webhook_delivery::Column::EventId,
        webhook_delivery::Column::EndpointId,
        webhook_delivery::Column::Status,
        webhook_delivery::Column::Attempts,
        webhook_delivery::Column::NextAttemptAt,
        webhook_delivery::Column::CreatedAt,
    ]);
    for endpoint_id in endpoints {
        insert.values_panic([
            event_id.into(),
            (*endpoint_id).into(),
            webhook_delivery::DeliveryStatus::Pending.to_value().into(),
            0i32.into(),
            due.clone(),
            due.clone(),
        ]);
    }
    txn.execute(&insert).await?;
    Ok(())
}

/// The time by the database's clock, to the microsecond (SQLite's is this
/// host's).
pub(super) fn database_now(backend: DbBackend) -> SimpleExpr {
    match backend {
        DbBackend::Postgres => Expr::cust("now()"),
        DbBackend::MySql => Expr::cust("UTC_TIMESTAMP(6)"),
        _ => Expr::value(now()),
    }
}
