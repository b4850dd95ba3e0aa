//! Hostile input: huge numbers, unicode, SQL metacharacters, control
//! characters, slow clients. Every answer is a 4xx JSON error (or a plain
//! success for harmless input) and nothing changes.

mod common;

use std::time::Duration;

use common::{Backend, TestApp};
use serde_json::json;

on_every_backend!(
    huge_numbers_are_validation_errors,
    sql_metacharacters_are_plain_data,
    unicode_and_control_characters_are_handled,
    invalid_percent_encoding_is_validation_error,
    long_query_string_is_validation_error,
    deeply_nested_json_is_rejected_cleanly,
);

async fn tables_intact(app: &TestApp) {
    for t in [
        "projects",
        "users",
        "servers",
        "balances",
        "payment_orders",
        "app_tokens",
        "operation_log",
    ] {
        app.count(&format!("SELECT COUNT(*) FROM {t}")).await;
    }
}

async fn huge_numbers_are_validation_errors(app: TestApp) {
    let token = app.full_token().await;
    let huge = "9".repeat(400);
    app.get_balance(Some(&token), &format!("server_id={huge}&user_id=1"))
        .await
        .assert_validation(&["server_id"]);
    app.get_balance(Some(&token), &format!("server_id=0&user_id={huge}"))
        .await
        .assert_validation(&["user_id"]);
    app.get_balance(
        Some(&token),
        "server_id=9223372036854775808&user_id=-9223372036854775809",
    )
    .await
    .assert_validation(&["server_id", "user_id"]);
    app.complete(
        Some(&token),
        &json!({"payment_system": 1e308, "order_id": 12345678901234567890u64}),
    )
    .await
    .assert_validation(&["order_id", "payment_system"]);
}

async fn sql_metacharacters_are_plain_data(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("o'brien@example.com").await;
    app.set_balance(user, None, "3", "0").await;
    let r = app
        .get_balance(Some(&token), "server_id=0&email=o%27brien%40example.com")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["main_balance"], "3.00");
    app.get_balance(
        Some(&token),
        "server_id=0&email=x%27%20OR%20%271%27%3D%271%40example.com",
    )
    .await
    .assert_validation(&["email"]);
    app.get_balance(
        Some(&token),
        "server_id=0%3B%20DROP%20TABLE%20users&user_id=1",
    )
    .await
    .assert_validation(&["server_id"]);
    let order = app.order(user, None, "1", "cstm:paygate").await;
    let evil = "'; DROP TABLE users; --\\\" /* */";
    let r = app
        .complete(
            Some(&token),
            &json!({"payment_system": "cstm:paygate", "order_id": order, "payment_id": evil}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["payment_id"], evil);
    tables_intact(&app).await;
}

async fn unicode_and_control_characters_are_handled(app: TestApp) {
    let token = app.full_token().await;
    for email in [
        "%C3%BCser%40ex%C3%A4mple.com",
        "a%00b%40example.com",
        "%E2%80%AE%40example.com",
        "%F0%9F%92%B3%40%F0%9F%92%B3",
    ] {
        let r = app
            .get_balance(Some(&token), &format!("server_id=0&email={email}"))
            .await;
        assert!(
            (r.status == 400 && r.code() == "VALIDATION_ERROR")
                || (r.status == 404 && r.code() == "USER_NOT_FOUND"),
            "{email}: {} {}",
            r.status,
            r.text
        );
        assert!(r.content_type.starts_with("application/json"));
    }
    app.complete(
        Some(&token),
        &json!({"payment_system": "cstm:päygate", "order_id": "Order:ÄÖÜäöüßé"}),
    )
    .await
    .assert_validation(&["order_id", "payment_system"]);
    app.complete(
        Some(&token),
        &json!({"payment_system": "cstm:pay\u{0}gate", "order_id": "Order:abc\ndefgh"}),
    )
    .await
    .assert_validation(&["order_id", "payment_system"]);
}

async fn invalid_percent_encoding_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    for query in [
        "server_id=0&email=%FF%FE",
        "server_id=%FF&user_id=1",
        "server_id=0&user_id=%",
    ] {
        let r = app.get_balance(Some(&token), query).await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        assert_eq!(r.code(), "VALIDATION_ERROR");
    }
}

async fn long_query_string_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    let long = "a".repeat(16 * 1024);
    app.get_balance(
        Some(&token),
        &format!("server_id=0&email={long}%40example.com"),
    )
    .await
    .assert_validation(&["email"]);
    let many: String = (0..2000).map(|i| format!("&user_id={i}")).collect();
    app.get_balance(Some(&token), &format!("server_id=0{many}"))
        .await
        .assert_validation(&["user_id"]);
}

async fn deeply_nested_json_is_rejected_cleanly(app: TestApp) {
    let token = app.full_token().await;
    let nested = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    app.send(
        app.client
            .post(app.url("/v2/payment/order/complete"))
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .body(nested),
    )
    .await
    .assert_validation(&["body"]);
}

/// A client that starts a body and never finishes it gets 408 JSON, and the
/// server stays healthy. The body's 408 comes at 4/5 of the request timeout,
/// which starts earlier (before the token is checked); 3 s leaves 600 ms
/// between the two, so a stall of the test machine does not turn it into
/// the request's 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_client_body_gets_request_timeout_json() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.request_timeout = Duration::from_secs(3);
    })
    .await;
    let token = app.full_token().await;
    let first: Result<Vec<u8>, std::io::Error> = Ok(b"{\"payment_system\":".to_vec());
    let never = futures::stream::iter(vec![first]).chain(futures::stream::pending());
    let r = app
        .send(
            app.client
                .post(app.url("/v2/payment/order/complete"))
                .bearer_auth(&token)
                .header("Content-Type", "application/json")
                .body(reqwest::Body::wrap_stream(never)),
        )
        .await;
    r.assert_error(408, "REQUEST_TIMEOUT");
    let health = app.send(app.client.get(app.url("/healthz"))).await;
    assert_eq!(health.status, 200);
}

use futures::StreamExt;
