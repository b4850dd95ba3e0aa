//! What an operator asks of the relay: a test event to one endpoint, an
//! event sent again, an endpoint's failed deliveries of a window sent again,
//! and an endpoint's secret rotated with an overlap.
//!
//! Each only records (an event, pending deliveries due at once, a secret),
//! in one audited change; the relay sends, as it sends everything else. A
//! resent event keeps its `webhook-id` and its body: receivers that saw it
//! drop it as a duplicate, which is what makes resending safe. Only enabled
//! endpoints are sent to.

use chrono::{DateTime, Duration, Utc};
use entity::{webhook_delivery, webhook_endpoint, webhook_event};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter,
    QuerySelect, QueryTrait,
};
use serde_json::json;

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change},
    now,
    outbox::{self, enqueue},
    webhook_endpoints,
    webhook_secrets::{self, WebhookSecret},
};
use crate::{config::WebhookSecretKey, events};

/// The longest window `replay` takes.
pub const REPLAY_WINDOW_MAX_DAYS: i64 = 14;

/// The enabled endpoint `id`, locked in `txn`.
async fn enabled_endpoint<C: ConnectionTrait>(
    txn: &C,
    id: i64,
) -> Result<webhook_endpoint::Model, AdminError> {
    let endpoint = webhook_endpoints::find(txn, id, true).await?;
    if !endpoint.enabled {
        return Err(AdminError::Invalid(
            "endpoint",
            format!("webhook endpoint {id} is disabled; enable it first"),
        ));
    }
    Ok(endpoint)
}

/// Records a `webhook.test` event for the endpoint `endpoint_id` alone
/// (whatever types it receives); returns the event.
pub async fn test_endpoint(
    db: &sea_orm::DatabaseConnection,
    actor: &Actor,
    endpoint_id: i64,
) -> Result<webhook_event::Model, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let endpoint = enabled_endpoint(&*txn, endpoint_id).await?;
    let event = events::webhook_test(endpoint.project_id, endpoint.id, now());
    let recorded = outbox::insert(&*txn, &event, &[endpoint.id]).await?;
    let change = Change::new("webhook_endpoint.test", "webhook_endpoint", endpoint.id)
        .after(json!({"event_id": recorded.id, "webhook_id": recorded.webhook_id}));
    txn.commit(change).await?;
    Ok(recorded)
}

/// Sends the event `event_id` again to `endpoint` (which must be of its
/// project), or to every enabled endpoint it was delivered to; returns the
/// endpoints it is sent to.
pub async fn resend(
    db: &sea_orm::DatabaseConnection,
    actor: &Actor,
    event_id: i64,
    endpoint: Option<i64>,
) -> Result<Vec<i64>, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let event = super::find_row(
        &*txn,
        webhook_event::Entity,
        "webhook event",
        event_id,
        false,
    )
    .await?;
    let targets = match endpoint {
        Some(id) => {
            let endpoint = enabled_endpoint(&*txn, id).await?;
            if endpoint.project_id != event.project_id {
                return Err(AdminError::Invalid(
                    "endpoint",
                    format!(
                        "webhook endpoint {id} is not of project {}, whose event this is",
                        event.project_id
                    ),
                ));
            }
            vec![id]
        }
        None => {
            let delivered = webhook_delivery::Entity::find()
                .select_only()
                .column(webhook_delivery::Column::EndpointId)
                .distinct()
                .filter(webhook_delivery::Column::EventId.eq(event_id))
                .into_tuple::<i64>()
                .all(&*txn)
                .await?;
            webhook_endpoint::Entity::find()
                .select_only()
                .column(webhook_endpoint::Column::Id)
                .filter(webhook_endpoint::Column::Id.is_in(delivered))
                .filter(webhook_endpoint::Column::Enabled.eq(true))
                .into_tuple::<i64>()
                .all(&*txn)
                .await?
        }
    };
    enqueue(&*txn, event.id, &targets).await?;
    let change = Change::new("webhook_event.resend", "webhook_event", event.id)
        .after(json!({"endpoints": targets}));
    txn.commit(change).await?;
    Ok(targets)
}

/// Sends again the failed deliveries to the endpoint `endpoint_id` of the
/// events recorded from `since` to `until` (now when `None`), at most
/// [`REPLAY_WINDOW_MAX_DAYS`] apart; an event already pending or delivered
/// to it is left alone. Returns how many events are sent again.
pub async fn replay(
    db: &sea_orm::DatabaseConnection,
    actor: &Actor,
    endpoint_id: i64,
    since: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
) -> Result<usize, AdminError> {
    let until = until.unwrap_or_else(now);
    if until <= since {
        return Err(AdminError::Invalid(
            "since",
            "--since must be before --until".to_owned(),
        ));
    }
    if until - since > Duration::days(REPLAY_WINDOW_MAX_DAYS) {
        return Err(AdminError::Invalid(
            "since",
            format!("the window is at most {REPLAY_WINDOW_MAX_DAYS} days"),
        ));
    }
    let txn = AuditedChange::begin(db, actor).await?;
    let endpoint = enabled_endpoint(&*txn, endpoint_id).await?;
    use webhook_delivery::{Column, DeliveryStatus};
    let in_window = webhook_event::Entity::find()
        .select_only()
        .column(webhook_event::Column::Id)
        .filter(webhook_event::Column::ProjectId.eq(endpoint.project_id))
        .filter(webhook_event::Column::CreatedAt.gte(since))
        .filter(webhook_event::Column::CreatedAt.lt(until))
        .into_query();
    let deliveries = webhook_delivery::Entity::find()
        .filter(Column::EndpointId.eq(endpoint.id))
        .filter(Column::EventId.in_subquery(in_window))
        .all(&*txn)
        .await?;
    let mut failed: Vec<i64> = deliveries
        .iter()
        .filter(|d| d.status == DeliveryStatus::Failed)
        .map(|d| d.event_id)
        .collect();
    failed.sort_unstable();
    failed.dedup();
    failed.retain(|event| {
        !deliveries
            .iter()
            .any(|d| d.event_id == *event && d.status != DeliveryStatus::Failed)
    });
    for event_id in &failed {
        enqueue(&*txn, *event_id, &[endpoint.id]).await?;
    }
    let change = Change::new("webhook_endpoint.replay", "webhook_endpoint", endpoint.id).after(
        json!({"since": since.to_rfc3339(), "until": until.to_rfc3339(), "events": failed.len()}),
    );
    txn.commit(change).await?;
    Ok(failed.len())
}

/// Gives the endpoint `endpoint_id` a new secret, sealed with `key`, and
/// keeps its current one signing too for `overlap` (both sign until then, so
/// that its receiver can switch without losing an event); returns the
/// endpoint and the new secret, shown this once.
pub async fn rotate_secret(
    db: &sea_orm::DatabaseConnection,
    key: Option<&WebhookSecretKey>,
    actor: &Actor,
    endpoint_id: i64,
    overlap: std::time::Duration,
) -> Result<(webhook_endpoint::Model, WebhookSecret), AdminError> {
    let overlap = Duration::from_std(overlap)
        .ok()
        .filter(|overlap| *overlap <= Duration::days(7))
        .ok_or_else(|| AdminError::Invalid("overlap", "the overlap is at most 7 days".into()))?;
    let txn = AuditedChange::begin(db, actor).await?;
    let before = webhook_endpoints::find(&*txn, endpoint_id, true).await?;
    let secret = WebhookSecret::generate();
    let at = now();
    let mut model: webhook_endpoint::ActiveModel = before.clone().into();
    model.previous_secret = Set((!overlap.is_zero()).then(|| before.secret.clone()));
    model.previous_secret_until = Set((!overlap.is_zero()).then(|| at + overlap));
    model.secret = Set(webhook_secrets::seal(&secret, key));
    model.updated_at = Set(at);
    let endpoint = model.update(&*txn).await?;
    let change = Change::new(
        "webhook_endpoint.rotate_secret",
        "webhook_endpoint",
        endpoint_id,
    )
    .after(
        json!({"previous_secret_until": endpoint.previous_secret_until.map(|t| t.to_rfc3339())}),
    );
    txn.commit(change).await?;
    Ok((endpoint, secret))
}
