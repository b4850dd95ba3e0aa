//! An order's life over the API besides its completion, and a user's
//! operation history, over real HTTP on every backend:
//!
//! - `POST /v2/payment/order/create`: the created order, USER_NOT_FOUND
//!   before SERVER_NOT_FOUND, every offending field named at once, and
//!   `Idempotency-Key` (a replay answers the first answer again and creates
//!   nothing, another body under the key is refused, keys are per project,
//!   and fifty requests with one key at once on two instances make one
//!   order);
//! - `GET /v2/payment/order`: the order as it stands, only in the token's
//!   project;
//! - `POST /v2/payment/order/cancel`: cancelled once, never after
//!   completion, never completed after it; and a cancellation racing a
//!   completion of the same order on two instances, for a hundred orders at
//!   once: exactly one of each pair wins and the ledger holds exactly the
//!   winning completions;
//! - `GET /v2/master-account/operations`: newest first, filtered by
//!   account, paged by `next_cursor` without skipping or repeating an entry
//!   while new ones arrive, and refusing a cursor altered or made for other
//!   parameters;
//! - the permission each of the four needs (a token with only the older
//!   permissions gains none of them);
//! - the JSON 413 reaching a client that sends a whole oversized body before
//!   it reads anything, on every POST endpoint.

mod common;

use std::{collections::HashMap, net::SocketAddr, time::Duration};

use common::{Backend, Reply, ServerProcess, TestApp};
use entity::payment_order::{self, OrderStatus};
use masterpay::{
    money::Money,
    service::{admin_audit::Actor, balances, ledger_check, tokens::Permission},
};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Statement};
use serde_json::{Value, json};

on_every_backend!(
    creation_answers_201_with_the_pending_order_and_stores_it,
    creation_names_the_user_by_email_or_by_both_and_credits_a_server_on_completion,
    a_missing_user_is_user_not_found_and_is_checked_before_the_server,
    a_missing_server_is_server_not_found,
    malformed_amounts_are_validation_errors_under_amount,
    missing_unknown_and_malformed_fields_are_each_named,
    a_body_that_is_not_a_json_object_sent_as_json_is_validation_error_under_body,
    a_malformed_idempotency_key_is_validation_error_under_its_name,
    a_replay_with_the_same_key_answers_as_the_first_time,
    a_repeat_spelled_differently_is_still_a_replay,
    the_same_key_with_another_body_is_idempotency_key_reused_and_creates_nothing,
    keys_are_per_project,
    fifty_concurrent_creates_with_one_key_on_two_instances_make_one_order,
    reading_an_order_follows_it_from_pending_to_completed,
    reading_a_missing_or_foreign_order_is_order_not_found,
    reading_with_a_missing_or_malformed_order_id_is_validation_error,
    cancelling_a_pending_order_answers_it_cancelled_and_reading_agrees,
    a_second_cancel_is_order_already_cancelled,
    cancelling_a_completed_order_is_order_already_completed_and_changes_nothing,
    completing_a_cancelled_order_is_order_cancelled_and_credits_nothing,
    cancelling_with_another_payment_system_or_in_another_project_is_order_not_found,
    malformed_cancel_bodies_are_validation_errors_naming_each_field,
    each_new_endpoint_is_access_denied_without_its_permission,
    a_token_with_only_the_older_permissions_gains_nothing,
    operations_list_every_change_newest_first_with_signed_amounts,
    operations_filter_one_account_with_server_id,
    operations_name_the_user_by_email_and_refuse_unknown_users_and_servers,
    operations_limit_defaults_to_20_and_allows_1_to_100,
    malformed_operations_parameters_are_validation_errors,
    walking_pages_with_next_cursor_yields_every_entry_once,
    entries_logged_while_paging_do_not_shift_the_walk,
    an_altered_cursor_is_validation_error_under_cursor,
    a_cursor_used_with_other_parameters_is_validation_error_under_cursor,
    keys_differing_only_in_case_are_different_keys,
    concurrent_creations_are_each_inserted_once,
    order_ids_differing_only_in_case_are_different_orders,
    cancel_and_complete_racing_on_two_instances_let_exactly_one_win_per_order,
    changes_made_through_the_api_write_no_audit_rows,
);

/// The 413 is the HTTP layer's: one backend is enough.
mod http_layer {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_client_that_sends_a_whole_oversized_body_before_reading_gets_the_json_413() {
        crate::common::run(
            crate::common::Backend::Sqlite,
            super::whole_oversized_body_sent_before_reading,
        )
        .await
    }
}

const PS: &str = "cstm:paygate";

/// Generous limits for the second instance: the races are about exactly
/// once, not latency.
const PATIENT: &[(&str, &str)] = &[
    ("MASTERPAY_REQUEST_TIMEOUT_MS", "60000"),
    ("MASTERPAY_DB_ACQUIRE_TIMEOUT_MS", "50000"),
    ("MASTERPAY_DB_STATEMENT_TIMEOUT_MS", "50000"),
    ("MASTERPAY_LOG", "warn"),
];

/// The fields of an order as create, read and cancel answer it.
const ORDER_FIELDS: [&str; 11] = [
    "amount",
    "cancelled_at",
    "completed_at",
    "created_at",
    "order_id",
    "payment_id",
    "payment_system",
    "server_id",
    "status",
    "success",
    "user_id",
];

/// The fields of one operation-history entry.
const OPERATION_FIELDS: [&str; 9] = [
    "amount",
    "balance_after",
    "balance_before",
    "balance_type",
    "created_at",
    "id",
    "kind",
    "order_id",
    "server_id",
];

/// A creation body naming the user by id.
fn creation(user: i64, server_id: i64, amount: &str) -> Value {
    json!({"user_id": user, "server_id": server_id, "amount": amount, "payment_system": PS})
}

/// `value` (an object) with the fields of `changes` set.
fn changed(value: &Value, changes: Value) -> Value {
    let mut value = value.clone();
    for (name, field) in changes.as_object().expect("changes object") {
        value[name] = field.clone();
    }
    value
}

/// Cents as the API writes an amount.
fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

fn all_but(permission: Permission) -> Vec<Permission> {
    Permission::ALL
        .into_iter()
        .filter(|p| *p != permission)
        .collect()
}

#[track_caller]
fn assert_object_fields(value: &Value, fields: &[&str]) {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, fields, "{value}");
}

/// An RFC 3339 time in UTC.
#[track_caller]
fn assert_utc_time(value: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("not a time: {value}"));
    let time = chrono::DateTime::parse_from_rfc3339(text).expect("RFC 3339");
    assert_eq!(time.offset().local_minus_utc(), 0, "UTC: {text}");
    time
}

/// `Order:` and 8 to 11 letters or digits.
#[track_caller]
fn assert_order_id(value: &Value) -> String {
    let id = value
        .as_str()
        .unwrap_or_else(|| panic!("no order id: {value}"));
    let suffix = id.strip_prefix("Order:").unwrap_or("");
    assert!(
        (8..=11).contains(&suffix.len()) && suffix.bytes().all(|b| b.is_ascii_alphanumeric()),
        "order id {id:?}"
    );
    id.to_owned()
}

async fn orders_count(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) FROM payment_orders").await
}

async fn credit_rows(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) FROM operation_log WHERE kind = 'order_credit'")
        .await
}

async fn order_row(app: &TestApp, order_id: &str) -> payment_order::Model {
    payment_order::Entity::find()
        .filter(payment_order::Column::OrderId.eq(order_id))
        .one(&app.db)
        .await
        .unwrap()
        .expect("order exists")
}

#[track_caller]
fn assert_created(reply: &Reply) -> String {
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_order_id(&reply.body["order_id"])
}

/// A POST of `body` to `path` of the instance at `base`.
async fn post(app: &TestApp, base: &str, path: &str, token: &str, body: Value) -> Reply {
    app.send(
        app.client
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .json(&body),
    )
    .await
}

// ---- POST /v2/payment/order/create ----

async fn creation_answers_201_with_the_pending_order_and_stores_it(app: TestApp) {
    let token = app.token(&[Permission::Create, Permission::Read]).await.1;
    let user = app.user("alice@example.com").await;
    let created = app
        .create_order(Some(&token), None, &creation(user, 0, "10.5"))
        .await;
    let order_id = assert_created(&created);
    assert!(
        created.content_type.starts_with("application/json"),
        "{}",
        created.content_type
    );
    assert_eq!(created.header("Idempotent-Replayed"), None);
    assert_object_fields(&created.body, &ORDER_FIELDS);
    assert_utc_time(&created.body["created_at"]);
    assert_eq!(
        created.body,
        json!({
            "success": true,
            "order_id": order_id,
            "status": "pending",
            "user_id": user,
            "server_id": 0,
            "amount": "10.50",
            "payment_system": PS,
            "payment_id": null,
            "created_at": created.body["created_at"],
            "completed_at": null,
            "cancelled_at": null,
        })
    );
    assert_eq!(orders_count(&app).await, 1);
    let row = order_row(&app, &order_id).await;
    assert_eq!(row.status, OrderStatus::Pending);
    assert_eq!((row.user_id, row.server_id), (user, None));
    assert_eq!(row.amount_cents, 1050);
    assert_eq!(row.payment_system, PS);
    // Reading it answers the same order.
    let read = app
        .read_order(Some(&token), &format!("order_id={order_id}"))
        .await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(read.body, created.body);
    // Every creation without a key makes a new order with a new id.
    let second = app
        .create_order(Some(&token), None, &creation(user, 0, "10.5"))
        .await;
    assert_ne!(assert_created(&second), order_id);
    assert_eq!(orders_count(&app).await, 2);
}

async fn creation_names_the_user_by_email_or_by_both_and_credits_a_server_on_completion(
    app: TestApp,
) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Survival").await;
    let by_email = app
        .create_order(
            Some(&token),
            None,
            &json!({"email": "Alice@Example.COM", "server_id": server, "amount": "3", "payment_system": PS}),
        )
        .await;
    let order = assert_created(&by_email);
    assert_eq!(
        (
            &by_email.body["user_id"],
            &by_email.body["server_id"],
            &by_email.body["amount"]
        ),
        (&json!(user), &json!(server), &json!("3.00"))
    );
    let by_both = app
        .create_order(
            Some(&token),
            None,
            &json!({"user_id": user, "email": "alice@example.com", "server_id": 0, "amount": "0.01", "payment_system": PS}),
        )
        .await;
    assert_created(&by_both);
    assert_eq!(by_both.body["user_id"], user);
    // An empty or null e-mail beside user_id means none.
    for email in [json!(""), Value::Null] {
        let reply = app
            .create_order(
                Some(&token),
                None,
                &changed(&creation(user, 0, "1"), json!({"email": email})),
            )
            .await;
        assert_created(&reply);
    }
    // The order's server is the account its completion credits.
    assert_eq!(app.complete_order(&token, &order, PS).await.status, 200);
    assert_eq!(app.main_balance(user, server).await.to_string(), "3.00");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "0.00");
}

async fn a_missing_user_is_user_not_found_and_is_checked_before_the_server(app: TestApp) {
    let token = app.full_token().await;
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    for body in [
        creation(999_999, 0, "1"),
        creation(stranger, 0, "1"),
        json!({"email": "nobody@example.com", "server_id": 0, "amount": "1", "payment_system": PS}),
        json!({"email": "stranger@example.com", "server_id": 0, "amount": "1", "payment_system": PS}),
        // Both given, naming two users.
        json!({"user_id": alice, "email": "bob@example.com", "server_id": 0, "amount": "1", "payment_system": PS}),
        json!({"user_id": bob, "email": "alice@example.com", "server_id": 0, "amount": "1", "payment_system": PS}),
        // Neither user nor server exists: the user is checked first.
        creation(999_999, 999_999, "1"),
    ] {
        app.create_order(Some(&token), None, &body)
            .await
            .assert_error(404, "USER_NOT_FOUND");
    }
    assert_eq!(orders_count(&app).await, 0);
}

async fn a_missing_server_is_server_not_found(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let other = app.project("Other").await;
    let foreign = app.server_in(other, "Theirs").await;
    for server in [999_999, foreign] {
        app.create_order(Some(&token), None, &creation(user, server, "1"))
            .await
            .assert_error(404, "SERVER_NOT_FOUND");
    }
    assert_eq!(orders_count(&app).await, 0);
}

async fn malformed_amounts_are_validation_errors_under_amount(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for amount in [
        json!("1e3"),
        json!("0.001"),
        json!("-1"),
        json!("0"),
        json!("0.00"),
        json!("1000000000000000"),
        json!("1."),
        json!(".5"),
        json!("+1"),
        json!("10,50"),
        json!(" 1"),
        json!(""),
        json!(12.5),
        json!(10),
        json!(null),
        json!(["1"]),
    ] {
        let body = changed(&creation(user, 0, "1"), json!({"amount": amount}));
        let reply = app.create_order(Some(&token), None, &body).await;
        assert!(reply.status == 400, "amount {amount}: {}", reply.text);
        reply.assert_validation(&["amount"]);
    }
    assert_eq!(orders_count(&app).await, 0);
    // The bounds themselves are accepted.
    for amount in ["0.01", "999999999999999.99"] {
        let reply = app
            .create_order(Some(&token), None, &creation(user, 0, amount))
            .await;
        assert_created(&reply);
        assert_eq!(reply.body["amount"], amount);
    }
}

async fn missing_unknown_and_malformed_fields_are_each_named(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let valid = creation(user, 0, "1");
    let cases = [
        (
            json!({}),
            vec!["amount", "payment_system", "server_id", "user_id"],
        ),
        // The service issues the order id: a client cannot choose it.
        (
            changed(&valid, json!({"order_id": "Order:abcdefgh", "note": "x"})),
            vec!["note", "order_id"],
        ),
        (
            json!({"user_id": 0, "email": "not-an-email", "server_id": -1, "amount": "1e3", "payment_system": "paygate", "extra": 1}),
            vec![
                "amount",
                "email",
                "extra",
                "payment_system",
                "server_id",
                "user_id",
            ],
        ),
        (
            changed(
                &valid,
                json!({"user_id": user.to_string(), "server_id": "0"}),
            ),
            vec!["server_id", "user_id"],
        ),
        (
            changed(&valid, json!({"server_id": null, "payment_system": 5})),
            vec!["payment_system", "server_id"],
        ),
        (
            changed(&valid, json!({"payment_system": "cstm:Paygate"})),
            vec!["payment_system"],
        ),
        (
            changed(&valid, json!({"user_id": null, "email": null})),
            vec!["user_id"],
        ),
    ];
    for (body, fields) in cases {
        app.create_order(Some(&token), None, &body)
            .await
            .assert_validation(&fields);
    }
    assert_eq!(orders_count(&app).await, 0);
}

async fn a_body_that_is_not_a_json_object_sent_as_json_is_validation_error_under_body(
    app: TestApp,
) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for body in [json!([1, 2]), json!("text"), json!(null), json!(42)] {
        app.create_order(Some(&token), Some("key-1"), &body)
            .await
            .assert_validation(&["body"]);
    }
    let valid = creation(user, 0, "1").to_string();
    for (content_type, body) in [
        (Some("application/json"), "{".to_owned()),
        (Some("application/json"), String::new()),
        (Some("text/plain"), valid.clone()),
        (Some("application/x-www-form-urlencoded"), valid.clone()),
        (None, valid.clone()),
    ] {
        let mut req = app
            .client
            .post(app.url("/v2/payment/order/create"))
            .bearer_auth(&token)
            .body(body.clone());
        if let Some(content_type) = content_type {
            req = req.header("Content-Type", content_type);
        }
        app.send(req).await.assert_validation(&["body"]);
    }
    assert_eq!(orders_count(&app).await, 0);
}

async fn a_malformed_idempotency_key_is_validation_error_under_its_name(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let body = creation(user, 0, "1");
    let too_long = "k".repeat(256);
    for key in [too_long.as_str(), "a b", "a\tb", ""] {
        app.create_order(Some(&token), Some(key), &body)
            .await
            .assert_validation(&["Idempotency-Key"]);
    }
    // Not ASCII, and given twice.
    let not_ascii = reqwest::header::HeaderValue::from_bytes("clé-1".as_bytes()).unwrap();
    let raw = |headers: Vec<reqwest::header::HeaderValue>| {
        let mut req = app
            .client
            .post(app.url("/v2/payment/order/create"))
            .bearer_auth(&token)
            .json(&body);
        for value in headers {
            req = req.header("Idempotency-Key", value);
        }
        req
    };
    app.send(raw(vec![not_ascii]))
        .await
        .assert_validation(&["Idempotency-Key"]);
    app.send(raw(vec![
        "key-1".parse().unwrap(),
        "key-2".parse().unwrap(),
    ]))
    .await
    .assert_validation(&["Idempotency-Key"]);
    // A bad key is named beside the body's offending fields.
    app.create_order(
        Some(&token),
        Some(&too_long),
        &changed(&body, json!({"amount": "1e3", "extra": true})),
    )
    .await
    .assert_validation(&["Idempotency-Key", "amount", "extra"]);
    assert_eq!(orders_count(&app).await, 0);
    // 255 visible ASCII characters, any of them, make a key.
    let longest: String = (b'!'..=b'~').cycle().take(255).map(char::from).collect();
    let created = app.create_order(Some(&token), Some(&longest), &body).await;
    assert_created(&created);
    let again = app.create_order(Some(&token), Some(&longest), &body).await;
    assert_eq!(
        (again.status, again.header("Idempotent-Replayed")),
        (201, Some("true"))
    );
    assert_eq!(again.body, created.body);
    assert_eq!(orders_count(&app).await, 1);
}

async fn a_replay_with_the_same_key_answers_as_the_first_time(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let body = creation(user, 0, "10.50");
    let first = app.create_order(Some(&token), Some("key-1"), &body).await;
    let order_id = assert_created(&first);
    assert_eq!(first.header("Idempotent-Replayed"), None);
    for _ in 0..3 {
        let again = app.create_order(Some(&token), Some("key-1"), &body).await;
        assert_eq!(again.status, 201, "{}", again.text);
        assert_eq!(again.body, first.body);
        assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    }
    assert_eq!(orders_count(&app).await, 1);
    // Completed since: a replay still answers the order as it was created,
    // and completing it credited it once.
    assert_eq!(app.complete_order(&token, &order_id, PS).await.status, 200);
    let later = app.create_order(Some(&token), Some("key-1"), &body).await;
    assert_eq!(later.status, 201, "{}", later.text);
    assert_eq!(later.body, first.body);
    assert_eq!(later.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(orders_count(&app).await, 1);
    assert_eq!(app.main_balance(user, 0).await.to_string(), "10.50");
    assert_eq!(credit_rows(&app).await, 1);
}

/// The same request in other JSON spelling (field order, `10.5` for
/// `10.50`, the e-mail's case, an empty field for an absent one).
async fn a_repeat_spelled_differently_is_still_a_replay(app: TestApp) {
    let token = app.full_token().await;
    app.user("alice@example.com").await;
    let first = app
        .create_order(
            Some(&token),
            Some("key-1"),
            &json!({"email": "alice@example.com", "server_id": 0, "amount": "10.50", "payment_system": PS}),
        )
        .await;
    assert_created(&first);
    for spelling in [
        r#"{"payment_system":"cstm:paygate","amount":"10.5","server_id":0,"email":"Alice@Example.COM"}"#,
        r#"{"user_id":null,"email":"ALICE@EXAMPLE.COM","server_id":0,"amount":"10.50","payment_system":"cstm:paygate"}"#,
    ] {
        let again = app
            .send(
                app.client
                    .post(app.url("/v2/payment/order/create"))
                    .bearer_auth(&token)
                    .header("Content-Type", "application/json")
                    .header("Idempotency-Key", "key-1")
                    .body(spelling),
            )
            .await;
        assert_eq!(again.status, 201, "{spelling}: {}", again.text);
        assert_eq!(again.body, first.body, "{spelling}");
    }
    assert_eq!(orders_count(&app).await, 1);
}

async fn the_same_key_with_another_body_is_idempotency_key_reused_and_creates_nothing(
    app: TestApp,
) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let server = app.server("Survival").await;
    let body = creation(user, 0, "10.50");
    let first = app
        .create_order(Some(&token), Some("order-42"), &body)
        .await;
    let order_id = assert_created(&first);
    for other in [
        creation(user, 0, "10.51"),
        creation(user, server, "10.50"),
        creation(bob, 0, "10.50"),
        changed(&body, json!({"payment_system": "cstm:othergate"})),
        // The same user, named another way: another request.
        json!({"email": "alice@example.com", "server_id": 0, "amount": "10.50", "payment_system": PS}),
    ] {
        app.create_order(Some(&token), Some("order-42"), &other)
            .await
            .assert_error(409, "IDEMPOTENCY_KEY_REUSED");
    }
    assert_eq!(orders_count(&app).await, 1);
    // The key still answers its own request.
    let again = app
        .create_order(Some(&token), Some("order-42"), &body)
        .await;
    assert_eq!(
        (again.status, again.header("Idempotent-Replayed")),
        (201, Some("true"))
    );
    assert_eq!(again.body, first.body);
    // Another key makes another order.
    for key in ["order-43", "order-42."] {
        let reply = app.create_order(Some(&token), Some(key), &body).await;
        assert_ne!(assert_created(&reply), order_id, "key {key:?}");
        assert_eq!(reply.header("Idempotent-Replayed"), None);
    }
    assert_eq!(orders_count(&app).await, 3);
}

/// A key is a string of visible ASCII compared as it is: keys that differ
/// only in case are two keys (random keys in both cases are common), with
/// the same body or with another.
async fn keys_differing_only_in_case_are_different_keys(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let body = creation(user, 0, "10.50");
    let lower = app.create_order(Some(&token), Some("k3y-ab"), &body).await;
    let lower_order = assert_created(&lower);
    for (key, body) in [
        ("K3Y-AB", body.clone()),
        ("k3Y-aB", creation(user, 0, "20.00")),
    ] {
        let reply = app.create_order(Some(&token), Some(key), &body).await;
        assert_eq!(reply.status, 201, "key {key:?}: {}", reply.text);
        assert_ne!(assert_created(&reply), lower_order, "key {key:?}");
        assert_eq!(reply.header("Idempotent-Replayed"), None, "key {key:?}");
    }
    assert_eq!(orders_count(&app).await, 3);
}

async fn order_ids_differing_only_in_case_are_different_orders(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let created = app
        .create_order(Some(&token), None, &creation(user, 0, "5"))
        .await;
    let order_id = assert_created(&created);
    let suffix = &order_id["Order:".len()..];
    let swapped: String = suffix
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    if swapped == suffix {
        return; // all digits: no other case to try
    }
    let other = format!("Order:{swapped}");
    app.read_order(Some(&token), &format!("order_id={other}"))
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
    app.complete_order(&token, &other, PS)
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "0.00");
}

async fn keys_are_per_project(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let other = app.project("Other").await;
    let (_, other_token) = app.token_in(other, &Permission::ALL).await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    let mine = app
        .create_order(Some(&token), Some("shared-key"), &creation(user, 0, "5"))
        .await;
    let my_order = assert_created(&mine);
    // The same key and body in the other project is no replay of this
    // project's order: that project has no such user.
    app.create_order(
        Some(&other_token),
        Some("shared-key"),
        &creation(user, 0, "5"),
    )
    .await
    .assert_error(404, "USER_NOT_FOUND");
    let theirs = app
        .create_order(
            Some(&other_token),
            Some("shared-key"),
            &creation(stranger, 0, "5"),
        )
        .await;
    let their_order = assert_created(&theirs);
    assert_eq!(theirs.header("Idempotent-Replayed"), None);
    assert_ne!(their_order, my_order);
    assert_eq!(theirs.body["user_id"], stranger);
    assert_eq!(orders_count(&app).await, 2);
    // Each project's key still answers its own order.
    let again = app
        .create_order(Some(&token), Some("shared-key"), &creation(user, 0, "5"))
        .await;
    assert_eq!(again.body, mine.body);
    let again = app
        .create_order(
            Some(&other_token),
            Some("shared-key"),
            &creation(stranger, 0, "5"),
        )
        .await;
    assert_eq!(again.body, theirs.body);
    assert_eq!(orders_count(&app).await, 2);
}

async fn fifty_concurrent_creates_with_one_key_on_two_instances_make_one_order(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let other = ServerProcess::start(&app.database.url, PATIENT).await;
    let body = creation(user, 0, "25.00");
    let replies = futures::future::join_all((0..50).map(|i| {
        let base = if i % 2 == 0 { &app.base } else { &other.base };
        app.create_order_at(base, Some(&token), Some("one-key"), &body)
    }))
    .await;
    let order_id = assert_created(&replies[0]);
    for reply in &replies {
        assert_eq!(reply.status, 201, "{}", reply.text);
        assert_eq!(reply.body, replies[0].body);
    }
    let replayed: Vec<Option<&str>> = replies
        .iter()
        .map(|r| r.header("Idempotent-Replayed"))
        .collect();
    assert_eq!(
        replayed.iter().filter(|h| h.is_none()).count(),
        1,
        "exactly one answer is the creation itself: {replayed:?}"
    );
    assert_eq!(
        replayed.iter().filter(|h| **h == Some("true")).count(),
        49,
        "{replayed:?}"
    );
    assert_eq!(orders_count(&app).await, 1);
    assert_eq!(
        order_row(&app, &order_id).await.status,
        OrderStatus::Pending
    );
}

// ---- GET /v2/payment/order ----

async fn reading_an_order_follows_it_from_pending_to_completed(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Survival").await;
    let created = app
        .create_order(Some(&token), None, &creation(user, server, "7.25"))
        .await;
    let order_id = assert_created(&created);
    let query = format!("order_id={order_id}");
    let pending = app.read_order(Some(&token), &query).await;
    assert_eq!(pending.status, 200, "{}", pending.text);
    assert_eq!(pending.body, created.body);
    let completion = app
        .complete(
            Some(&token),
            &json!({"order_id": order_id, "payment_system": PS, "payment_id": "pay-77"}),
        )
        .await;
    assert_eq!(completion.status, 200, "{}", completion.text);
    let completed = app.read_order(Some(&token), &query).await;
    assert_eq!(completed.status, 200, "{}", completed.text);
    assert_object_fields(&completed.body, &ORDER_FIELDS);
    assert_utc_time(&completed.body["completed_at"]);
    assert_eq!(
        completed.body,
        changed(
            &created.body,
            json!({
                "status": "completed",
                "payment_id": "pay-77",
                "completed_at": completion.body["completed_at"],
            })
        )
    );
}

async fn reading_a_missing_or_foreign_order_is_order_not_found(app: TestApp) {
    let token = app.token(&[Permission::Read]).await.1;
    let user = app.user("alice@example.com").await;
    let mine = app.order(user, None, "1", PS).await;
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    let theirs = app.order_in(other, stranger, None, "1", PS).await;
    let (_, their_token) = app.token_in(other, &[Permission::Read]).await;
    for (token, order) in [
        (&token, "Order:NoSuchOne12"),
        (&token, theirs.as_str()),
        (&their_token, mine.as_str()),
    ] {
        app.read_order(Some(token), &format!("order_id={order}"))
            .await
            .assert_error(404, "ORDER_NOT_FOUND");
    }
    let own = app
        .read_order(Some(&token), &format!("order_id={mine}"))
        .await;
    assert_eq!(own.status, 200, "{}", own.text);
}

async fn reading_with_a_missing_or_malformed_order_id_is_validation_error(app: TestApp) {
    let token = app.token(&[Permission::Read]).await.1;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", PS).await;
    for query in [
        String::new(),
        "order_id=".to_owned(),
        "order_id=Order:abc".to_owned(),
        "order_id=order:abcdefgh".to_owned(),
        "order_id=Order:abcdefgh1234".to_owned(),
        "order_id=Order:abcd_efgh".to_owned(),
        format!("order_id={order}%20"),
        format!("order_id={order}&order_id={order}"),
        format!("orderid={order}"),
    ] {
        app.read_order(Some(&token), &query)
            .await
            .assert_validation(&["order_id"]);
    }
}

// ---- POST /v2/payment/order/cancel ----

async fn cancelling_a_pending_order_answers_it_cancelled_and_reading_agrees(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let created = app
        .create_order(Some(&token), None, &creation(user, 0, "4.20"))
        .await;
    let order_id = assert_created(&created);
    let cancelled = app.cancel_order(&token, &order_id, PS).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_object_fields(&cancelled.body, &ORDER_FIELDS);
    assert_utc_time(&cancelled.body["cancelled_at"]);
    assert_eq!(
        cancelled.body,
        changed(
            &created.body,
            json!({"status": "cancelled", "cancelled_at": cancelled.body["cancelled_at"]})
        )
    );
    let read = app
        .read_order(Some(&token), &format!("order_id={order_id}"))
        .await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(read.body, cancelled.body);
    let row = order_row(&app, &order_id).await;
    assert_eq!(row.status, OrderStatus::Cancelled);
    assert!(row.cancelled_at.is_some() && row.completed_at.is_none());
}

async fn a_second_cancel_is_order_already_cancelled(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", PS).await;
    let first = app.cancel_order(&token, &order, PS).await;
    assert_eq!(first.status, 200, "{}", first.text);
    for _ in 0..2 {
        app.cancel_order(&token, &order, PS)
            .await
            .assert_error(409, "ORDER_ALREADY_CANCELLED");
    }
    // The order is as the first cancellation left it.
    let read = app
        .read_order(Some(&token), &format!("order_id={order}"))
        .await;
    assert_eq!(read.body, first.body);
}

async fn cancelling_a_completed_order_is_order_already_completed_and_changes_nothing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "6.50", PS).await;
    assert_eq!(app.complete_order(&token, &order, PS).await.status, 200);
    let before = app
        .read_order(Some(&token), &format!("order_id={order}"))
        .await;
    app.cancel_order(&token, &order, PS)
        .await
        .assert_error(409, "ORDER_ALREADY_COMPLETED");
    let after = app
        .read_order(Some(&token), &format!("order_id={order}"))
        .await;
    assert_eq!(after.body, before.body);
    assert_eq!(after.body["status"], "completed");
    assert_eq!(after.body["cancelled_at"], Value::Null);
    assert_eq!(app.main_balance(user, 0).await.to_string(), "6.50");
    assert_eq!(credit_rows(&app).await, 1);
}

async fn completing_a_cancelled_order_is_order_cancelled_and_credits_nothing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Survival").await;
    app.set_balance(user, None, "1.00", "0").await;
    let general = app.order(user, None, "5", PS).await;
    let on_server = app.order(user, Some(server), "5", PS).await;
    for order in [&general, &on_server] {
        assert_eq!(app.cancel_order(&token, order, PS).await.status, 200);
        for _ in 0..2 {
            app.complete_order(&token, order, PS)
                .await
                .assert_error(409, "ORDER_CANCELLED");
        }
        let row = order_row(&app, order).await;
        assert_eq!(row.status, OrderStatus::Cancelled);
        assert_eq!((row.completed_at, row.payment_id), (None, None));
    }
    assert_eq!(app.main_balance(user, 0).await.to_string(), "1.00");
    assert_eq!(app.main_balance(user, server).await.to_string(), "0.00");
    assert_eq!(credit_rows(&app).await, 0);
    let report = ledger_check::run(&app.db, 30).await.expect("audit");
    assert!(report.is_clean(), "{:?}", report.findings);
}

async fn cancelling_with_another_payment_system_or_in_another_project_is_order_not_found(
    app: TestApp,
) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", PS).await;
    let other = app.project("Other").await;
    let (_, their_token) = app.token_in(other, &Permission::ALL).await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    let theirs = app.order_in(other, stranger, None, "1", PS).await;
    for (token, order, payment_system) in [
        (&token, order.as_str(), "cstm:othergate"),
        (&token, "Order:NoSuchOne12", PS),
        (&token, theirs.as_str(), PS),
        (&their_token, order.as_str(), PS),
    ] {
        app.cancel_order(token, order, payment_system)
            .await
            .assert_error(404, "ORDER_NOT_FOUND");
    }
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
    assert_eq!(order_row(&app, &theirs).await.status, OrderStatus::Pending);
}

async fn malformed_cancel_bodies_are_validation_errors_naming_each_field(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", PS).await;
    let cases = [
        (json!({}), vec!["order_id", "payment_system"]),
        (
            json!({"order_id": order, "payment_system": PS, "reason": "changed my mind"}),
            vec!["reason"],
        ),
        (
            json!({"order_id": "Order:abc", "payment_system": "cstm:Pay"}),
            vec!["order_id", "payment_system"],
        ),
        (
            json!({"order_id": 5, "payment_system": null}),
            vec!["order_id", "payment_system"],
        ),
        (json!({"order_id": order}), vec!["payment_system"]),
        (json!([order, PS]), vec!["body"]),
        (json!("text"), vec!["body"]),
        (json!(null), vec!["body"]),
    ];
    for (body, fields) in cases {
        app.cancel(Some(&token), &body)
            .await
            .assert_validation(&fields);
    }
    let valid = json!({"order_id": order, "payment_system": PS}).to_string();
    for content_type in [Some("text/plain"), None] {
        let mut req = app
            .client
            .post(app.url("/v2/payment/order/cancel"))
            .bearer_auth(&token)
            .body(valid.clone());
        if let Some(content_type) = content_type {
            req = req.header("Content-Type", content_type);
        }
        app.send(req).await.assert_validation(&["body"]);
    }
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
}

/// For each of a hundred orders, one cancellation and one completion sent
/// at once, to two instances on one database (which instance gets which
/// alternates), all two hundred requests in flight together. The ledger is
/// checked first (each order's final status, its credit rows, the balances,
/// the audit), then that every answer tells what happened.
async fn cancel_and_complete_racing_on_two_instances_let_exactly_one_win_per_order(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Busy").await;
    let mut orders = Vec::new();
    for i in 0..100i64 {
        let cents = 100 + i;
        let account = if i % 2 == 0 { None } else { Some(server) };
        let order = app.order(user, account, &money(cents), PS).await;
        orders.push((order, account.unwrap_or(0), cents));
    }
    let other = ServerProcess::start(&app.database.url, PATIENT).await;
    let bases = [app.base.as_str(), other.base.as_str()];
    let body = |order: &str| json!({"order_id": order, "payment_system": PS});
    let replies =
        futures::future::join_all(orders.iter().enumerate().flat_map(|(i, (order, ..))| {
            [
                post(
                    &app,
                    bases[i % 2],
                    "/v2/payment/order/cancel",
                    &token,
                    body(order),
                ),
                post(
                    &app,
                    bases[(i + 1) % 2],
                    "/v2/payment/order/complete",
                    &token,
                    body(order),
                ),
            ]
        }))
        .await;

    // Each order ended completed with one credit row, or cancelled with none.
    let rows = app
        .db
        .query_all_raw(Statement::from_string(
            app.backend_kind(),
            "SELECT p.order_id, p.status, COUNT(l.id) FROM payment_orders p \
             LEFT JOIN operation_log l ON l.order_ref = p.id AND l.kind = 'order_credit' \
             GROUP BY p.id, p.order_id, p.status",
        ))
        .await
        .unwrap();
    let mut outcome: HashMap<String, String> = HashMap::new();
    for row in rows {
        let order: String = row.try_get_by_index(0).unwrap();
        let status: String = row.try_get_by_index(1).unwrap();
        let credits: i64 = row.try_get_by_index(2).unwrap();
        match status.as_str() {
            "completed" => assert_eq!(credits, 1, "{order}"),
            "cancelled" => assert_eq!(credits, 0, "{order}"),
            other => panic!("{order} is {other}"),
        }
        outcome.insert(order, status);
    }
    assert_eq!(outcome.len(), 100);
    // The balances hold exactly the completed orders' amounts.
    let mut expected: HashMap<i64, i64> = HashMap::new();
    for (order, account, cents) in &orders {
        if outcome[order] == "completed" {
            *expected.entry(*account).or_default() += cents;
        }
    }
    for account in [0, server] {
        assert_eq!(
            app.main_balance(user, account).await.cents(),
            expected.get(&account).copied().unwrap_or(0),
            "account {account}"
        );
    }
    let completed = outcome.values().filter(|s| *s == "completed").count();
    eprintln!(
        "{completed} completions and {} cancellations won",
        100 - completed
    );
    assert_eq!(credit_rows(&app).await, completed as i64);
    let report = ledger_check::run(&app.db, 30).await.expect("audit");
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.completed_orders, completed as i64);

    // The winner of each pair answered 200, the loser 409 with the code
    // that says who won.
    for ((order, ..), pair) in orders.iter().zip(replies.chunks(2)) {
        let (cancel, complete) = (&pair[0], &pair[1]);
        if outcome[order] == "completed" {
            assert_eq!(complete.status, 200, "{order}: {}", complete.text);
            assert_eq!(complete.body["status"], "completed", "{order}");
            cancel.assert_error(409, "ORDER_ALREADY_COMPLETED");
        } else {
            assert_eq!(cancel.status, 200, "{order}: {}", cancel.text);
            assert_eq!(cancel.body["status"], "cancelled", "{order}");
            complete.assert_error(409, "ORDER_CANCELLED");
        }
    }
}

// ---- permissions ----

async fn each_new_endpoint_is_access_denied_without_its_permission(app: TestApp) {
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", PS).await;
    let valid = creation(user, 0, "1");
    let order_query = format!("order_id={order}");
    let history_query = format!("user_id={user}");

    let without = app.token(&all_but(Permission::Create)).await.1;
    app.create_order(Some(&without), Some("key-1"), &valid)
        .await
        .assert_error(403, "ACCESS_DENIED");
    // Refused before the body is looked at.
    app.create_order(Some(&without), None, &json!({"amount": 1}))
        .await
        .assert_error(403, "ACCESS_DENIED");
    let without = app.token(&all_but(Permission::Read)).await.1;
    app.read_order(Some(&without), &order_query)
        .await
        .assert_error(403, "ACCESS_DENIED");
    app.read_order(Some(&without), "order_id=x")
        .await
        .assert_error(403, "ACCESS_DENIED");
    let without = app.token(&all_but(Permission::Cancel)).await.1;
    app.cancel_order(&without, &order, PS)
        .await
        .assert_error(403, "ACCESS_DENIED");
    let without = app.token(&all_but(Permission::Operations)).await.1;
    app.get_operations(Some(&without), &history_query)
        .await
        .assert_error(403, "ACCESS_DENIED");
    app.get_operations(Some(&without), "limit=0")
        .await
        .assert_error(403, "ACCESS_DENIED");
    assert_eq!(orders_count(&app).await, 1);
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);

    // Each permission alone opens its endpoint; the key the refused request
    // carried was not taken.
    let only = app.token(&[Permission::Create]).await.1;
    let created = app.create_order(Some(&only), Some("key-1"), &valid).await;
    assert_created(&created);
    assert_eq!(created.header("Idempotent-Replayed"), None);
    let only = app.token(&[Permission::Read]).await.1;
    assert_eq!(app.read_order(Some(&only), &order_query).await.status, 200);
    let only = app.token(&[Permission::Operations]).await.1;
    assert_eq!(
        app.get_operations(Some(&only), &history_query).await.status,
        200
    );
    let only = app.token(&[Permission::Cancel]).await.1;
    assert_eq!(app.cancel_order(&only, &order, PS).await.status, 200);
}

async fn a_token_with_only_the_older_permissions_gains_nothing(app: TestApp) {
    let old = app
        .token(&[Permission::Balance, Permission::Complete])
        .await
        .1;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "2", PS).await;
    app.create_order(Some(&old), None, &creation(user, 0, "1"))
        .await
        .assert_error(403, "ACCESS_DENIED");
    app.read_order(Some(&old), &format!("order_id={order}"))
        .await
        .assert_error(403, "ACCESS_DENIED");
    app.cancel_order(&old, &order, PS)
        .await
        .assert_error(403, "ACCESS_DENIED");
    app.get_operations(Some(&old), &format!("user_id={user}"))
        .await
        .assert_error(403, "ACCESS_DENIED");
    assert_eq!(orders_count(&app).await, 1);
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
    // What it could do, it still can.
    assert_eq!(app.complete_order(&old, &order, PS).await.status, 200);
    let balance = app
        .get_balance(Some(&old), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(balance.status, 200, "{}", balance.text);
    assert_eq!(balance.body["main_balance"], "2.00");
}

// ---- GET /v2/master-account/operations ----

/// A user with four entries of every kind, another user with one, and a
/// server.
struct History {
    token: String,
    user: i64,
    other_user: i64,
    server: i64,
    order: String,
}

/// Alice's history, oldest first: main set to 10.00; an order of 2.50
/// credited; the server's bonus set to 3.00 (its main stays 0: no entry);
/// main set to 7.50. Bob's main set to 99.00 in between.
async fn seed_history(app: &TestApp) -> History {
    let full = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let other_user = app.user("bob@example.com").await;
    let server = app.server("Survival").await;
    app.set_balance(user, None, "10", "0").await;
    let order = app.order(user, None, "2.50", PS).await;
    assert_eq!(app.complete_order(&full, &order, PS).await.status, 200);
    app.set_balance(other_user, None, "99", "0").await;
    app.set_balance(user, Some(server), "0", "3").await;
    app.set_balance(user, None, "7.50", "0").await;
    History {
        token: app.token(&[Permission::Operations]).await.1,
        user,
        other_user,
        server,
        order,
    }
}

/// The entries of a page, each without its id and time (checked apart).
fn described(page: &Reply) -> Vec<Value> {
    page.body["operations"]
        .as_array()
        .unwrap_or_else(|| panic!("no operations: {}", page.text))
        .iter()
        .map(|op| {
            let mut op = op.clone();
            let object = op.as_object_mut().unwrap();
            object.remove("id");
            object.remove("created_at");
            op
        })
        .collect()
}

fn ids(page: &Reply) -> Vec<i64> {
    page.body["operations"]
        .as_array()
        .unwrap_or_else(|| panic!("no operations: {}", page.text))
        .iter()
        .map(|op| op["id"].as_i64().expect("integer id"))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn entry(
    kind: &str,
    server_id: i64,
    balance_type: &str,
    amount: &str,
    before: &str,
    after: &str,
    order_id: Option<&str>,
) -> Value {
    json!({
        "kind": kind,
        "server_id": server_id,
        "balance_type": balance_type,
        "amount": amount,
        "balance_before": before,
        "balance_after": after,
        "order_id": order_id,
    })
}

async fn operations_list_every_change_newest_first_with_signed_amounts(app: TestApp) {
    let h = seed_history(&app).await;
    let page = app
        .get_operations(Some(&h.token), &format!("user_id={}", h.user))
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_object_fields(&page.body, &["next_cursor", "operations", "success"]);
    assert_eq!(page.body["success"], true);
    assert_eq!(page.body["next_cursor"], Value::Null);
    assert_eq!(
        described(&page),
        [
            entry("balance_set", 0, "main", "-5.00", "12.50", "7.50", None),
            entry(
                "balance_set",
                h.server,
                "bonus",
                "3.00",
                "0.00",
                "3.00",
                None
            ),
            entry(
                "order_credit",
                0,
                "main",
                "2.50",
                "10.00",
                "12.50",
                Some(&h.order)
            ),
            entry("balance_set", 0, "main", "10.00", "0.00", "10.00", None),
        ]
    );
    for op in page.body["operations"].as_array().unwrap() {
        assert_object_fields(op, &OPERATION_FIELDS);
        assert_utc_time(&op["created_at"]);
    }
    let ids = ids(&page);
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    // Bob's history is his own.
    let bob = app
        .get_operations(Some(&h.token), &format!("user_id={}", h.other_user))
        .await;
    assert_eq!(
        described(&bob),
        [entry(
            "balance_set",
            0,
            "main",
            "99.00",
            "0.00",
            "99.00",
            None
        )]
    );
}

async fn operations_filter_one_account_with_server_id(app: TestApp) {
    let h = seed_history(&app).await;
    let all = app
        .get_operations(Some(&h.token), &format!("user_id={}", h.user))
        .await;
    let all_ids = ids(&all);
    let general = app
        .get_operations(Some(&h.token), &format!("user_id={}&server_id=0", h.user))
        .await;
    assert_eq!(general.status, 200, "{}", general.text);
    assert_eq!(
        ids(&general),
        [all_ids[0], all_ids[2], all_ids[3]],
        "{}",
        general.text
    );
    let on_server = app
        .get_operations(
            Some(&h.token),
            &format!("user_id={}&server_id={}", h.user, h.server),
        )
        .await;
    assert_eq!(on_server.status, 200, "{}", on_server.text);
    assert_eq!(
        described(&on_server),
        [entry(
            "balance_set",
            h.server,
            "bonus",
            "3.00",
            "0.00",
            "3.00",
            None
        )]
    );
    // A server of the project without entries of the user: an empty page.
    let quiet = app.server("Quiet").await;
    let empty = app
        .get_operations(
            Some(&h.token),
            &format!("user_id={}&server_id={quiet}", h.user),
        )
        .await;
    assert_eq!(empty.status, 200, "{}", empty.text);
    assert_eq!(empty.body["operations"], json!([]));
    assert_eq!(empty.body["next_cursor"], Value::Null);
}

async fn operations_name_the_user_by_email_and_refuse_unknown_users_and_servers(app: TestApp) {
    let h = seed_history(&app).await;
    let by_id = app
        .get_operations(Some(&h.token), &format!("user_id={}", h.user))
        .await;
    for query in [
        "email=Alice%40Example.com".to_owned(),
        format!("user_id={}&email=alice%40example.com", h.user),
    ] {
        let reply = app.get_operations(Some(&h.token), &query).await;
        assert_eq!(reply.status, 200, "{query}: {}", reply.text);
        assert_eq!(reply.body, by_id.body, "{query}");
    }
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    let foreign_server = app.server_in(other, "Theirs").await;
    for query in [
        "user_id=999999".to_owned(),
        format!("user_id={stranger}"),
        "email=nobody%40example.com".to_owned(),
        format!("user_id={}&email=bob%40example.com", h.user),
        // The user is checked before the server.
        "user_id=999999&server_id=999999".to_owned(),
    ] {
        app.get_operations(Some(&h.token), &query)
            .await
            .assert_error(404, "USER_NOT_FOUND");
    }
    for server in [999_999, foreign_server] {
        app.get_operations(
            Some(&h.token),
            &format!("user_id={}&server_id={server}", h.user),
        )
        .await
        .assert_error(404, "SERVER_NOT_FOUND");
    }
    // A user of the project with no entries: an empty page.
    let quiet = app.user("quiet@example.com").await;
    let empty = app
        .get_operations(Some(&h.token), &format!("user_id={quiet}"))
        .await;
    assert_eq!(empty.status, 200, "{}", empty.text);
    assert_eq!(
        empty.body,
        json!({"success": true, "operations": [], "next_cursor": null})
    );
}

/// Adds `n` entries to `user`'s history, in turn an order completed on the
/// general account, the server's main balance set, an order completed on
/// the server and the general main balance set; each followed by an entry
/// of `other_user`, so that the two users' entries interleave.
async fn add_entries(app: &TestApp, full: &str, h: &History, n: usize) {
    for i in 0..n {
        let account = if i % 4 < 2 { 0 } else { h.server };
        if i % 2 == 0 {
            let server = Some(account).filter(|&a| a != 0);
            let order = app.order(h.user, server, "0.50", PS).await;
            assert_eq!(app.complete_order(full, &order, PS).await.status, 200);
        } else {
            raise_main(app, h.user, account).await;
        }
        raise_main(app, h.other_user, 0).await;
    }
}

/// Sets the main balance of `user` on `account` to one more than it is,
/// leaving the bonus balance as it is: one `balance_set` entry.
async fn raise_main(app: &TestApp, user: i64, account: i64) {
    let current = app.main_balance(user, account).await.cents();
    balances::set(
        &app.db,
        &Actor::CommandLine,
        user,
        Some(account).filter(|&a| a != 0),
        Some(Money::from_cents(current + 100).unwrap()),
        None,
        "raised by the test",
    )
    .await
    .expect("balance set");
}

/// Every page of `query` with `limit`, following `next_cursor` to the end.
async fn walk(app: &TestApp, token: &str, query: &str, limit: usize) -> Vec<Reply> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{query}&limit={limit}");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page = app.get_operations(Some(token), &url).await;
        assert_eq!(page.status, 200, "{url}: {}", page.text);
        cursor = page.body["next_cursor"].as_str().map(str::to_owned);
        pages.push(page);
        assert!(pages.len() <= 1000, "the walk does not end");
        if cursor.is_none() {
            return pages;
        }
    }
}

async fn operations_limit_defaults_to_20_and_allows_1_to_100(app: TestApp) {
    let h = seed_history(&app).await;
    let full = app.full_token().await;
    add_entries(&app, &full, &h, 21).await;
    let query = format!("user_id={}", h.user);
    let all = app
        .get_operations(Some(&h.token), &format!("{query}&limit=100"))
        .await;
    assert_eq!(ids(&all).len(), 25, "{}", all.text);
    assert_eq!(all.body["next_cursor"], Value::Null);
    let default = app.get_operations(Some(&h.token), &query).await;
    assert_eq!(ids(&default), ids(&all)[..20]);
    assert!(default.body["next_cursor"].is_string(), "{}", default.text);
    for (limit, len, more) in [
        (1, 1, true),
        (24, 24, true),
        (25, 25, false),
        (26, 25, false),
    ] {
        let page = app
            .get_operations(Some(&h.token), &format!("{query}&limit={limit}"))
            .await;
        assert_eq!(ids(&page), ids(&all)[..len], "limit {limit}");
        assert_eq!(
            page.body["next_cursor"].is_string(),
            more,
            "limit {limit}: {}",
            page.text
        );
    }
}

async fn malformed_operations_parameters_are_validation_errors(app: TestApp) {
    let h = seed_history(&app).await;
    let user = format!("user_id={}", h.user);
    let cursor = app
        .get_operations(Some(&h.token), &format!("{user}&limit=1"))
        .await
        .body["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let cases: Vec<(String, Vec<&str>)> = vec![
        (String::new(), vec!["user_id"]),
        ("limit=5".into(), vec!["user_id"]),
        ("user_id=0".into(), vec!["user_id"]),
        ("user_id=x".into(), vec!["user_id"]),
        ("email=not-an-email".into(), vec!["email"]),
        (format!("{user}&limit=0"), vec!["limit"]),
        (format!("{user}&limit=101"), vec!["limit"]),
        (format!("{user}&limit=x"), vec!["limit"]),
        (format!("{user}&limit=-1"), vec!["limit"]),
        (format!("{user}&limit=1.5"), vec!["limit"]),
        (format!("{user}&limit=1&limit=2"), vec!["limit"]),
        (format!("{user}&server_id=-1"), vec!["server_id"]),
        (format!("{user}&server_id=x"), vec!["server_id"]),
        (
            format!("{user}&cursor={cursor}&cursor={cursor}"),
            vec!["cursor"],
        ),
        (
            "user_id=0&server_id=x&limit=0".into(),
            vec!["limit", "server_id", "user_id"],
        ),
    ];
    for (query, fields) in cases {
        let reply = app.get_operations(Some(&h.token), &query).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.text);
        reply.assert_validation(&fields);
    }
}

async fn walking_pages_with_next_cursor_yields_every_entry_once(app: TestApp) {
    let h = seed_history(&app).await;
    let full = app.full_token().await;
    add_entries(&app, &full, &h, 19).await;
    for query in [
        format!("user_id={}", h.user),
        "email=alice%40example.com".to_owned(),
        format!("user_id={}&server_id=0", h.user),
        format!("user_id={}&server_id={}", h.user, h.server),
    ] {
        let all = app
            .get_operations(Some(&h.token), &format!("{query}&limit=100"))
            .await;
        let all_entries = all.body["operations"].as_array().unwrap().clone();
        assert!(all_entries.len() > 5, "{query}: {}", all.text);
        for limit in [1, 2, 5, 100] {
            let pages = walk(&app, &h.token, &query, limit).await;
            let walked: Vec<Value> = pages
                .iter()
                .flat_map(|p| p.body["operations"].as_array().unwrap().clone())
                .collect();
            assert_eq!(walked, all_entries, "{query}, limit {limit}");
            let (last, full_pages) = pages.split_last().unwrap();
            for page in full_pages {
                assert_eq!(ids(page).len(), limit, "{query}, limit {limit}");
            }
            assert!(
                (1..=limit).contains(&ids(last).len()),
                "{query}, limit {limit}"
            );
        }
    }
}

/// Entries made between page requests (they are newer than any entry of
/// the walk) never appear in it and never shift what the next page holds.
async fn entries_logged_while_paging_do_not_shift_the_walk(app: TestApp) {
    let h = seed_history(&app).await;
    let full = app.full_token().await;
    add_entries(&app, &full, &h, 10).await;
    let query = format!("user_id={}", h.user);
    let at_start = app
        .get_operations(Some(&h.token), &format!("{query}&limit=100"))
        .await;
    let at_start = at_start.body["operations"].as_array().unwrap().clone();
    assert_eq!(at_start.len(), 14);
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    let mut added = 0;
    loop {
        let mut url = format!("{query}&limit=3");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page = app.get_operations(Some(&h.token), &url).await;
        assert_eq!(page.status, 200, "{url}: {}", page.text);
        walked.extend(page.body["operations"].as_array().unwrap().clone());
        match page.body["next_cursor"].as_str() {
            None => break,
            Some(next) => cursor = Some(next.to_owned()),
        }
        assert!(walked.len() <= at_start.len(), "the walk repeats entries");
        // A completion and a balance set before the next page.
        add_entries(&app, &full, &h, 2).await;
        added += 2;
    }
    assert_eq!(walked, at_start);
    assert!(added >= 8, "entries were added while paging");
    // The new entries are there, newest first, above the old ones.
    let now = app
        .get_operations(Some(&h.token), &format!("{query}&limit=100"))
        .await;
    let now = now.body["operations"].as_array().unwrap().clone();
    assert_eq!(now.len(), at_start.len() + added);
    assert_eq!(now[added..], at_start[..]);
}

async fn an_altered_cursor_is_validation_error_under_cursor(app: TestApp) {
    let h = seed_history(&app).await;
    let query = format!("user_id={}&limit=2", h.user);
    let first = app.get_operations(Some(&h.token), &query).await;
    let cursor = first.body["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    for at in 0..cursor.len() {
        let mut altered = cursor.clone().into_bytes();
        // Another hex digit in this place.
        altered[at] = if altered[at] == b'a' { b'b' } else { b'a' };
        let altered = String::from_utf8(altered).unwrap();
        app.get_operations(Some(&h.token), &format!("{query}&cursor={altered}"))
            .await
            .assert_validation(&["cursor"]);
    }
    for bad in [
        String::new(),
        "zz".to_owned(),
        "not-a-cursor".to_owned(),
        cursor[..cursor.len() - 2].to_owned(),
        format!("{cursor}00"),
        format!("00{cursor}"),
    ] {
        app.get_operations(Some(&h.token), &format!("{query}&cursor={bad}"))
            .await
            .assert_validation(&["cursor"]);
    }
    // The cursor as given still reads the next page.
    let next = app
        .get_operations(Some(&h.token), &format!("{query}&cursor={cursor}"))
        .await;
    assert_eq!(next.status, 200, "{}", next.text);
    assert_eq!(next.body["operations"].as_array().unwrap().len(), 2);
}

async fn a_cursor_used_with_other_parameters_is_validation_error_under_cursor(app: TestApp) {
    let h = seed_history(&app).await;
    let full = app.full_token().await;
    add_entries(&app, &full, &h, 4).await;
    let page_of = |query: String| {
        let (app, token) = (&app, &h.token);
        async move {
            let page = app
                .get_operations(Some(token), &format!("{query}&limit=1"))
                .await;
            page.body["next_cursor"]
                .as_str()
                .unwrap_or_else(|| panic!("{query}: no next page: {}", page.text))
                .to_owned()
        }
    };
    let alice = format!("user_id={}", h.user);
    let every_account = page_of(alice.clone()).await;
    let general = page_of(format!("{alice}&server_id=0")).await;
    let other = app.project("Other").await;
    let (_, their_token) = app.token_in(other, &[Permission::Operations]).await;
    let cases = [
        // Another user.
        (
            &h.token,
            format!("user_id={}", h.other_user),
            &every_account,
        ),
        // The same user named by e-mail instead.
        (
            &h.token,
            "email=alice%40example.com".to_owned(),
            &every_account,
        ),
        // Another server filter, in either direction.
        (&h.token, format!("{alice}&server_id=0"), &every_account),
        (
            &h.token,
            format!("{alice}&server_id={}", h.server),
            &every_account,
        ),
        (&h.token, alice.clone(), &general),
        // Another project's token with the same parameters.
        (&their_token, alice.clone(), &every_account),
    ];
    for (token, query, cursor) in cases {
        app.get_operations(Some(token), &format!("{query}&limit=1&cursor={cursor}"))
            .await
            .assert_validation(&["cursor"]);
    }
    // With the parameters they were made for, both read on; the limit may
    // change from page to page.
    for (query, cursor) in [
        (alice.clone(), &every_account),
        (format!("{alice}&server_id=0"), &general),
    ] {
        let next = app
            .get_operations(Some(&h.token), &format!("{query}&limit=2&cursor={cursor}"))
            .await;
        assert_eq!(next.status, 200, "{query}: {}", next.text);
    }
}

// ---- the 413 of a body sent whole before reading ----

/// Reads one HTTP/1.1 response sized by Content-Length: its head and its
/// body.
async fn read_response(stream: &mut tokio::net::TcpStream) -> (String, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or_else(|| panic!("no Content-Length: {head}"));
            let body_start = end + 4;
            while buffer.len() < body_start + length {
                let n = stream.read(&mut chunk).await.expect("read the body");
                assert!(n > 0, "closed before the body ended: {head}");
                buffer.extend_from_slice(&chunk[..n]);
            }
            return (head, buffer[body_start..body_start + length].to_vec());
        }
        let n = stream
            .read(&mut chunk)
            .await
            .unwrap_or_else(|err| panic!("reading the answer failed: {err}"));
        assert!(
            n > 0,
            "the connection closed before an answer: {:?}",
            String::from_utf8_lossy(&buffer)
        );
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A client that writes a whole 2 MiB JSON body (over the 64 KiB limit,
/// within what the server drains) before it reads anything, as some HTTP
/// clients do, gets the JSON 413 on every POST endpoint, and the connection
/// serves its next request. Every other attempt keeps the client's send
/// buffer small, so that the body can only be sent while the server reads
/// it; the others use the system's buffers. Five attempts per endpoint: a
/// server that stops reading and closes makes the send or the read fail,
/// but not every time.
async fn whole_oversized_body_sent_before_reading(app: TestApp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let token = app.full_token().await;
    let address: SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let size = 2 * 1024 * 1024;
    let body = format!(
        r#"{{"pad":"{}"}}"#,
        "x".repeat(size - r#"{"pad":""}"#.len())
    );
    assert_eq!(body.len(), size);
    for path in [
        "/v2/payment/order/create",
        "/v2/payment/order/cancel",
        "/v2/payment/order/complete",
    ] {
        for attempt in 0..5 {
            let what = format!("{path}, attempt {attempt}");
            let exchange = async {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                if attempt % 2 == 0 {
                    socket.set_send_buffer_size(4096).unwrap();
                }
                let mut stream = socket.connect(address).await.unwrap();
                let head = format!(
                    "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
                     Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                stream
                    .write_all(body.as_bytes())
                    .await
                    .unwrap_or_else(|err| panic!("{what}: sending the body failed: {err}"));
                let (head, answer) = read_response(&mut stream).await;
                assert!(head.starts_with("HTTP/1.1 413 "), "{what}: {head}");
                assert!(
                    head.to_ascii_lowercase()
                        .contains("content-type: application/json"),
                    "{what}: {head}"
                );
                let answer: Value = serde_json::from_slice(&answer).expect("a JSON body");
                assert_eq!(
                    answer,
                    json!({"success": false, "code": "PAYLOAD_TOO_LARGE"}),
                    "{what}"
                );
                // The same connection serves the next request.
                let next = format!(
                    "GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
                );
                stream.write_all(next.as_bytes()).await.unwrap();
                let mut rest = Vec::new();
                stream.read_to_end(&mut rest).await.unwrap();
                let rest = String::from_utf8_lossy(&rest);
                assert!(rest.starts_with("HTTP/1.1 200 "), "{what}: {rest}");
            };
            // A bound, so that a server that stops reading fails the test
            // instead of hanging it.
            tokio::time::timeout(Duration::from_secs(60), exchange)
                .await
                .unwrap_or_else(|_| panic!("{what}: no answer within 60 s"));
        }
    }
    assert_eq!(orders_count(&app).await, 0);
}

/// Many creations at once through one store: each is inserted once, and on
/// PostgreSQL every one of them went through an insert group (the sizes the
/// groups report add up to the creations); the other backends insert each
/// alone and report no groups.
async fn concurrent_creations_are_each_inserted_once(app: TestApp) {
    use masterpay::service::{orders, users::UserRef};
    let user = app.user("alice@example.com").await;
    let (store, groups) = app.recorded_store();
    let request = |cents: i64| orders::OrderRequest {
        project_id: app.project_id,
        who: UserRef::Id(user),
        server_id: 0,
        amount: masterpay::money::Money::from_cents(cents).unwrap(),
        payment_system: PS.parse().unwrap(),
        order_id: None,
    };
    let requests: Vec<_> = (1..=64).map(request).collect();
    let created = futures::future::join_all(
        requests
            .iter()
            .map(|r| orders::create(&app.db, &*store, r, None)),
    )
    .await;
    let mut ids: Vec<String> = created
        .into_iter()
        .map(|c| c.expect("created").order.order_id.into())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 64);
    assert_eq!(orders_count(&app).await, 64);
    let grouped: usize = groups.inserts.lock().unwrap().iter().sum();
    let expected = if app.backend == Backend::Postgres {
        64
    } else {
        0
    };
    assert_eq!(grouped, expected);
}

/// The administration audit log is the panel's and the command line's:
/// orders created, completed and cancelled through the API write no row
/// of it (the orders and the operation log keep their story).
async fn changes_made_through_the_api_write_no_audit_rows(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let audited = "SELECT COUNT(*) FROM admin_audit_log";
    let before = app.count(audited).await;
    let mut orders = Vec::new();
    for n in 0..2 {
        let created = app
            .create_order(
                Some(&token),
                Some(&format!("key-{n}")),
                &creation(user, 0, "1"),
            )
            .await;
        orders.push(assert_created(&created));
    }
    assert_eq!(app.complete_order(&token, &orders[0], PS).await.status, 200);
    assert_eq!(app.cancel_order(&token, &orders[1], PS).await.status, 200);
    assert_eq!(app.count(audited).await, before);
}
