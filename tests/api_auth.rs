//! Authentication and permissions on every backend: each refusal's code, the
//! order the checks run in (the one openapi/v2.yaml publishes: EMPTY_TOKEN,
//! INVALID_TOKEN, TOKEN_NOT_FOUND, TOKEN_DISABLED, EMPTY_ACCESS,
//! PROJECT_NOT_FOUND, NOT_FOUND, ACCESS_DENIED, then the parameters), and
//! that a token reaches only its own project. Token changes made through the service layer (what the CLI runs)
//! take effect on the very next request of the running server.

mod common;

use chrono::{TimeDelta, Utc};
use common::TestApp;
use masterpay::service::{
    AdminError,
    admin_audit::Actor,
    projects,
    tokens::{self, Permission, TokenEdit},
};
use serde_json::json;

on_every_backend!(
    missing_authorization_header_is_empty_token_on_every_endpoint,
    bearer_without_a_token_is_empty_token,
    token_whose_length_is_not_64_is_invalid_token,
    scheme_other_than_bearer_is_invalid_token,
    bearer_scheme_word_is_case_insensitive,
    unknown_token_is_token_not_found,
    disabled_token_is_token_disabled_until_enabled_again,
    deleted_token_is_token_not_found,
    reissued_token_replaces_the_old_value_at_once,
    during_a_grace_period_both_values_work_then_the_old_one_is_not_found,
    ending_the_grace_stops_the_old_value_at_once,
    a_second_reissue_ends_the_earlier_grace,
    disable_and_delete_act_on_both_values,
    an_expired_token_is_token_disabled,
    an_expiry_must_lie_ahead_and_a_grace_within_7_days,
    token_without_permissions_is_empty_access,
    inactive_project_is_project_not_found_until_enabled,
    missing_endpoint_permission_is_access_denied,
    edited_permissions_take_effect_on_the_next_request,
    checks_run_in_the_documented_order,
    unknown_v2_path_needs_a_valid_token_before_not_found,
    wrong_method_on_a_v2_endpoint_is_not_found_after_authentication,
    authentication_runs_before_parameter_validation,
    token_of_one_project_reads_and_completes_nothing_of_another,
    only_the_sha256_of_a_token_is_stored,
    use_of_a_token_is_recorded_as_last_used,
    each_value_records_its_own_last_use,
);

async fn missing_authorization_header_is_empty_token_on_every_endpoint(app: TestApp) {
    app.get_balance(None, "server_id=0&user_id=1")
        .await
        .assert_error(403, "EMPTY_TOKEN");
    app.complete(
        None,
        &json!({"payment_system": "cstm:paygate", "order_id": "Order:abcdefgh"}),
    )
    .await
    .assert_error(403, "EMPTY_TOKEN");
}

async fn bearer_without_a_token_is_empty_token(app: TestApp) {
    for header in ["", "Bearer", "Bearer ", "   "] {
        app.send(
            app.client
                .get(app.url("/v2/master-account/balance?server_id=0&user_id=1"))
                .header("Authorization", header),
        )
        .await
        .assert_error(403, "EMPTY_TOKEN");
    }
}

async fn token_whose_length_is_not_64_is_invalid_token(app: TestApp) {
    let token = app.full_token().await;
    for bad in [
        token[..63].to_owned(),
        format!("{token}a"),
        "x".to_owned(),
        "é".repeat(63),
    ] {
        app.get_balance(Some(&bad), "server_id=0&user_id=1")
            .await
            .assert_error(403, "INVALID_TOKEN");
    }
}

async fn scheme_other_than_bearer_is_invalid_token(app: TestApp) {
    let token = app.full_token().await;
    for header in [
        format!("Basic {token}"),
        format!("Token {token}"),
        token.clone(),
    ] {
        app.send(
            app.client
                .get(app.url("/v2/master-account/balance?server_id=0&user_id=1"))
                .header("Authorization", header),
        )
        .await
        .assert_error(403, "INVALID_TOKEN");
    }
}

async fn bearer_scheme_word_is_case_insensitive(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let r = app
            .send(
                app.client
                    .get(app.url(&format!(
                        "/v2/master-account/balance?server_id=0&user_id={user}"
                    )))
                    .header("Authorization", format!("{scheme} {token}")),
            )
            .await;
        assert_eq!(r.status, 200, "{scheme}: {}", r.text);
    }
}

async fn unknown_token_is_token_not_found(app: TestApp) {
    app.full_token().await;
    let unknown = "A".repeat(64);
    app.get_balance(Some(&unknown), "server_id=0&user_id=1")
        .await
        .assert_error(403, "TOKEN_NOT_FOUND");
    // 64 characters, but not letters and digits: cannot exist.
    app.get_balance(Some(&"-".repeat(64)), "server_id=0&user_id=1")
        .await
        .assert_error(403, "TOKEN_NOT_FOUND");
}

async fn disabled_token_is_token_disabled_until_enabled_again(app: TestApp) {
    let (id, token) = app.token(&Permission::ALL).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    assert_eq!(app.get_balance(Some(&token), &query).await.status, 200);
    tokens::set_active(&app.db, &Actor::CommandLine, id, false)
        .await
        .unwrap();
    app.get_balance(Some(&token), &query)
        .await
        .assert_error(403, "TOKEN_DISABLED");
    tokens::set_active(&app.db, &Actor::CommandLine, id, true)
        .await
        .unwrap();
    assert_eq!(app.get_balance(Some(&token), &query).await.status, 200);
}

async fn deleted_token_is_token_not_found(app: TestApp) {
    let (id, token) = app.token(&Permission::ALL).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    assert_eq!(app.get_balance(Some(&token), &query).await.status, 200);
    tokens::delete(&app.db, &Actor::CommandLine, id)
        .await
        .unwrap();
    app.get_balance(Some(&token), &query)
        .await
        .assert_error(403, "TOKEN_NOT_FOUND");
}

async fn reissued_token_replaces_the_old_value_at_once(app: TestApp) {
    let (id, old) = app.token(&[Permission::Balance]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    assert_eq!(app.get_balance(Some(&old), &query).await.status, 200);
    let (_, new) = tokens::reissue(&app.db, &Actor::CommandLine, id, TimeDelta::zero())
        .await
        .unwrap();
    app.get_balance(Some(&old), &query)
        .await
        .assert_error(403, "TOKEN_NOT_FOUND");
    assert_eq!(
        app.get_balance(Some(new.expose()), &query).await.status,
        200
    );
}

async fn token_without_permissions_is_empty_access(app: TestApp) {
    let (_, token) = app.token(&[]).await;
    app.get_balance(Some(&token), "server_id=0&user_id=1")
        .await
        .assert_error(403, "EMPTY_ACCESS");
    app.complete(Some(&token), &json!({}))
        .await
        .assert_error(403, "EMPTY_ACCESS");
}

async fn inactive_project_is_project_not_found_until_enabled(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    projects::set_active(&app.db, &Actor::CommandLine, app.project_id, false)
        .await
        .unwrap();
    app.get_balance(Some(&token), &query)
        .await
        .assert_error(404, "PROJECT_NOT_FOUND");
    app.complete(Some(&token), &json!({}))
        .await
        .assert_error(404, "PROJECT_NOT_FOUND");
    projects::set_active(&app.db, &Actor::CommandLine, app.project_id, true)
        .await
        .unwrap();
    assert_eq!(app.get_balance(Some(&token), &query).await.status, 200);
}

async fn missing_endpoint_permission_is_access_denied(app: TestApp) {
    let (_, balance_only) = app.token(&[Permission::Balance]).await;
    let (_, complete_only) = app.token(&[Permission::Complete]).await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    app.complete_order(&balance_only, &order, "cstm:paygate")
        .await
        .assert_error(403, "ACCESS_DENIED");
    app.get_balance(Some(&complete_only), &format!("server_id=0&user_id={user}"))
        .await
        .assert_error(403, "ACCESS_DENIED");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "0.00");
    assert_eq!(
        app.complete_order(&complete_only, &order, "cstm:paygate")
            .await
            .status,
        200
    );
}

/// `tokens::edit`, as an operator runs it. The request before it made the
/// server record the token's `last_used_at` in the background; the edit must
/// wait for that write, never fail with "database is locked" (as an edit
/// whose transaction reads before it writes does on SQLite, in about 2 of 10
/// full-suite runs).
async fn edit_token(app: &TestApp, id: i64, name: Option<&str>, permissions: &[Permission]) {
    let edit = TokenEdit {
        name,
        permissions: Some(permissions),
        ..TokenEdit::default()
    };
    tokens::edit(&app.db, &Actor::CommandLine, id, edit)
        .await
        .unwrap_or_else(|err| panic!("token edit: {err}"));
}

async fn edited_permissions_take_effect_on_the_next_request(app: TestApp) {
    let (id, token) = app.token(&[Permission::Complete]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    app.get_balance(Some(&token), &query)
        .await
        .assert_error(403, "ACCESS_DENIED");
    edit_token(&app, id, None, &[Permission::Balance]).await;
    assert_eq!(app.get_balance(Some(&token), &query).await.status, 200);
    edit_token(&app, id, Some("renamed"), &[]).await;
    app.get_balance(Some(&token), &query)
        .await
        .assert_error(403, "EMPTY_ACCESS");
}

/// When several checks fail at once, the earliest in the documented order wins.
async fn checks_run_in_the_documented_order(app: TestApp) {
    // Disabled + no permissions + inactive project: TOKEN_DISABLED.
    let (id, token) = app.token(&[]).await;
    tokens::set_active(&app.db, &Actor::CommandLine, id, false)
        .await
        .unwrap();
    projects::set_active(&app.db, &Actor::CommandLine, app.project_id, false)
        .await
        .unwrap();
    app.get_balance(Some(&token), "server_id=-1")
        .await
        .assert_error(403, "TOKEN_DISABLED");
    // Active, no permissions, inactive project: EMPTY_ACCESS before PROJECT_NOT_FOUND.
    tokens::set_active(&app.db, &Actor::CommandLine, id, true)
        .await
        .unwrap();
    app.get_balance(Some(&token), "server_id=-1")
        .await
        .assert_error(403, "EMPTY_ACCESS");
    // Inactive project, wrong permission, unknown path: PROJECT_NOT_FOUND first.
    let edit = TokenEdit {
        permissions: Some(&[Permission::Complete]),
        ..TokenEdit::default()
    };
    tokens::edit(&app.db, &Actor::CommandLine, id, edit)
        .await
        .unwrap();
    app.get_balance(Some(&token), "server_id=-1")
        .await
        .assert_error(404, "PROJECT_NOT_FOUND");
    app.send(app.client.get(app.url("/v2/nothing")).bearer_auth(&token))
        .await
        .assert_error(404, "PROJECT_NOT_FOUND");
    // Active project: NOT_FOUND (path) before ACCESS_DENIED, ACCESS_DENIED before validation.
    projects::set_active(&app.db, &Actor::CommandLine, app.project_id, true)
        .await
        .unwrap();
    app.send(app.client.get(app.url("/v2/nothing")).bearer_auth(&token))
        .await
        .assert_error(404, "NOT_FOUND");
    app.get_balance(Some(&token), "server_id=-1")
        .await
        .assert_error(403, "ACCESS_DENIED");
}

async fn unknown_v2_path_needs_a_valid_token_before_not_found(app: TestApp) {
    let token = app.full_token().await;
    for path in [
        "/v2/nothing",
        "/v2/",
        "/v2",
        "/v2/master-account/balance/extra",
        "/v2/payment/order/read",
    ] {
        app.send(app.client.get(app.url(path)))
            .await
            .assert_error(403, "EMPTY_TOKEN");
        app.send(app.client.get(app.url(path)).bearer_auth("short"))
            .await
            .assert_error(403, "INVALID_TOKEN");
        app.send(app.client.get(app.url(path)).bearer_auth(&token))
            .await
            .assert_error(404, "NOT_FOUND");
    }
}

async fn wrong_method_on_a_v2_endpoint_is_not_found_after_authentication(app: TestApp) {
    let token = app.full_token().await;
    let cases = [
        app.client
            .post(app.url("/v2/master-account/balance?server_id=0&user_id=1")),
        app.client.delete(app.url("/v2/master-account/balance")),
        app.client.get(app.url("/v2/payment/order/complete")),
        app.client.put(app.url("/v2/payment/order/complete")),
    ];
    for req in cases {
        let without = req.try_clone().unwrap();
        app.send(without).await.assert_error(403, "EMPTY_TOKEN");
        app.send(req.bearer_auth(&token))
            .await
            .assert_error(404, "NOT_FOUND");
    }
}

async fn authentication_runs_before_parameter_validation(app: TestApp) {
    app.get_balance(None, "server_id=-1&email=bad")
        .await
        .assert_error(403, "EMPTY_TOKEN");
    app.send(
        app.client
            .post(app.url("/v2/payment/order/complete"))
            .header("Content-Type", "text/plain")
            .body("not json"),
    )
    .await
    .assert_error(403, "EMPTY_TOKEN");
    let (_, balance_only) = app.token(&[Permission::Balance]).await;
    app.send(
        app.client
            .post(app.url("/v2/payment/order/complete"))
            .bearer_auth(&balance_only)
            .header("Content-Type", "text/plain")
            .body("not json"),
    )
    .await
    .assert_error(403, "ACCESS_DENIED");
}

async fn token_of_one_project_reads_and_completes_nothing_of_another(app: TestApp) {
    let other = app.project("Other").await;
    let (_, foreign_token) = app.token_in(other, &Permission::ALL).await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Ours").await;
    app.set_balance(user, None, "50", "0").await;
    let order = app.order(user, None, "5", "cstm:paygate").await;
    app.get_balance(Some(&foreign_token), &format!("server_id=0&user_id={user}"))
        .await
        .assert_error(404, "USER_NOT_FOUND");
    app.get_balance(Some(&foreign_token), "server_id=0&email=alice@example.com")
        .await
        .assert_error(404, "USER_NOT_FOUND");
    let theirs = app.user_in(other, "bob@example.com").await;
    app.get_balance(
        Some(&foreign_token),
        &format!("server_id={server}&user_id={theirs}"),
    )
    .await
    .assert_error(404, "SERVER_NOT_FOUND");
    app.complete_order(&foreign_token, &order, "cstm:paygate")
        .await
        .assert_error(404, "ORDER_NOT_FOUND");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "50.00");
}

async fn only_the_sha256_of_a_token_is_stored(app: TestApp) {
    let (id, token) = app.token(&Permission::ALL).await;
    let stored = entity::app_token::Entity::find_by_id(id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.token_hash, tokens::hash(&token));
    assert_eq!(stored.token_hash.len(), 64);
    assert_ne!(stored.token_hash, token);
    assert!(
        !format!("{stored:?}").contains(&stored.token_hash),
        "Debug redacts the hash"
    );
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_alphanumeric()));
}

async fn use_of_a_token_is_recorded_as_last_used(app: TestApp) {
    let (id, token) = app.token(&Permission::ALL).await;
    let user = app.user("alice@example.com").await;
    assert_eq!(
        app.get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
            .await
            .status,
        200
    );
    // Recorded off the request path: poll until it lands (bounded, not timed).
    let mut recorded = false;
    for _ in 0..3000 {
        let row = entity::app_token::Entity::find_by_id(id)
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        if row.last_used_at.is_some() {
            recorded = true;
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(recorded, "last_used_at was never recorded");
}

use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait};

/// Status and error code of a balance request made with `token`.
async fn answer(app: &TestApp, token: &str, query: &str) -> (u16, Option<String>) {
    let response = app.get_balance(Some(token), query).await;
    let code = response.body["code"].as_str().map(str::to_owned);
    (response.status, code)
}

const OK: (u16, Option<String>) = (200, None);

fn refused(status: u16, code: &str) -> (u16, Option<String>) {
    (status, Some(code.to_owned()))
}

/// Reissues the token `id` with `grace`; returns the new value.
async fn reissue(app: &TestApp, id: i64, grace: TimeDelta) -> String {
    let (_, value) = tokens::reissue(&app.db, &Actor::CommandLine, id, grace)
        .await
        .unwrap();
    value.expose().to_owned()
}

/// Moves a column of the token `id` to the past, as the clock would: the
/// service refuses to set a past time itself.
async fn age_token(app: &TestApp, id: i64, set: impl FnOnce(&mut entity::app_token::ActiveModel)) {
    let row = entity::app_token::Entity::find_by_id(id)
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let mut model: entity::app_token::ActiveModel = row.into();
    set(&mut model);
    model.update(&app.db).await.unwrap();
}

async fn during_a_grace_period_both_values_work_then_the_old_one_is_not_found(app: TestApp) {
    let (id, old) = app.token(&[Permission::Balance]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let new = reissue(&app, id, TimeDelta::hours(1)).await;
    assert_eq!(answer(&app, &old, &query).await, OK);
    assert_eq!(answer(&app, &new, &query).await, OK);
    let stored = tokens::get_info(&app.db, id).await.unwrap().token;
    assert_eq!(stored.last4.as_deref(), Some(&new[60..]));
    assert_eq!(stored.previous_last4.as_deref(), Some(&old[60..]));
    age_token(&app, id, |t| {
        t.previous_until = Set(Some(Utc::now() - TimeDelta::seconds(1)));
    })
    .await;
    assert_eq!(
        answer(&app, &old, &query).await,
        refused(403, "TOKEN_NOT_FOUND")
    );
    assert_eq!(answer(&app, &new, &query).await, OK);
}

async fn ending_the_grace_stops_the_old_value_at_once(app: TestApp) {
    let (id, old) = app.token(&[Permission::Balance]).await;
    let query = "server_id=0&user_id=1";
    let new = reissue(&app, id, TimeDelta::days(7)).await;
    assert_ne!(
        answer(&app, &old, query).await.1.as_deref(),
        Some("TOKEN_NOT_FOUND")
    );
    tokens::end_grace(&app.db, &Actor::CommandLine, id)
        .await
        .unwrap();
    assert_eq!(
        answer(&app, &old, query).await,
        refused(403, "TOKEN_NOT_FOUND")
    );
    assert_ne!(
        answer(&app, &new, query).await.1.as_deref(),
        Some("TOKEN_NOT_FOUND")
    );
}

async fn a_second_reissue_ends_the_earlier_grace(app: TestApp) {
    let (id, first) = app.token(&[Permission::Balance]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let second = reissue(&app, id, TimeDelta::hours(24)).await;
    let third = reissue(&app, id, TimeDelta::hours(24)).await;
    assert_eq!(
        answer(&app, &first, &query).await,
        refused(403, "TOKEN_NOT_FOUND")
    );
    assert_eq!(answer(&app, &second, &query).await, OK);
    assert_eq!(answer(&app, &third, &query).await, OK);
    // Without a grace, the value before stops at once too.
    let fourth = reissue(&app, id, TimeDelta::zero()).await;
    for gone in [&second, &third] {
        assert_eq!(
            answer(&app, gone, &query).await,
            refused(403, "TOKEN_NOT_FOUND")
        );
    }
    assert_eq!(answer(&app, &fourth, &query).await, OK);
}

async fn disable_and_delete_act_on_both_values(app: TestApp) {
    let (id, old) = app.token(&[Permission::Balance]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let new = reissue(&app, id, TimeDelta::hours(1)).await;
    tokens::set_active(&app.db, &Actor::CommandLine, id, false)
        .await
        .unwrap();
    for value in [&old, &new] {
        assert_eq!(
            answer(&app, value, &query).await,
            refused(403, "TOKEN_DISABLED")
        );
    }
    tokens::set_active(&app.db, &Actor::CommandLine, id, true)
        .await
        .unwrap();
    for value in [&old, &new] {
        assert_eq!(answer(&app, value, &query).await, OK);
    }
    tokens::delete(&app.db, &Actor::CommandLine, id)
        .await
        .unwrap();
    for value in [&old, &new] {
        assert_eq!(
            answer(&app, value, &query).await,
            refused(403, "TOKEN_NOT_FOUND")
        );
    }
}

async fn an_expired_token_is_token_disabled(app: TestApp) {
    let (id, token) = app.token(&[Permission::Balance]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let edit = |expires_at| TokenEdit {
        expires_at: Some(expires_at),
        ..TokenEdit::default()
    };
    tokens::edit(
        &app.db,
        &Actor::CommandLine,
        id,
        edit(Some(Utc::now() + TimeDelta::hours(1))),
    )
    .await
    .unwrap();
    assert_eq!(answer(&app, &token, &query).await, OK);
    age_token(&app, id, |t| {
        t.expires_at = Set(Some(Utc::now() - TimeDelta::seconds(1)));
    })
    .await;
    assert_eq!(
        answer(&app, &token, &query).await,
        refused(403, "TOKEN_DISABLED")
    );
    // A grace value of an expired token is refused alike.
    let new = reissue(&app, id, TimeDelta::hours(1)).await;
    for value in [&token, &new] {
        assert_eq!(
            answer(&app, value, &query).await,
            refused(403, "TOKEN_DISABLED")
        );
    }
    tokens::edit(&app.db, &Actor::CommandLine, id, edit(None))
        .await
        .unwrap();
    assert_eq!(answer(&app, &new, &query).await, OK);
}

async fn an_expiry_must_lie_ahead_and_a_grace_within_7_days(app: TestApp) {
    let (id, _) = app.token(&[Permission::Balance]).await;
    let past = Some(Utc::now() - TimeDelta::minutes(1));
    let edit = TokenEdit {
        expires_at: Some(past),
        ..TokenEdit::default()
    };
    let err = tokens::edit(&app.db, &Actor::CommandLine, id, edit)
        .await
        .unwrap_err();
    assert!(
        matches!(err, AdminError::Invalid("expires_at", _)),
        "{err:?}"
    );
    let err = tokens::create(
        &app.db,
        &Actor::CommandLine,
        app.project_id,
        "late",
        None,
        &[Permission::Balance],
        past,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, AdminError::Invalid("expires_at", _)),
        "{err:?}"
    );
    for grace in [
        TimeDelta::days(7) + TimeDelta::seconds(1),
        TimeDelta::seconds(-1),
    ] {
        let err = tokens::reissue(&app.db, &Actor::CommandLine, id, grace)
            .await
            .unwrap_err();
        assert!(matches!(err, AdminError::Invalid("grace", _)), "{err:?}");
    }
    let stored = tokens::get_info(&app.db, id).await.unwrap().token;
    assert_eq!(stored.expires_at, None);
    assert_eq!(stored.previous_hash, None);
}

/// Polls (bounded, not timed) until `done` holds of the token `id`'s row.
async fn until_token(
    app: &TestApp,
    id: i64,
    done: impl Fn(&entity::app_token::Model) -> bool,
) -> bool {
    for _ in 0..3000 {
        let row = entity::app_token::Entity::find_by_id(id)
            .one(&app.db)
            .await
            .unwrap()
            .unwrap();
        if done(&row) {
            return true;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

async fn each_value_records_its_own_last_use(app: TestApp) {
    let (id, old) = app.token(&[Permission::Balance]).await;
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let new = reissue(&app, id, TimeDelta::hours(1)).await;
    assert_eq!(answer(&app, &old, &query).await, OK);
    assert!(
        until_token(&app, id, |t| t.previous_last_used_at.is_some()).await,
        "the old value's use was never recorded"
    );
    let row = tokens::get_info(&app.db, id).await.unwrap().token;
    assert_eq!(row.last_used_at, None, "the new value was not used");
    assert_eq!(answer(&app, &new, &query).await, OK);
    assert!(
        until_token(&app, id, |t| t.last_used_at.is_some()).await,
        "the new value's use was never recorded"
    );
}
