//! POST /v2/payment/order/complete as openapi/v2.yaml and docs/api.md
//! describe it (atomic, exactly-once completion), on every backend.

mod common;

use std::collections::HashMap;

use sea_orm::ConnectionTrait;

use common::{Backend, TestApp};
use entity::payment_order::{self, OrderStatus};
use masterpay::service::orders::{self, CompleteError, CompletedOrder, Completion};
use serde_json::{Value, json};

on_every_backend!(
    completion_sets_status_credits_main_balance_and_logs_once,
    completion_response_body_has_the_documented_fields,
    order_with_server_credits_that_servers_main_balance,
    second_completion_is_409_and_credits_nothing,
    unknown_order_is_order_not_found,
    order_of_another_project_is_order_not_found,
    other_payment_system_is_order_not_found_and_changes_nothing,
    malformed_payment_system_and_order_id_are_validation_errors,
    missing_fields_are_each_reported,
    payment_id_empty_null_and_absent_all_mean_none,
    payment_id_is_stored_for_reconciliation,
    payment_id_longer_than_255_or_not_a_string_is_validation_error,
    body_that_is_not_a_json_object_is_validation_error_under_body,
    ten_cents_thirty_times_adds_up_to_exactly_three,
    sixty_four_concurrent_identical_completes_credit_once,
    thirty_concurrent_orders_of_one_user_lose_no_credit,
    failing_status_update_is_order_update_failed_and_changes_nothing,
    failing_operation_log_is_payment_processing_error_and_rolls_back,
    credit_past_the_balance_ceiling_is_refused_for_good_and_recorded,
    operator_completes_a_refused_order_once_the_balance_allows,
    duplicate_webhooks_for_many_orders_at_once_credit_each_once,
);

fn body(order_id: &str, payment_system: &str) -> Value {
    json!({"payment_system": payment_system, "order_id": order_id})
}

async fn order_row(app: &TestApp, order_id: &str) -> payment_order::Model {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    payment_order::Entity::find()
        .filter(payment_order::Column::OrderId.eq(order_id))
        .one(&app.db)
        .await
        .unwrap()
        .expect("order exists")
}

async fn log_rows(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) FROM operation_log WHERE kind = 'order_credit'")
        .await
}

async fn completion_sets_status_credits_main_balance_and_logs_once(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.set_balance(user, None, "100", "5").await;
    let order = app.order(user, None, "10.25", "cstm:paygate").await;
    let r = app.complete_order(&token, &order, "cstm:paygate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let row = order_row(&app, &order).await;
    assert_eq!(row.status, OrderStatus::Completed);
    assert!(row.completed_at.is_some());
    assert_eq!(app.main_balance(user, 0).await.to_string(), "110.25");
    let bonus = app
        .get_balance(
            Some(&token),
            &format!("server_id=0&user_id={user}&balance_type=bonus"),
        )
        .await;
    assert_eq!(bonus.body["bonus_balance"], "5.00", "bonus untouched");
    assert_eq!(log_rows(&app).await, 1);
    let logged = app
        .count(&format!(
            "SELECT balance_after_cents - balance_before_cents FROM operation_log WHERE order_ref = {}",
            row.id
        ))
        .await;
    assert_eq!(logged, 1025);
}

async fn completion_response_body_has_the_documented_fields(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "10.25", "cstm:paygate").await;
    let r = app
        .complete(
            Some(&token),
            &json!({"payment_system": "cstm:paygate", "order_id": order, "payment_id": "pay_1"}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["success"], true);
    assert_eq!(r.body["order_id"], order.as_str());
    assert_eq!(r.body["payment_system"], "cstm:paygate");
    assert_eq!(r.body["payment_id"], "pay_1");
    assert_eq!(r.body["status"], "completed");
    assert_eq!(r.body["amount"], "10.25");
    let at = r.body["completed_at"]
        .as_str()
        .expect("completed_at string");
    let parsed = chrono::DateTime::parse_from_rfc3339(at).expect("RFC 3339");
    assert_eq!(parsed.offset().local_minus_utc(), 0, "UTC");
}

async fn order_with_server_credits_that_servers_main_balance(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Survival").await;
    let order = app.order(user, Some(server), "3.50", "cstm:paygate").await;
    assert_eq!(
        app.complete_order(&token, &order, "cstm:paygate")
            .await
            .status,
        200
    );
    assert_eq!(app.main_balance(user, server).await.to_string(), "3.50");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "0.00");
}

async fn second_completion_is_409_and_credits_nothing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    assert_eq!(
        app.complete_order(&token, &order, "cstm:paygate")
            .await
            .status,
        200
    );
    let completed_at = order_row(&app, &order).await.completed_at;
    for _ in 0..3 {
        app.complete_order(&token, &order, "cstm:paygate")
            .await
            .assert_error(409, "ORDER_ALREADY_COMPLETED");
    }
    assert_eq!(app.main_balance(user, 0).await.to_string(), "1.00");
    assert_eq!(log_rows(&app).await, 1);
    assert_eq!(order_row(&app, &order).await.completed_at, completed_at);
}

async fn unknown_order_is_order_not_found(app: TestApp) {
    let token = app.full_token().await;
    app.complete_order(&token, "Order:nosuch123", "cstm:paygate")
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
}

async fn order_of_another_project_is_order_not_found(app: TestApp) {
    let token = app.full_token().await;
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    let order = app
        .order_in(other, stranger, None, "50", "cstm:paygate")
        .await;
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
    assert_eq!(app.main_balance(stranger, 0).await.to_string(), "0.00");
}

async fn other_payment_system_is_order_not_found_and_changes_nothing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "5", "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:othergate")
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
    assert_eq!(app.main_balance(user, 0).await.to_string(), "0.00");
    assert_eq!(log_rows(&app).await, 0);
}

async fn malformed_payment_system_and_order_id_are_validation_errors(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "5", "cstm:paygate").await;
    for bad in [
        "cstm:abc",
        "cstm:Paygate",
        "cstm:pay1",
        "paygate",
        "cstm:abcdefghijklmnopqrstu",
        "",
    ] {
        app.complete(Some(&token), &body(&order, bad))
            .await
            .assert_validation(&["payment_system"]);
    }
    for bad in [
        "Order:abc",
        "Order:abcdefgh1234",
        "order:abcdefgh",
        "Order:abcd_efgh",
        "Order:abcdefgh ",
    ] {
        app.complete(Some(&token), &body(bad, "cstm:paygate"))
            .await
            .assert_validation(&["order_id"]);
    }
    app.complete(
        Some(&token),
        &json!({"payment_system": 5, "order_id": ["x"]}),
    )
    .await
    .assert_validation(&["order_id", "payment_system"]);
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
}

async fn missing_fields_are_each_reported(app: TestApp) {
    let token = app.full_token().await;
    app.complete(Some(&token), &json!({}))
        .await
        .assert_validation(&["order_id", "payment_system"]);
    app.complete(
        Some(&token),
        &json!({"payment_system": null, "order_id": "Order:abcdefgh"}),
    )
    .await
    .assert_validation(&["payment_system"]);
}

async fn payment_id_empty_null_and_absent_all_mean_none(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for payment_id in [None, Some(Value::Null), Some(json!(""))] {
        let order = app.order(user, None, "1", "cstm:paygate").await;
        let mut request = body(&order, "cstm:paygate");
        if let Some(p) = payment_id.clone() {
            request["payment_id"] = p;
        }
        let r = app.complete(Some(&token), &request).await;
        assert_eq!(r.status, 200, "{payment_id:?}: {}", r.text);
        assert_eq!(r.body["payment_id"], Value::Null);
        assert_eq!(order_row(&app, &order).await.payment_id, None);
    }
}

async fn payment_id_is_stored_for_reconciliation(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    let id = "Zahlung-ß-支付-💳-".repeat(10);
    let r = app
        .complete(
            Some(&token),
            &json!({"payment_system": "cstm:paygate", "order_id": order, "payment_id": id}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        order_row(&app, &order).await.payment_id.as_deref(),
        Some(id.as_str())
    );
}

async fn payment_id_longer_than_255_or_not_a_string_is_validation_error(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    for bad in [
        json!("x".repeat(256)),
        json!(12345),
        json!({"id": 1}),
        json!(true),
    ] {
        let mut request = body(&order, "cstm:paygate");
        request["payment_id"] = bad;
        app.complete(Some(&token), &request)
            .await
            .assert_validation(&["payment_id"]);
    }
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
}

async fn body_that_is_not_a_json_object_is_validation_error_under_body(app: TestApp) {
    let token = app.full_token().await;
    for bad in [json!([1, 2]), json!("text"), json!(null), json!(42)] {
        app.complete(Some(&token), &bad)
            .await
            .assert_validation(&["body"]);
    }
}

async fn ten_cents_thirty_times_adds_up_to_exactly_three(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for _ in 0..30 {
        let order = app.order(user, None, "0.10", "cstm:paygate").await;
        assert_eq!(
            app.complete_order(&token, &order, "cstm:paygate")
                .await
                .status,
            200
        );
    }
    let r = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(r.body["main_balance"], "3.00");
}

async fn sixty_four_concurrent_identical_completes_credit_once(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "10.25", "cstm:paygate").await;
    let replies = futures::future::join_all(
        (0..64).map(|_| app.complete_order(&token, &order, "cstm:paygate")),
    )
    .await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let conflicts = replies
        .iter()
        .filter(|r| r.status == 409 && r.code() == "ORDER_ALREADY_COMPLETED")
        .count();
    let others: Vec<_> = replies
        .iter()
        .filter(|r| r.status != 200 && r.status != 409)
        .map(|r| r.text.clone())
        .collect();
    assert_eq!((ok, conflicts), (1, 63), "unexpected: {others:?}");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "10.25");
    assert_eq!(log_rows(&app).await, 1);
}

async fn thirty_concurrent_orders_of_one_user_lose_no_credit(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Busy").await;
    let mut order_ids = Vec::new();
    for i in 0..30 {
        // Half on the general account, half on one server; no balance rows exist yet.
        let target = if i % 2 == 0 { None } else { Some(server) };
        order_ids.push(app.order(user, target, "1.01", "cstm:paygate").await);
    }
    let replies = futures::future::join_all(
        order_ids
            .iter()
            .map(|o| app.complete_order(&token, o, "cstm:paygate")),
    )
    .await;
    let failed: Vec<_> = replies
        .iter()
        .filter(|r| r.status != 200)
        .map(|r| &r.text)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "15.15");
    assert_eq!(app.main_balance(user, server).await.to_string(), "15.15");
    assert_eq!(log_rows(&app).await, 30);
}

/// Installs a trigger that makes every `event` on `table` fail.
async fn inject_failure(app: &TestApp, name: &str, event: &str, table: &str) {
    match app.backend {
        Backend::Sqlite => {
            app.exec(&format!(
                "CREATE TRIGGER {name} BEFORE {event} ON {table} BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            ))
            .await
        }
        Backend::Postgres => {
            app.exec(&format!(
                "CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql"
            ))
            .await;
            app.exec(&format!(
                "CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
            ))
            .await
        }
        Backend::MySql => {
            app.exec(&format!(
                "CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected failure'"
            ))
            .await
        }
    }
}

async fn remove_failure(app: &TestApp, name: &str, table: &str) {
    match app.backend {
        Backend::Postgres => app.exec(&format!("DROP TRIGGER {name} ON {table}")).await,
        _ => app.exec(&format!("DROP TRIGGER {name}")).await,
    }
}

async fn failing_status_update_is_order_update_failed_and_changes_nothing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "7", "cstm:paygate").await;
    inject_failure(&app, "fail_order_update", "UPDATE", "payment_orders").await;
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(500, "ORDER_UPDATE_FAILED");
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Pending);
    assert_eq!(app.main_balance(user, 0).await.to_string(), "0.00");
    assert_eq!(log_rows(&app).await, 0);
    // The failure leaves nothing half-done: a retry succeeds once the cause is gone.
    remove_failure(&app, "fail_order_update", "payment_orders").await;
    assert_eq!(
        app.complete_order(&token, &order, "cstm:paygate")
            .await
            .status,
        200
    );
    assert_eq!(app.main_balance(user, 0).await.to_string(), "7.00");
}

async fn failing_operation_log_is_payment_processing_error_and_rolls_back(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.set_balance(user, None, "1", "0").await;
    let order = app.order(user, None, "7", "cstm:paygate").await;
    inject_failure(&app, "fail_log_insert", "INSERT", "operation_log").await;
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(500, "PAYMENT_PROCESSING_ERROR");
    assert_eq!(
        order_row(&app, &order).await.status,
        OrderStatus::Pending,
        "status rolled back"
    );
    assert_eq!(
        app.main_balance(user, 0).await.to_string(),
        "1.00",
        "credit rolled back"
    );
    assert_eq!(log_rows(&app).await, 0);
    remove_failure(&app, "fail_log_insert", "operation_log").await;
    assert_eq!(
        app.complete_order(&token, &order, "cstm:paygate")
            .await
            .status,
        200
    );
    assert_eq!(app.main_balance(user, 0).await.to_string(), "8.00");
    assert_eq!(log_rows(&app).await, 1);
}

/// A credit past the largest balance kept can never succeed as it stands:
/// a final 422 (a gateway that retries every 5xx would retry for ever),
/// nothing changed, and the refusal recorded with the still pending order.
async fn credit_past_the_balance_ceiling_is_refused_for_good_and_recorded(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("whale@example.com").await;
    let server = app.server("Survival").await;
    app.set_balance(user, Some(server), "999999999999999.99", "0")
        .await;
    let order = app.order(user, Some(server), "1.00", "cstm:paygate").await;
    for _ in 0..2 {
        let r = app.complete_order(&token, &order, "cstm:paygate").await;
        r.assert_error(422, "PAYMENT_PROCESSING_ERROR");
        assert_eq!(
            r.body,
            json!({"success": false, "code": "PAYMENT_PROCESSING_ERROR"})
        );
    }
    let row = order_row(&app, &order).await;
    assert_eq!(row.status, OrderStatus::Pending);
    assert!(row.completed_at.is_none());
    assert!(row.refused_at.is_some(), "the refusal's time is recorded");
    assert_eq!(
        row.refusal.as_deref(),
        Some(orders::BALANCE_CEILING_REFUSAL)
    );
    assert_eq!(
        app.main_balance(user, server).await.to_string(),
        "999999999999999.99"
    );
    assert_eq!(log_rows(&app).await, 0);
}

/// The way out of a refusal: once the balance allows, an operator
/// completes the order (credited once, its audit row written with it), and
/// the gateway's next attempt is the ordinary duplicate.
async fn operator_completes_a_refused_order_once_the_balance_allows(app: TestApp) {
    use masterpay::service::admin_audit::Actor;
    let token = app.full_token().await;
    let user = app.user("whale@example.com").await;
    app.set_balance(user, None, "999999999999999.50", "0").await;
    let order = app.order(user, None, "1.00", "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(422, "PAYMENT_PROCESSING_ERROR");
    let (store, _) = app.recorded_store();
    let operator = Actor::CommandLine;
    let refused = orders::complete_as(&app.db, &*store, &operator, app.project_id, &order).await;
    assert!(
        matches!(refused, Err(CompleteError::BalanceCeiling)),
        "{refused:?}"
    );
    let audited = "SELECT COUNT(*) FROM admin_audit_log WHERE action = 'order.complete'";
    assert_eq!(app.count(audited).await, 0, "a refusal changes nothing");

    app.set_balance(user, None, "100.00", "0").await;
    let done = orders::complete_as(&app.db, &*store, &operator, app.project_id, &order)
        .await
        .expect("completed by the operator");
    assert_eq!(done.balance_after.to_string(), "101.00");
    assert_eq!(order_row(&app, &order).await.status, OrderStatus::Completed);
    assert_eq!(log_rows(&app).await, 1);
    assert_eq!(app.count(audited).await, 1);
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(409, "ORDER_ALREADY_COMPLETED");
    let again = orders::complete_as(&app.db, &*store, &operator, app.project_id, &order).await;
    assert!(
        matches!(again, Err(CompleteError::AlreadyCompleted)),
        "{again:?}"
    );
    assert_eq!(app.count(audited).await, 1, "no audit row without a change");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "101.00");
}

/// (balance before, balance after) of the operation-log row of `order_id`.
async fn logged_credit(app: &TestApp, order_id: &str) -> (i64, i64) {
    let sql = format!(
        "SELECT l.balance_before_cents, l.balance_after_cents FROM operation_log l \
         JOIN payment_orders p ON p.id = l.order_ref WHERE p.order_id = '{order_id}'"
    );
    let row = app
        .db
        .query_one_raw(sea_orm::Statement::from_string(app.backend_kind(), sql))
        .await
        .unwrap()
        .expect("a log row");
    (
        row.try_get_by_index(0).unwrap(),
        row.try_get_by_index(1).unwrap(),
    )
}

/// Completes `completions` through a store of the test database: on
/// PostgreSQL at once, as concurrent webhooks are, so that they wait for a
/// group together (on the test's one thread every one of them is waiting
/// before a group is taken); elsewhere, where each completion is a
/// transaction of its own, one after the other. The answers in their order,
/// and the sizes of the groups the store wrote them in.
async fn complete_at_once(
    app: &TestApp,
    completions: Vec<Completion>,
) -> (Vec<Result<CompletedOrder, CompleteError>>, Vec<usize>) {
    let (store, groups) = app.recorded_store();
    let answers = if app.backend == Backend::Postgres {
        futures::future::join_all(
            completions
                .iter()
                .map(|completion| orders::complete(&app.db, &*store, completion)),
        )
        .await
    } else {
        let mut answers = Vec::new();
        for completion in &completions {
            answers.push(orders::complete(&app.db, &*store, completion).await);
        }
        answers
    };
    let sizes = groups.completions.lock().unwrap().clone();
    (answers, sizes)
}

/// The tests of completions made at once, on the test's one thread
/// (`current_thread`; see `complete_at_once`).
mod at_once {
    use super::*;

    on_every_backend!(
        #[tokio::test]
        common::run: [
            completions_queued_together_are_credited_in_turn,
            a_failing_order_fails_alone_in_its_group,
        ],
    );
}

fn completion(app: &TestApp, order_id: &str, payment_system: &str) -> Completion {
    Completion {
        project_id: app.project_id,
        order_id: order_id.into(),
        payment_system: payment_system.into(),
        payment_id: Some(format!("pay-{order_id}")),
        audit: None,
    }
}

fn balance_after(answer: &Result<CompletedOrder, CompleteError>) -> String {
    match answer {
        Ok(done) => done.balance_after.to_string(),
        Err(err) => panic!("not completed: {err}"),
    }
}

/// Several completions queued at once, as concurrent webhooks are: on
/// PostgreSQL they are written by one statement (group commit). Each is
/// answered as if it ran alone, and two orders of one account are credited
/// one after the other, in the order they were queued.
async fn completions_queued_together_are_credited_in_turn(app: TestApp) {
    let token = app.full_token().await;
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let server = app.server("Main").await;
    app.set_balance(alice, None, "1.00", "0").await;
    let a = app.order(alice, None, "2.00", "cstm:paygate").await;
    let b = app.order(alice, None, "3.00", "cstm:paygate").await;
    let c = app.order(alice, Some(server), "4.00", "cstm:paygate").await;
    let d = app.order(bob, None, "5.00", "cstm:paygate").await;
    let done_before = app.order(bob, None, "6.00", "cstm:paygate").await;
    assert_eq!(
        app.complete_order(&token, &done_before, "cstm:paygate")
            .await
            .status,
        200
    );
    let other_system = app.order(bob, None, "7.00", "cstm:otherpay").await;

    let (answers, groups) = complete_at_once(
        &app,
        vec![
            // Sent in the order opposite to their ids, so that the credits
            // follow the arrival, not the table.
            completion(&app, &b, "cstm:paygate"),
            completion(&app, &a, "cstm:paygate"),
            completion(&app, &c, "cstm:paygate"),
            completion(&app, &d, "cstm:paygate"),
            completion(&app, "Order:NoSuchOne", "cstm:paygate"),
            completion(&app, &done_before, "cstm:paygate"),
            completion(&app, &other_system, "cstm:paygate"),
            // The same webhook twice: one completion.
            completion(&app, &a, "cstm:paygate"),
            // The same order under another payment system: not found.
            completion(&app, &a, "cstm:otherpay"),
        ],
    )
    .await;
    assert_eq!(answers.len(), 9);
    assert_eq!(balance_after(&answers[0]), "4.00");
    assert_eq!(balance_after(&answers[1]), "6.00");
    assert_eq!(balance_after(&answers[2]), "4.00");
    assert_eq!(balance_after(&answers[3]), "11.00");
    let done = answers[1].as_ref().unwrap();
    assert_eq!(
        (done.user_id, done.server_id, done.amount.to_string()),
        (alice, 0, "2.00".into())
    );
    assert_eq!(
        done.payment_id.as_deref(),
        Some(format!("pay-{a}").as_str())
    );
    assert_eq!(answers[2].as_ref().unwrap().server_id, server);
    assert!(matches!(answers[4], Err(CompleteError::OrderNotFound)));
    assert!(matches!(answers[5], Err(CompleteError::AlreadyCompleted)));
    assert!(matches!(answers[6], Err(CompleteError::OrderNotFound)));
    assert!(matches!(answers[7], Err(CompleteError::AlreadyCompleted)));
    assert!(matches!(answers[8], Err(CompleteError::OrderNotFound)));

    assert_eq!(app.main_balance(alice, 0).await.to_string(), "6.00");
    assert_eq!(app.main_balance(alice, server).await.to_string(), "4.00");
    assert_eq!(app.main_balance(bob, 0).await.to_string(), "11.00");
    assert_eq!(logged_credit(&app, &b).await, (100, 400));
    assert_eq!(logged_credit(&app, &a).await, (400, 600));
    assert_eq!(logged_credit(&app, &c).await, (0, 400));
    assert_eq!(logged_credit(&app, &d).await, (600, 1100));
    assert_eq!(log_rows(&app).await, 5);
    for (order, payment_id) in [(&a, format!("pay-{a}")), (&d, format!("pay-{d}"))] {
        let row = order_row(&app, order).await;
        assert_eq!(row.status, OrderStatus::Completed);
        assert_eq!(row.payment_id, Some(payment_id));
    }
    assert_eq!(
        order_row(&app, &other_system).await.status,
        OrderStatus::Pending
    );
    if app.backend == Backend::Postgres {
        // One transaction for the seven distinct orders; each later request
        // for an order already in it waited for it, one after the other.
        assert_eq!(groups, [7, 1, 1]);
    }
}

/// A completion that cannot be credited (the balance would pass its
/// ceiling) fails the statement it is in; the others in it are completed
/// all the same, each on its own, and the failing one changes nothing.
async fn a_failing_order_fails_alone_in_its_group(app: TestApp) {
    let whale = app.user("whale@example.com").await;
    let bob = app.user("bob@example.com").await;
    app.set_balance(whale, None, "999999999999999.99", "0")
        .await;
    let too_much = app.order(whale, None, "0.01", "cstm:paygate").await;
    let first = app.order(bob, None, "1.00", "cstm:paygate").await;
    let second = app.order(bob, None, "2.00", "cstm:paygate").await;

    let (answers, groups) = complete_at_once(
        &app,
        vec![
            completion(&app, &first, "cstm:paygate"),
            completion(&app, &too_much, "cstm:paygate"),
            completion(&app, &second, "cstm:paygate"),
        ],
    )
    .await;
    assert_eq!(balance_after(&answers[0]), "1.00");
    assert!(
        matches!(answers[1], Err(CompleteError::BalanceCeiling)),
        "{:?}",
        answers[1]
    );
    assert_eq!(balance_after(&answers[2]), "3.00");
    assert_eq!(
        order_row(&app, &too_much).await.status,
        OrderStatus::Pending
    );
    assert_eq!(
        app.main_balance(whale, 0).await.to_string(),
        "999999999999999.99"
    );
    assert_eq!(app.main_balance(bob, 0).await.to_string(), "3.00");
    assert_eq!(logged_credit(&app, &first).await, (0, 100));
    assert_eq!(logged_credit(&app, &second).await, (100, 300));
    assert_eq!(log_rows(&app).await, 2);
    if app.backend == Backend::Postgres {
        // The three were tried in one transaction, which failed at the
        // credits; then each ran alone.
        assert_eq!(groups, [3]);
    }
}

/// Gateways resend webhooks: every order of three users, sent three times
/// at once over HTTP. Each order is completed once, every other copy is
/// 409, and each account's log is one unbroken chain of credits.
async fn duplicate_webhooks_for_many_orders_at_once_credit_each_once(app: TestApp) {
    let token = app.full_token().await;
    let server = app.server("Main").await;
    let mut orders = Vec::new();
    for (n, email) in ["a@example.com", "b@example.com", "c@example.com"]
        .into_iter()
        .enumerate()
    {
        let user = app.user(email).await;
        for i in 0..8 {
            let target = if i % 2 == 0 { None } else { Some(server) };
            let amount = format!("{}.{:02}", n + 1, i + 1);
            let order = app.order(user, target, &amount, "cstm:paygate").await;
            orders.push((order, user, target.unwrap_or(0), amount));
        }
    }
    let (app_ref, token_ref) = (&app, &token);
    let replies = futures::future::join_all(
        orders
            .iter()
            .flat_map(|(order, ..)| [order, order, order])
            .map(|order| async move {
                let reply = app_ref
                    .complete_order(token_ref, order, "cstm:paygate")
                    .await;
                (order, reply)
            }),
    )
    .await;
    let mut statuses: HashMap<&String, Vec<u16>> = HashMap::new();
    for (order, reply) in &replies {
        statuses.entry(*order).or_default().push(reply.status);
        if reply.status == 409 {
            assert_eq!(reply.code(), "ORDER_ALREADY_COMPLETED");
        }
    }
    for (order, ..) in &orders {
        let mut got = statuses[order].clone();
        got.sort_unstable();
        assert_eq!(got, [200, 409, 409], "order {order}");
    }
    let mut expected: HashMap<(i64, i64), i64> = HashMap::new();
    for (order, user, account, amount) in &orders {
        let cents = amount.replace('.', "").parse::<i64>().unwrap();
        *expected.entry((*user, *account)).or_default() += cents;
        assert_eq!(order_row(&app, order).await.status, OrderStatus::Completed);
    }
    for ((user, account), total) in &expected {
        let balance = app.main_balance(*user, *account).await;
        assert_eq!(balance.cents(), *total, "user {user}, account {account}");
        // The account's log rows, by balance before: each starts where the
        // one before ended, from 0 to the final balance.
        let mut chain = Vec::new();
        for (order, u, a, _) in &orders {
            if (u, a) == (user, account) {
                chain.push(logged_credit(&app, order).await);
            }
        }
        chain.sort_unstable();
        let mut at = 0;
        for (before, after) in chain {
            assert_eq!(before, at, "user {user}, account {account}");
            at = after;
        }
        assert_eq!(at, *total);
    }
    assert_eq!(log_rows(&app).await, 24);
}
