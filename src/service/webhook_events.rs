//! A project's outgoing events as operators read them (the panel's lists
//! and event pages), and their retention.
//!
//! Retention deletes what no longer serves: finished deliveries (succeeded
//! or failed) with their attempts, then events left without any delivery,
//! once older than `webhook_retention_days`. It runs in small batches, each
//! a select of at most a batch of ids and a delete of those ids (MariaDB
//! refuses a LIMIT inside `IN (SELECT ...)`), so that no statement holds
//! many rows' locks while orders complete; each delete states its condition
//! again, so that a row that changed in between (a delivery sent again) is
//! kept. An event with a pending delivery is never deleted.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use entity::{
    webhook_attempt,
    webhook_delivery::{self, DeliveryStatus},
    webhook_endpoint, webhook_event,
};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, QueryTrait,
    sea_query::{Expr, ExprTrait, Query},
};

use super::{
    AdminError,
    keyset::{Keyset, Listed},
    now, projects,
};
use crate::events::EventType;

/// Which events a list shows: each filter left `None` keeps every event.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub event_type: Option<EventType>,
    /// Events with at least one delivery in this state.
    pub status: Option<DeliveryStatus>,
    pub order_id: Option<String>,
}

/// A page of the events of `project_id` that `filter` keeps, newest first.
pub async fn page(
    db: &DatabaseConnection,
    project_id: i64,
    filter: &EventFilter,
    page: Keyset,
) -> Result<Listed<webhook_event::Model>, AdminError> {
    use webhook_event::Column;
    projects::get(db, project_id).await?;
    let query = webhook_event::Entity::find()
        .filter(Column::ProjectId.eq(project_id))
        .apply_if(filter.event_type, |q, t| q.filter(Column::EventType.eq(t)))
        .apply_if(filter.order_id.as_deref(), |q, id| {
            q.filter(Column::OrderId.eq(id))
        })
        .apply_if(filter.status, |q, status| {
            let with_status = Query::select()
                .column(webhook_delivery::Column::EventId)
                .from(webhook_delivery::Entity)
                .and_where(webhook_delivery::Column::Status.eq(status))
                .to_owned();
            q.filter(Column::Id.in_subquery(with_status))
        });
    let rows = page.select(query, Column::Id).all(db).await?;
    Ok(page.cut(rows, |event| event.id))
}

/// One delivery of an event, with its endpoint's address when the endpoint
/// still exists, and its attempts, oldest first.
#[derive(Debug, Clone)]
pub struct DeliveryDetail {
    pub delivery: webhook_delivery::Model,
    pub endpoint: Option<webhook_endpoint::Model>,
    pub attempts: Vec<webhook_attempt::Model>,
}

/// The event `id` and its deliveries, by endpoint.
pub async fn get(
    db: &DatabaseConnection,
    id: i64,
) -> Result<(webhook_event::Model, Vec<DeliveryDetail>), AdminError> {
    let event = super::find_row(db, webhook_event::Entity, "event", id, false).await?;
    let deliveries = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::EventId.eq(id))
        .order_by_asc(webhook_delivery::Column::Id)
        .find_also_related(webhook_endpoint::Entity)
        .all(db)
        .await?;
    let attempts = webhook_attempt::Entity::find()
        .filter(
            webhook_attempt::Column::DeliveryId
                .is_in(deliveries.iter().map(|(delivery, _)| delivery.id)),
        )
        .order_by_asc(webhook_attempt::Column::Id)
        .all(db)
        .await?;
    let details = deliveries
        .into_iter()
        .map(|(delivery, endpoint)| DeliveryDetail {
            attempts: attempts
                .iter()
                .filter(|attempt| attempt.delivery_id == delivery.id)
                .cloned()
                .collect(),
            delivery,
            endpoint,
        })
        .collect();
    Ok((event, details))
}

/// Rows one retention batch deletes at most, per statement.
pub const PURGE_BATCH: u64 = 500;

/// The pause between two batches, which leaves the database to the
/// request path.
pub const PURGE_PAUSE: Duration = Duration::from_millis(50);

/// What a retention run deleted, and in how many batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub attempts: u64,
    pub deliveries: u64,
    pub events: u64,
    pub batches: u64,
}

/// The time before which finished deliveries and delivered events go, for
/// a retention of `days`.
pub fn retention_cutoff(days: u32) -> DateTime<Utc> {
    now() - TimeDelta::days(i64::from(days))
}

/// Deletes one batch of at most `batch` rows of one kind older than
/// `cutoff` (attempts of finished deliveries first, then the finished
/// deliveries left without attempts, then events left without deliveries);
/// adds what it deleted to `purged` and tells whether anything was.
pub async fn purge_batch<C: ConnectionTrait>(
    db: &C,
    cutoff: DateTime<Utc>,
    batch: u64,
    purged: &mut Purged,
) -> Result<bool, DbErr> {
    use webhook_attempt::Column as A;
    use webhook_delivery::Column as D;
    use webhook_event::Column as E;
    let finished = D::Status.ne(DeliveryStatus::Pending);
    let old_finished = Query::select()
        .column(D::Id)
        .from(webhook_delivery::Entity)
        .and_where(finished.clone())
        .and_where(D::CreatedAt.lt(cutoff))
        .to_owned();
    let attempts = Condition::all().add(A::DeliveryId.in_subquery(old_finished));
    let with_attempts = Query::select()
        .column(A::DeliveryId)
        .from(webhook_attempt::Entity)
        .to_owned();
    let deliveries = Condition::all()
        .add(finished)
        .add(D::CreatedAt.lt(cutoff))
        .add(D::Id.not_in_subquery(with_attempts));
    let delivered = Query::select()
        .column(D::EventId)
        .from(webhook_delivery::Entity)
        .to_owned();
    let events = Condition::all()
        .add(E::CreatedAt.lt(cutoff))
        .add(E::Id.not_in_subquery(delivered));
    let (count, deleted) = match delete_batch(db, webhook_attempt::Entity, A::Id, attempts, batch)
        .await?
    {
        0 => match delete_batch(db, webhook_delivery::Entity, D::Id, deliveries, batch).await? {
            0 => {
                let deleted = delete_batch(db, webhook_event::Entity, E::Id, events, batch).await?;
                (&mut purged.events, deleted)
            }
            deleted => (&mut purged.deliveries, deleted),
        },
        deleted => (&mut purged.attempts, deleted),
    };
    if deleted == 0 {
        return Ok(false);
    }
    *count += deleted;
    purged.batches += 1;
    Ok(true)
}

/// Deletes at most `batch` rows of `entity` that `which` keeps: a select of
/// their ids, then a delete of those ids that states `which` again (see the
/// module docs); how many it deleted.
async fn delete_batch<E: EntityTrait, C: ConnectionTrait>(
    db: &C,
    _entity: E,
    id: E::Column,
    which: Condition,
    batch: u64,
) -> Result<u64, DbErr> {
    let ids: Vec<i64> = E::find()
        .select_only()
        .column(id)
        .filter(which.clone())
        .limit(batch)
        .into_tuple()
        .all(db)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    let deleted = E::delete_many()
        .filter(id.is_in(ids))
        .filter(which)
        .exec(db)
        .await?;
    Ok(deleted.rows_affected)
}

/// Deletes everything older than `cutoff` that retention deletes, `batch`
/// rows a statement, pausing `pause` between batches.
pub async fn purge(
    db: &DatabaseConnection,
    cutoff: DateTime<Utc>,
    batch: u64,
    pause: Duration,
) -> Result<Purged, DbErr> {
    let mut purged = Purged::default();
    while purge_batch(db, cutoff, batch, &mut purged).await? {
        tokio::time::sleep(pause).await;
    }
    Ok(purged)
}

/// How often `serve` runs retention (and once at start).
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Runs retention for `days` at once and then every [`PURGE_EVERY`], for
/// as long as the process runs; a failed run is logged and tried again at
/// the next hour.
pub async fn retain(db: DatabaseConnection, days: u32) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match purge(&db, retention_cutoff(days), PURGE_BATCH, PURGE_PAUSE).await {
            Ok(purged) if purged.batches > 0 => tracing::info!(
                attempts = purged.attempts,
                deliveries = purged.deliveries,
                events = purged.events,
                "webhook retention deleted old deliveries and events"
            ),
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "webhook retention failed; next run in an hour")
            }
        }
    }
}

/// The orders that should have an event of `event_type` (completed or
/// cancelled) and have none; see `ledger_check` for which.
pub async fn orders_missing_event(
    db: &DatabaseConnection,
    project_id: i64,
    event_type: EventType,
    since: DateTime<Utc>,
) -> Result<Vec<String>, DbErr> {
    use entity::payment_order::{Column as O, Entity as Orders, OrderStatus};
    let (status, at) = match event_type {
        EventType::OrderCancelled => (OrderStatus::Cancelled, O::CancelledAt),
        _ => (OrderStatus::Completed, O::CompletedAt),
    };
    let recorded = Query::select()
        .expr(Expr::val(1))
        .from(webhook_event::Entity)
        .and_where(
            Expr::col((webhook_event::Entity, webhook_event::Column::OrderId))
                .equals((Orders, O::OrderId)),
        )
        .and_where(
            Expr::col((webhook_event::Entity, webhook_event::Column::ProjectId))
                .equals((Orders, O::ProjectId)),
        )
        .and_where(webhook_event::Column::EventType.eq(event_type))
        .to_owned();
    Orders::find()
        .select_only()
        .column(O::OrderId)
        .filter(O::ProjectId.eq(project_id))
        .filter(O::Status.eq(status))
        .filter(at.gte(since))
        .filter(Expr::exists(recorded).not())
        .order_by_asc(O::Id)
        .into_tuple()
        .all(db)
        .await
}
