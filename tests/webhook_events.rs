//! Outgoing events as the changes record them, through the HTTP API, the
//! service functions the panel and the command line call, and two server
//! processes on one database: one event per change, with the body
//! integrators receive (an order's `data` is `GET /v2/payment/order`'s body
//! without `success`, plus its type's extras), and none for a change that
//! did not happen or a project without an enabled endpoint receiving it.

mod common;

use common::{ServerProcess, TestApp};
use entity::{
    operation_log,
    webhook_delivery::{self, DeliveryStatus},
    webhook_event::{self, EventType},
};
use masterpay::service::{admin_audit::Actor, balances, webhook_endpoints};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};

// No relay: an attempt at the endpoints' host (which does not resolve, and
// may fail at once) would change the deliveries before they are read.
on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    crate::common::run_without_relay: [
        every_change_records_one_event_with_the_body_of_what_changed,
        a_conflict_a_replay_and_a_refusal_record_no_event,
        no_event_without_an_enabled_endpoint_receiving_its_type,
        a_thousand_identical_completions_on_two_instances_record_one_event,
        an_operators_changes_on_the_command_line_record_their_events,
        serve_warns_at_start_when_webhook_secrets_are_stored_in_clear,
    ],
);

const PS: &str = "cstm:paygate";

/// An endpoint of `project_id` receiving `types` (`None`: every type).
async fn endpoint(app: &TestApp, project_id: i64, types: Option<&[EventType]>) -> i64 {
    webhook_endpoints::create(
        &app.db,
        None,
        &Default::default(),
        &Actor::CommandLine,
        project_id,
        "https://hooks.example.com/masterpay",
        types,
        None,
    )
    .await
    .expect("endpoint")
    .0
    .id
}

/// Every event recorded, in order.
async fn events(app: &TestApp) -> Vec<webhook_event::Model> {
    webhook_event::Entity::find()
        .order_by_asc(webhook_event::Column::Id)
        .all(&app.db)
        .await
        .expect("events")
}

async fn deliveries(app: &TestApp) -> Vec<webhook_delivery::Model> {
    webhook_delivery::Entity::find()
        .order_by_asc(webhook_delivery::Column::Id)
        .all(&app.db)
        .await
        .expect("deliveries")
}

fn body(event: &webhook_event::Model) -> Value {
    serde_json::from_str(&event.payload).expect("a JSON body")
}

/// `GET /v2/payment/order` of `order_id` without `success`: an order
/// event's `data` before its type's extras.
async fn order_as_read(app: &TestApp, token: &str, order_id: &str) -> Value {
    let reply = app
        .read_order(Some(token), &format!("order_id={order_id}"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let mut order = reply.body;
    order.as_object_mut().unwrap().remove("success");
    order
}

fn with(mut data: Value, extra: Value) -> Value {
    let (Value::Object(data_keys), Value::Object(extra)) = (&mut data, extra) else {
        panic!("objects")
    };
    data_keys.extend(extra);
    data
}

async fn every_change_records_one_event_with_the_body_of_what_changed(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("eu-1").await;
    let all = endpoint(&app, app.project_id, None).await;
    let completed_only = endpoint(&app, app.project_id, Some(&[EventType::OrderCompleted])).await;

    // order.created, with its Idempotency-Key.
    let created = app
        .create_order(
            Some(&token),
            Some("checkout-0001"),
            &json!({"user_id": user, "server_id": server, "amount": "10.25", "payment_system": PS}),
        )
        .await;
    assert_eq!(created.reply.status, 201, "{}", created.reply.text);
    let order_id = created.reply.body["order_id"].as_str().unwrap().to_owned();
    let recorded = events(&app).await;
    assert_eq!(recorded.len(), 1);
    let as_created = order_as_read(&app, &token, &order_id).await;
    let event = body(&recorded[0]);
    assert_eq!(event["type"], "order.created");
    assert_eq!(event["timestamp"], as_created["created_at"]);
    assert_eq!(
        event["data"],
        with(as_created, json!({"idempotency_key": "checkout-0001"}))
    );
    assert_eq!(recorded[0].order_id.as_deref(), Some(order_id.as_str()));
    let to: Vec<i64> = deliveries(&app)
        .await
        .iter()
        .map(|d| d.endpoint_id)
        .collect();
    assert_eq!(
        to,
        [all],
        "order.created goes to the endpoint of every type"
    );

    // order.completed, with the credited account.
    let reply = app.complete_order(&token, &order_id, PS).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let recorded = events(&app).await;
    assert_eq!(recorded.len(), 2);
    let as_completed = order_as_read(&app, &token, &order_id).await;
    let event = body(&recorded[1]);
    assert_eq!(event["type"], "order.completed");
    assert_eq!(event["timestamp"], as_completed["completed_at"]);
    let balance = app
        .get_balance(Some(&token), &format!("user_id={user}&server_id={server}"))
        .await;
    assert_eq!(balance.body["main_balance"], "10.25");
    assert_eq!(
        event["data"],
        with(
            as_completed,
            json!({"account": {"user_id": user, "server_id": server, "main": "10.25"}})
        )
    );
    let mut to: Vec<i64> = deliveries(&app).await[1..]
        .iter()
        .map(|d| d.endpoint_id)
        .collect();
    to.sort_unstable();
    assert_eq!(to, [all, completed_only]);

    // order.cancelled.
    let second = app.order(user, None, "3.00", PS).await;
    let reply = app.cancel_order(&token, &second, PS).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let recorded = events(&app).await;
    assert_eq!(recorded.len(), 4, "created and cancelled");
    let as_cancelled = order_as_read(&app, &token, &second).await;
    let event = body(&recorded[3]);
    assert_eq!(event["type"], "order.cancelled");
    assert_eq!(event["timestamp"], as_cancelled["cancelled_at"]);
    assert_eq!(event["data"], as_cancelled);

    // balance.set: one per balance changed, never the reason.
    balances::set(
        &app.db,
        &Actor::CommandLine,
        user,
        Some(server),
        Some("20.00".parse().unwrap()),
        Some("1.50".parse().unwrap()),
        "goodwill after an outage",
    )
    .await
    .expect("balance set");
    let recorded = events(&app).await;
    assert_eq!(recorded.len(), 6);
    let logged = operation_log::Entity::find()
        .filter(operation_log::Column::Kind.eq(operation_log::LogKind::BalanceSet))
        .order_by_asc(operation_log::Column::Id)
        .all(&app.db)
        .await
        .unwrap();
    for (event, (log, (kind, before, after))) in recorded[4..].iter().zip(
        logged
            .iter()
            .zip([("main", "10.25", "20.00"), ("bonus", "0.00", "1.50")]),
    ) {
        assert!(!event.payload.contains("goodwill"));
        let at = log.created_at.to_rfc3339();
        assert_eq!(
            body(event),
            json!({
                "type": "balance.set",
                "timestamp": at,
                "data": {
                    "user_id": user, "server_id": server, "balance_type": kind,
                    "before": before, "after": after, "operation_id": log.id, "at": at,
                },
            })
        );
        assert_eq!(event.order_id, None);
    }
    // Each event's id is its own, and every delivery waits for the relay.
    let mut ids: Vec<&str> = recorded.iter().map(|e| e.webhook_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    assert!(
        deliveries(&app)
            .await
            .iter()
            .all(|d| d.status == DeliveryStatus::Pending
                && d.attempts == 0
                && d.next_attempt_at.is_some())
    );
}

async fn a_conflict_a_replay_and_a_refusal_record_no_event(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    endpoint(&app, app.project_id, None).await;
    let create = json!({"user_id": user, "server_id": 0, "amount": "1.00", "payment_system": PS});
    let first = app
        .create_order(Some(&token), Some("checkout-0002"), &create)
        .await;
    assert_eq!(first.reply.status, 201, "{}", first.reply.text);
    let replay = app
        .create_order(Some(&token), Some("checkout-0002"), &create)
        .await;
    assert_eq!(replay.reply.status, 201, "a replay answers as the first");
    let other = json!({"user_id": user, "server_id": 0, "amount": "2.00", "payment_system": PS});
    let reused = app
        .create_order(Some(&token), Some("checkout-0002"), &other)
        .await;
    assert_eq!(reused.reply.status, 409, "{}", reused.reply.text);
    let order_id = first.reply.body["order_id"].as_str().unwrap().to_owned();
    assert_eq!(app.complete_order(&token, &order_id, PS).await.status, 200);
    app.complete_order(&token, &order_id, PS)
        .await
        .assert_error(409, "ORDER_ALREADY_COMPLETED");
    app.cancel_order(&token, &order_id, PS)
        .await
        .assert_error(409, "ORDER_ALREADY_COMPLETED");
    let types: Vec<EventType> = events(&app).await.iter().map(|e| e.event_type).collect();
    assert_eq!(types, [EventType::OrderCreated, EventType::OrderCompleted]);

    // Refused as final at the balance's ceiling: the completion's
    // transaction updated the order, then rolled back.
    app.set_balance(user, None, "999999999999999.00", "0").await;
    let too_much = app.order(user, None, "1.00", PS).await;
    app.complete_order(&token, &too_much, PS)
        .await
        .assert_error(422, "PAYMENT_PROCESSING_ERROR");
    let types: Vec<EventType> = events(&app).await.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [
            EventType::OrderCreated,
            EventType::OrderCompleted,
            EventType::BalanceSet,
            EventType::OrderCreated,
        ],
        "no order.completed for the refused order"
    );
    // A balance set refused (no such server) records nothing either.
    let refused = balances::set(
        &app.db,
        &Actor::CommandLine,
        user,
        Some(999),
        Some("1.00".parse().unwrap()),
        None,
        "refused",
    )
    .await;
    assert!(refused.is_err());
    assert_eq!(events(&app).await.len(), 4);
}

/// An order completed, another cancelled, the bonus balance set to `bonus`
/// (another amount each time).
async fn life(app: &TestApp, token: &str, user: i64, bonus: &str) {
    let order = app.order(user, None, "1.00", PS).await;
    assert_eq!(app.complete_order(token, &order, PS).await.status, 200);
    let cancelled = app.order(user, None, "1.00", PS).await;
    assert_eq!(app.cancel_order(token, &cancelled, PS).await.status, 200);
    balances::set(
        &app.db,
        &Actor::CommandLine,
        user,
        None,
        None,
        Some(bonus.parse().unwrap()),
        "test",
    )
    .await
    .expect("balance set");
}

async fn no_event_without_an_enabled_endpoint_receiving_its_type(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    // No endpoint at all; one of another project; a disabled one.
    life(&app, &token, user, "2.00").await;
    let other = app.project("Other").await;
    endpoint(&app, other, None).await;
    let disabled = endpoint(&app, app.project_id, None).await;
    webhook_endpoints::set_enabled(&app.db, &Actor::CommandLine, disabled, false)
        .await
        .unwrap();
    life(&app, &token, user, "3.00").await;
    assert!(events(&app).await.is_empty());
    // One receiving balance.set only: the orders record nothing.
    endpoint(&app, app.project_id, Some(&[EventType::BalanceSet])).await;
    life(&app, &token, user, "4.00").await;
    let types: Vec<EventType> = events(&app).await.iter().map(|e| e.event_type).collect();
    assert_eq!(types, [EventType::BalanceSet]);
    // Enabled again, the endpoint of every type receives them all.
    webhook_endpoints::set_enabled(&app.db, &Actor::CommandLine, disabled, true)
        .await
        .unwrap();
    life(&app, &token, user, "5.00").await;
    assert_eq!(events(&app).await.len(), 1 + 5);
}

async fn a_thousand_identical_completions_on_two_instances_record_one_event(app: TestApp) {
    let patient: &[(&str, &str)] = &[
        ("MASTERPAY_REQUEST_TIMEOUT_MS", "60000"),
        ("MASTERPAY_DB_ACQUIRE_TIMEOUT_MS", "50000"),
        ("MASTERPAY_DB_STATEMENT_TIMEOUT_MS", "50000"),
        ("MASTERPAY_LOG", "warn"),
    ];
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let first = endpoint(&app, app.project_id, Some(&[EventType::OrderCompleted])).await;
    let second = endpoint(&app, app.project_id, None).await;
    let order = app.order(user, None, "12.34", PS).await;
    let a = ServerProcess::start(&app.database.url, patient).await;
    let b = ServerProcess::start(&app.database.url, patient).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(600)
        .build()
        .unwrap();
    let statuses = futures::future::join_all((0..1000).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        client
            .post(format!("{base}/v2/payment/order/complete"))
            .bearer_auth(&token)
            .json(&json!({"payment_system": PS, "order_id": order}))
            .timeout(std::time::Duration::from_secs(30))
            .send()
    }))
    .await;
    let statuses: Vec<u16> = statuses
        .into_iter()
        .map(|s| s.expect("answered").status().as_u16())
        .collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let conflict = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((ok, conflict), (1, 999));
    let completed: Vec<webhook_event::Model> = events(&app)
        .await
        .into_iter()
        .filter(|e| e.event_type == EventType::OrderCompleted)
        .collect();
    assert_eq!(completed.len(), 1, "one order.completed");
    let mut to: Vec<i64> = deliveries(&app)
        .await
        .iter()
        .filter(|d| d.event_id == completed[0].id)
        .map(|d| d.endpoint_id)
        .collect();
    to.sort_unstable();
    assert_eq!(to, [first, second], "one delivery per endpoint");
}

/// Runs the `masterpay` binary with `--json` on the test's database.
fn masterpay(app: &TestApp, args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .arg("--json")
        .env("MASTERPAY_DATABASE_URL", &app.database.url)
        .env_remove("MASTERPAY_LOG")
        .env_remove("MASTERPAY_CONFIG")
        .output()
        .expect("run masterpay");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The command line's (and the panel's, which calls the same service
/// functions) creation, completion, cancellation and balance set record
/// the events the API's do, with the same bodies.
async fn an_operators_changes_on_the_command_line_record_their_events(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await.to_string();
    let project = app.project_id.to_string();
    endpoint(&app, app.project_id, None).await;
    let create = [
        "order",
        "create",
        "--project",
        &project,
        "--user",
        &user,
        "--amount",
        "7.50",
        "--payment-system",
        PS,
    ];
    let order_id = masterpay(&app, &create)["order_id"]
        .as_str()
        .expect("order id")
        .to_owned();
    let as_created = order_as_read(&app, &token, &order_id).await;
    masterpay(&app, &["order", "complete", &order_id]);
    let as_completed = order_as_read(&app, &token, &order_id).await;
    let cancelled = masterpay(&app, &create)["order_id"]
        .as_str()
        .unwrap()
        .to_owned();
    masterpay(&app, &["order", "cancel", &cancelled]);
    let as_cancelled = order_as_read(&app, &token, &cancelled).await;
    masterpay(
        &app,
        &[
            "balance", "set", "--user", &user, "--bonus", "4.00", "--reason", "operator",
        ],
    );
    let bodies: Vec<Value> = events(&app).await.iter().map(body).collect();
    let types: Vec<&str> = bodies.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "order.created",
            "order.completed",
            "order.created",
            "order.cancelled",
            "balance.set",
        ]
    );
    assert_eq!(
        bodies[0]["data"],
        with(as_created, json!({"idempotency_key": null}))
    );
    assert_eq!(
        bodies[1]["data"],
        with(
            as_completed,
            json!({"account": {"user_id": user.parse::<i64>().unwrap(), "server_id": 0, "main": "7.50"}})
        )
    );
    assert_eq!(bodies[3]["data"], as_cancelled);
    assert_eq!(
        (&bodies[4]["data"]["before"], &bodies[4]["data"]["after"]),
        (&json!("0.00"), &json!("4.00"))
    );
}

/// Without `webhook_secret_key`, `serve` says once at start that webhook
/// secrets are stored in clear; with one it says nothing of them.
async fn serve_warns_at_start_when_webhook_secrets_are_stored_in_clear(app: TestApp) {
    let warning = "webhook secrets are stored in clear";
    let log = ("MASTERPAY_LOG", "info");
    let mut clear = ServerProcess::start(&app.database.url, &[log]).await;
    clear.terminate();
    assert_eq!(clear.log().matches(warning).count(), 1, "{}", clear.log());
    let key = [
        log,
        (
            "MASTERPAY_WEBHOOK_SECRET_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        ),
    ];
    let mut sealed = ServerProcess::start(&app.database.url, &key).await;
    sealed.terminate();
    assert!(sealed.log().contains("stopped"), "{}", sealed.log());
    assert!(!sealed.log().contains(warning), "{}", sealed.log());
}
