//! The upkeep of outgoing events, on every backend: the ledger audit's
//! check that each order completed or cancelled while an enabled endpoint
//! of its project received that type has its event, and retention, which
//! deletes finished deliveries with their attempts and events left without
//! deliveries once old, in bounded batches, and keeps the rest.

mod common;

use chrono::{TimeDelta, Utc};
use common::{ServerProcess, TestApp};
use entity::{
    webhook_attempt::{self, AttemptOutcome},
    webhook_delivery::{self, DeliveryStatus},
    webhook_event::{self, EventType},
};
use masterpay::{
    events::new_webhook_id,
    service::{
        admin_audit::Actor,
        ledger_check,
        webhook_destination::Destinations,
        webhook_endpoints,
        webhook_events::{self, Purged},
    },
};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder,
};
use serde_json::json;

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    with_long_retention: [
        the_audit_reports_an_order_whose_event_is_missing,
        retention_deletes_old_finished_deliveries_and_events_in_bounded_batches,
        serve_runs_retention_once_at_start,
    ],
);

/// Runs `test` on a server whose own retention task keeps ten years, so
/// that it leaves the rows the test ages alone.
async fn with_long_retention<F, Fut>(backend: common::Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // No relay: a send would add attempts to the deliveries counted here.
    let app = TestApp::spawn_with(backend, |s| {
        s.webhook_retention_days = 3650;
        s.webhooks.relay_concurrency = 0;
    })
    .await;
    test(app).await
}

const PS: &str = "cstm:paygate";

async fn endpoint(app: &TestApp, types: Option<&[EventType]>) -> i64 {
    webhook_endpoints::create(
        &app.db,
        None,
        &Destinations::default(),
        &Actor::CommandLine,
        app.project_id,
        "https://hooks.example.com/masterpay",
        types,
        None,
    )
    .await
    .expect("endpoint")
    .0
    .id
}

/// Deletes the `event_type` event of `order_id` with its deliveries.
async fn delete_event(app: &TestApp, order_id: &str, event_type: EventType) {
    let event = webhook_event::Entity::find()
        .filter(webhook_event::Column::OrderId.eq(order_id))
        .filter(webhook_event::Column::EventType.eq(event_type))
        .one(&app.db)
        .await
        .unwrap()
        .expect("the event was recorded");
    webhook_delivery::Entity::delete_many()
        .filter(webhook_delivery::Column::EventId.eq(event.id))
        .exec(&app.db)
        .await
        .unwrap();
    webhook_event::Entity::delete_by_id(event.id)
        .exec(&app.db)
        .await
        .unwrap();
}

async fn findings(app: &TestApp) -> Vec<String> {
    let report = ledger_check::run(&app.db, 30).await.expect("audit");
    report.findings.into_iter().map(|f| f.0).collect()
}

async fn the_audit_reports_an_order_whose_event_is_missing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    // Completed before any endpoint existed: no event is owed.
    let before = app.order(user, None, "1.00", PS).await;
    assert_eq!(app.complete_order(&token, &before, PS).await.status, 200);

    let id = endpoint(
        &app,
        Some(&[EventType::OrderCompleted, EventType::OrderCancelled]),
    )
    .await;
    let completed = app.order(user, None, "2.00", PS).await;
    assert_eq!(app.complete_order(&token, &completed, PS).await.status, 200);
    let cancelled = app.order(user, None, "3.00", PS).await;
    assert_eq!(app.cancel_order(&token, &cancelled, PS).await.status, 200);
    assert_eq!(findings(&app).await, Vec::<String>::new());

    delete_event(&app, &completed, EventType::OrderCompleted).await;
    delete_event(&app, &cancelled, EventType::OrderCancelled).await;
    let project = app.project_id;
    assert_eq!(
        findings(&app).await,
        [
            format!(
                "order {cancelled} of project {project} has no order.cancelled event, though an \
                 enabled endpoint of its project received order.cancelled then"
            ),
            format!(
                "order {completed} of project {project} has no order.completed event, though an \
                 enabled endpoint of its project received order.completed then"
            ),
        ]
    );

    // Enabled again after a pause, the endpoint owes nothing from before:
    // the tables do not say whether it received them then.
    webhook_endpoints::set_enabled(&app.db, &Actor::CommandLine, id, false)
        .await
        .unwrap();
    webhook_endpoints::set_enabled(&app.db, &Actor::CommandLine, id, true)
        .await
        .unwrap();
    assert_eq!(findings(&app).await, Vec::<String>::new());
}

/// An event recorded `days_ago`, with a delivery to `endpoint_id` in
/// `status` (none when `None`) and `attempts` attempts.
async fn event_aged(
    app: &TestApp,
    endpoint_id: i64,
    days_ago: i64,
    status: Option<DeliveryStatus>,
    attempts: usize,
) -> i64 {
    let at = Utc::now() - TimeDelta::days(days_ago);
    let event = webhook_event::ActiveModel {
        webhook_id: Set(new_webhook_id()),
        project_id: Set(app.project_id),
        event_type: Set(EventType::WebhookTest),
        order_id: Set(None),
        payload: Set(json!({"type": "webhook.test"}).to_string()),
        created_at: Set(at),
        ..Default::default()
    }
    .insert(&app.db)
    .await
    .unwrap();
    let Some(status) = status else {
        return event.id;
    };
    let delivery = webhook_delivery::ActiveModel {
        event_id: Set(event.id),
        endpoint_id: Set(endpoint_id),
        status: Set(status),
        attempts: Set(attempts as i32),
        next_attempt_at: Set((status == DeliveryStatus::Pending).then_some(at)),
        leased_until: Set(None),
        lease_owner: Set(None),
        last_attempt_at: Set(None),
        created_at: Set(at),
        ..Default::default()
    }
    .insert(&app.db)
    .await
    .unwrap();
    for n in 0..attempts {
        webhook_attempt::ActiveModel {
            delivery_id: Set(delivery.id),
            attempted_at: Set(at + TimeDelta::minutes(n as i64)),
            duration_ms: Set(12),
            response_status: Set(Some(500)),
            outcome: Set(AttemptOutcome::HttpError),
            response_excerpt: Set("busy".to_owned()),
            next_attempt_at: Set(None),
            ..Default::default()
        }
        .insert(&app.db)
        .await
        .unwrap();
    }
    event.id
}

async fn counts(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("SELECT COUNT(*) FROM webhook_attempts").await,
        app.count("SELECT COUNT(*) FROM webhook_deliveries").await,
        app.count("SELECT COUNT(*) FROM webhook_events").await,
    )
}

async fn retention_deletes_old_finished_deliveries_and_events_in_bounded_batches(app: TestApp) {
    let to = endpoint(&app, None).await;
    event_aged(&app, to, 40, Some(DeliveryStatus::Succeeded), 3).await;
    event_aged(&app, to, 40, Some(DeliveryStatus::Failed), 1).await;
    event_aged(&app, to, 40, None, 0).await;
    let pending = event_aged(&app, to, 40, Some(DeliveryStatus::Pending), 2).await;
    let recent = event_aged(&app, to, 5, Some(DeliveryStatus::Succeeded), 1).await;
    assert_eq!(counts(&app).await, (7, 4, 5));

    // One batch deletes at most its size, of one kind at a time.
    let cutoff = webhook_events::retention_cutoff(30);
    let mut purged = Purged::default();
    assert!(
        webhook_events::purge_batch(&app.db, cutoff, 2, &mut purged)
            .await
            .unwrap()
    );
    assert_eq!(purged.attempts, 2);
    assert_eq!(counts(&app).await, (5, 4, 5));

    // The rest: 2 attempts, 2 deliveries, 3 events, 2 at a time.
    let rest = webhook_events::purge(&app.db, cutoff, 2, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        rest,
        Purged {
            attempts: 2,
            deliveries: 2,
            events: 3,
            batches: 4,
        }
    );
    // Kept: the pending delivery with its attempts and event, and what is
    // recent.
    assert_eq!(counts(&app).await, (3, 2, 2));
    let kept: Vec<i64> = webhook_event::Entity::find()
        .order_by_asc(webhook_event::Column::Id)
        .all(&app.db)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(kept, [pending, recent]);
    let again = webhook_events::purge(&app.db, cutoff, 2, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(again, Purged::default());
}

async fn serve_runs_retention_once_at_start(app: TestApp) {
    let to = endpoint(&app, None).await;
    event_aged(&app, to, 20, Some(DeliveryStatus::Failed), 2).await;
    let pending = event_aged(&app, to, 20, Some(DeliveryStatus::Pending), 1).await;
    let recent = event_aged(&app, to, 10, Some(DeliveryStatus::Succeeded), 1).await;
    assert_eq!(counts(&app).await, (4, 3, 3));
    // Its relay is off: a send to the pending delivery would add an attempt.
    let mut server = ServerProcess::start(
        &app.database.url,
        &[
            ("MASTERPAY_WEBHOOK_RETENTION_DAYS", "14"),
            ("MASTERPAY_WEBHOOK_RELAY_CONCURRENCY", "0"),
        ],
    )
    .await;
    // Polled, bounded: the run at start deletes the failed delivery of 20
    // days ago with its attempts and event.
    let mut left = counts(&app).await;
    for _ in 0..400 {
        if left == (2, 2, 2) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        left = counts(&app).await;
    }
    assert_eq!(left, (2, 2, 2), "{}", server.log());
    let kept: Vec<i64> = webhook_event::Entity::find()
        .order_by_asc(webhook_event::Column::Id)
        .all(&app.db)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(kept, [pending, recent]);
    assert!(server.terminate().success(), "{}", server.log());
}
