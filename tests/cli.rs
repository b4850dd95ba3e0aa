//! The command line (every command, text and `--json`), run as a user would:
//! the real binary against a fresh sqlite://, postgres:// and mysql:// database.

mod common;

use std::process::{Command, Output};

use common::TestApp;
use entity::{admin_audit_entry, admin_session, webhook_endpoint};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder,
};
use serde_json::Value;

on_every_backend!(
    every_command_works_and_json_prints_exactly_one_object,
    bad_input_is_one_line_error_and_changes_nothing,
    token_values_are_printed_once_and_never_listed,
    money_round_trips_exactly_through_the_command_line,
    demo_seeds_a_working_project_and_prints_a_token,
    migrate_is_idempotent,
    concurrent_first_starts_migrate_safely,
    token_changes_made_with_the_command_line_hold_on_the_next_request,
    administrators_keep_only_an_argon2id_hash_and_can_be_disabled,
    every_change_writes_one_audit_row_of_the_command_line,
    token_audit_rows_never_hold_its_value_or_hash,
    disabling_an_administrator_ends_their_sessions_at_once,
    admin_login_link_prints_a_single_use_url_stored_as_sha256,
    admin_login_link_names_the_configured_panel_address,
    serve_demo_prints_a_sign_in_link_that_opens_the_panel,
    order_get_shows_a_refused_completion_and_order_complete_completes_it,
    a_reader_that_closes_early_ends_the_command_quietly,
    the_last_active_administrator_cannot_be_disabled,
    webhook_endpoints_are_managed_with_their_secret_shown_once_and_stored_sealed,
    webhook_endpoint_bad_input_is_one_line_error_and_changes_nothing,
    orders_written_with_the_command_line_while_the_api_writes_all_hold,
    audit_reports_an_order_without_the_event_its_endpoint_was_to_receive,
    webhook_events_are_listed_by_order_and_shown_with_their_deliveries,
);

fn masterpay(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .env("MASTERPAY_DATABASE_URL", url)
        .env_remove("MASTERPAY_LOG")
        // The defaults, whatever the shell exports: `admin login-link`
        // prints the panel's default address.
        .env_remove("MASTERPAY_CONFIG")
        .env_remove("MASTERPAY_ADMIN_LISTEN")
        .env_remove("MASTERPAY_METRICS_LISTEN")
        .output()
        .expect("run masterpay")
}

/// Runs a command with `--json` and returns its one JSON object.
#[track_caller]
fn json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = masterpay(url, &all);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().count(),
        1,
        "{args:?}: one line of JSON: {stdout}"
    );
    let value: Value = serde_json::from_str(&stdout).expect("JSON object");
    assert!(value.is_object(), "{stdout}");
    value
}

fn id(v: &Value) -> String {
    v["id"].as_i64().expect("id").to_string()
}

async fn every_command_works_and_json_prints_exactly_one_object(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = id(&json(url, &["project", "create", "--name", "Acme"]));
    let listed = json(url, &["project", "list"]);
    assert!(listed["projects"].as_array().unwrap().len() >= 2);
    assert_eq!(
        json(url, &["project", "disable", &project])["active"],
        false
    );
    assert_eq!(json(url, &["project", "enable", &project])["active"], true);
    let user = id(&json(
        url,
        &[
            "user",
            "create",
            "--project",
            &project,
            "--email",
            "Ann@Example.com",
        ],
    ));
    let server = json(
        url,
        &[
            "server",
            "create",
            "--project",
            &project,
            "--name",
            "Survival",
        ],
    );
    let server = id(&server);
    let set = json(
        url,
        &[
            "balance",
            "set",
            "--user",
            &user,
            "--server",
            &server,
            "--main",
            "10.5",
            "--bonus",
            "2",
            "--reason",
            "opening balance",
        ],
    );
    assert_eq!(
        (set["main_balance"].as_str(), set["bonus_balance"].as_str()),
        (Some("10.50"), Some("2.00"))
    );
    let set = json(
        url,
        &[
            "balance", "set", "--user", &user, "--bonus", "1", "--reason", "goodwill",
        ],
    );
    assert_eq!(set["bonus_balance"], "1.00");
    let order = json(
        url,
        &[
            "order",
            "create",
            "--project",
            &project,
            "--user",
            &user,
            "--amount",
            "5",
            "--payment-system",
            "cstm:paygate",
        ],
    );
    let order_id = order["order_id"].as_str().unwrap();
    assert!(
        order_id.parse::<masterpay::domain::OrderId>().is_ok(),
        "{order_id}"
    );
    let fixed = json(
        url,
        &[
            "order",
            "create",
            "--project",
            &project,
            "--user",
            &user,
            "--amount",
            "1.25",
            "--payment-system",
            "cstm:paygate",
            "--server",
            &server,
            "--order-id",
            "Order:Fixed1234",
        ],
    );
    assert_eq!(fixed["order_id"], "Order:Fixed1234");
    assert_eq!(fixed["server_id"].to_string(), server);
    // The order's life, as the API has it.
    let got = json(url, &["order", "get", order_id]);
    assert_eq!(got["status"], "pending");
    assert_eq!(got["amount"], "5.00");
    assert_eq!(got["cancelled_at"], Value::Null);
    let pending = json(
        url,
        &[
            "order",
            "list",
            "--project",
            &project,
            "--status",
            "pending",
        ],
    );
    assert_eq!(pending["total"], 2);
    let cancelled = json(url, &["order", "cancel", order_id]);
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled["cancelled_at"].is_string());
    let again = masterpay(url, &["order", "cancel", order_id]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("order already cancelled"));
    let mine = json(
        url,
        &["order", "list", "--project", &project, "--user", &user],
    );
    assert_eq!(mine["total"], 2);
    assert_eq!(
        mine["orders"][0]["order_id"], "Order:Fixed1234",
        "newest first"
    );
    let cancelled = json(
        url,
        &[
            "order",
            "list",
            "--project",
            &project,
            "--status",
            "cancelled",
        ],
    );
    assert_eq!(cancelled["orders"][0]["order_id"], order_id);
    assert_eq!(cancelled["total"], 1);
    let out = masterpay(url, &["order", "list", "--project", &project]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 of 2 orders shown"));
    let token = json(
        url,
        &[
            "token",
            "create",
            "--project",
            &project,
            "--name",
            "panel",
            "--allow",
            "master-account/balance,payment/order/complete",
        ],
    );
    let token_id = id(&token);
    assert_eq!(token["token"].as_str().unwrap().len(), 64);
    let edited = json(
        url,
        &[
            "token",
            "edit",
            &token_id,
            "--name",
            "panel-2",
            "--allow",
            "master-account/balance",
        ],
    );
    assert_eq!(edited["name"], "panel-2");
    assert_eq!(
        edited["permissions"],
        serde_json::json!(["master-account/balance"])
    );
    assert_eq!(json(url, &["token", "disable", &token_id])["active"], false);
    assert_eq!(json(url, &["token", "enable", &token_id])["active"], true);
    let reissued = json(url, &["token", "reissue", &token_id]);
    assert_ne!(reissued["token"], token["token"]);
    let listed = json(url, &["token", "list", "--project", &project]);
    assert_eq!(listed["tokens"].as_array().unwrap().len(), 1);
    assert_eq!(json(url, &["token", "delete", &token_id])["deleted"], true);
    assert_eq!(
        json(url, &["token", "list", "--project", &project])["tokens"],
        serde_json::json!([])
    );
    // Without --json the output is for people.
    let out = masterpay(url, &["project", "list"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Acme"));
    // --json is accepted anywhere after the command.
    let out = masterpay(
        url,
        &["project", "--json", "create", "--name", "Early flag"],
    );
    assert!(out.status.success());
    assert!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].is_i64());
}

async fn bad_input_is_one_line_error_and_changes_nothing(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let user = app.user("taken@example.com").await.to_string();
    let long_text = "x".repeat(501);
    let tables = [
        "projects",
        "users",
        "servers",
        "balances",
        "payment_orders",
        "app_tokens",
        "token_permissions",
        "operation_log",
        "admin_audit_log",
    ];
    let mut before = Vec::new();
    for t in tables {
        before.push(app.count(&format!("SELECT COUNT(*) FROM {t}")).await);
    }
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "user",
                "create",
                "--project",
                "999999",
                "--email",
                "a@example.com",
            ],
            "project 999999 does not exist",
        ),
        (
            vec!["server", "create", "--project", "999999", "--name", "x"],
            "project 999999 does not exist",
        ),
        (
            vec![
                "balance", "set", "--user", "999999", "--main", "1", "--reason", "r",
            ],
            "user 999999 does not exist",
        ),
        (
            vec![
                "user",
                "create",
                "--project",
                &project,
                "--email",
                "TAKEN@example.com",
            ],
            "already exists",
        ),
        (
            vec![
                "user",
                "create",
                "--project",
                &project,
                "--email",
                "not-an-email",
            ],
            "must be a valid e-mail address",
        ),
        (
            vec![
                "balance", "set", "--user", &user, "--main", "1.234", "--reason", "r",
            ],
            "at most two fraction digits",
        ),
        (
            vec![
                "balance", "set", "--user", &user, "--main", "-5", "--reason", "r",
            ],
            "must not be negative",
        ),
        (
            vec![
                "balance", "set", "--user", &user, "--main", "abc", "--reason", "r",
            ],
            "decimal number",
        ),
        (
            vec!["balance", "set", "--user", &user, "--reason", "r"],
            "give a main or a bonus amount (or both)",
        ),
        (
            vec!["balance", "set", "--user", &user, "--main", "1"],
            "--reason",
        ),
        (
            vec![
                "balance", "set", "--user", &user, "--main", "1", "--reason", "  ",
            ],
            "a reason must be given",
        ),
        (
            vec![
                "balance", "set", "--user", &user, "--main", "1", "--reason", "a\nb",
            ],
            "the reason must not contain control characters",
        ),
        (
            vec![
                "balance", "set", "--user", &user, "--main", "1", "--reason", &long_text,
            ],
            "at most 500 characters",
        ),
        (
            vec![
                "token",
                "create",
                "--project",
                &project,
                "--name",
                "t",
                "--description",
                &long_text,
            ],
            "at most 500 characters",
        ),
        (
            vec![
                "token",
                "create",
                "--project",
                &project,
                "--name",
                "t",
                "--description",
                "line\nbreak",
            ],
            "control characters",
        ),
        (
            vec![
                "order",
                "create",
                "--project",
                &project,
                "--user",
                &user,
                "--amount",
                "1",
                "--payment-system",
                "cstm:paygate",
                "--server",
                "999999",
            ],
            "server not found",
        ),
        (
            vec![
                "order",
                "create",
                "--project",
                &project,
                "--user",
                &user,
                "--amount",
                "1e3",
                "--payment-system",
                "cstm:paygate",
            ],
            "decimal number",
        ),
        (
            vec![
                "order",
                "create",
                "--project",
                &project,
                "--user",
                &user,
                "--amount",
                "0",
                "--payment-system",
                "cstm:paygate",
            ],
            "at least 0.01",
        ),
        (
            vec![
                "order",
                "create",
                "--project",
                &project,
                "--user",
                &user,
                "--amount",
                "1",
                "--payment-system",
                "paygate",
            ],
            "must be cstm: followed by 4 to 20 lower-case letters",
        ),
        (
            vec![
                "order",
                "create",
                "--project",
                &project,
                "--user",
                &user,
                "--amount",
                "1",
                "--payment-system",
                "cstm:paygate",
                "--order-id",
                "Order:x",
            ],
            "must be Order: followed by 8 to 11 letters or digits",
        ),
        (
            vec![
                "order",
                "create",
                "--project",
                &project,
                "--user",
                "999999",
                "--amount",
                "1",
                "--payment-system",
                "cstm:paygate",
            ],
            "user not found",
        ),
        (
            vec!["order", "cancel", "Order:Missing123"],
            "order Order:Missing123 does not exist",
        ),
        (
            vec!["order", "get", "Order:Missing123"],
            "order Order:Missing123 does not exist",
        ),
        (
            vec!["order", "list", "--project", &project, "--status", "paid"],
            "invalid value 'paid'",
        ),
        (
            vec![
                "token",
                "create",
                "--project",
                &project,
                "--name",
                "t",
                "--allow",
                "master-account/balance,admin",
            ],
            "unknown permission",
        ),
        (
            vec!["token", "create", "--project", "999999", "--name", "t"],
            "project 999999 does not exist",
        ),
        (
            vec!["token", "disable", "999999"],
            "token 999999 does not exist",
        ),
        (
            vec!["project", "create", "--name", "   "],
            "must not be empty",
        ),
    ];
    for (args, expected) in cases {
        let out = masterpay(url, &args);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{args:?} should fail");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: one line: {stderr}"
        );
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
    for (t, n) in tables.iter().zip(before) {
        assert_eq!(
            app.count(&format!("SELECT COUNT(*) FROM {t}")).await,
            n,
            "{t} unchanged"
        );
    }
}

async fn token_values_are_printed_once_and_never_listed(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let out = masterpay(
        url,
        &[
            "token",
            "create",
            "--project",
            &project,
            "--name",
            "panel",
            "--allow",
            "master-account/balance",
        ],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let value = text
        .split_whitespace()
        .find(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_alphanumeric()))
        .expect("token value printed")
        .to_owned();
    for args in [
        vec!["token", "list", "--project", &project],
        vec!["token", "list", "--project", &project, "--json"],
    ] {
        let out = masterpay(url, &args);
        let listed = String::from_utf8(out.stdout).unwrap();
        assert!(listed.contains("panel"));
        assert!(!listed.contains(&value), "token value listed");
        assert!(
            !listed.contains(&masterpay::service::tokens::hash(&value)),
            "hash listed"
        );
    }
}

async fn money_round_trips_exactly_through_the_command_line(app: TestApp) {
    let url = app.database.url.clone();
    let user = app.user("whale@example.com").await.to_string();
    let set = json(
        &url,
        &[
            "balance",
            "set",
            "--user",
            &user,
            "--main",
            "123456789012345.67",
            "--bonus",
            "0.1",
            "--reason",
            "a whale",
        ],
    );
    assert_eq!(set["main_balance"], "123456789012345.67");
    let stored = app.main_balance(user.parse().unwrap(), 0).await;
    assert_eq!(stored.to_string(), "123456789012345.67");
    assert_eq!(stored.cents(), 12_345_678_901_234_567);
}

async fn demo_seeds_a_working_project_and_prints_a_token(app: TestApp) {
    let url = app.database.url.clone();
    let demo = json(&url, &["demo"]);
    let token = demo["token"].as_str().unwrap();
    let user = demo["user_ids"][0].as_i64().unwrap();
    let r = app
        .get_balance(Some(token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["main_balance"], "1250.50");
    let order = demo["order_ids"][0].as_str().unwrap();
    assert_eq!(
        app.complete_order(token, order, "cstm:paygate")
            .await
            .status,
        200
    );
    let out = masterpay(&url, &["demo"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("/docs/") && text.contains("curl"), "{text}");
}

/// An order refused at the balance ceiling: `order get` shows the refusal,
/// `order complete` refuses too while the balance is full, and completes it
/// (audited, credited once) once the balance allows.
async fn order_get_shows_a_refused_completion_and_order_complete_completes_it(app: TestApp) {
    let url = app.database.url.clone();
    let token = app.full_token().await;
    let user = app.user("whale@example.com").await;
    app.set_balance(user, None, "999999999999999.99", "0").await;
    let order = app.order(user, None, "2.50", "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:paygate")
        .await
        .assert_error(422, "PAYMENT_PROCESSING_ERROR");

    let got = json(&url, &["order", "get", &order]);
    assert_eq!(got["status"], "pending");
    assert!(got["refused_at"].is_string(), "{got}");
    assert_eq!(
        got["refusal"],
        masterpay::service::orders::BALANCE_CEILING_REFUSAL
    );
    let text = masterpay(&url, &["order", "get", &order]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("completion refused"),
        "{text:?}"
    );

    let full = masterpay(&url, &["order", "complete", &order]);
    assert!(!full.status.success());
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("past 999999999999999.99"), "{stderr}");

    let user = user.to_string();
    json(
        &url,
        &[
            "balance",
            "set",
            "--user",
            &user,
            "--main",
            "0",
            "--reason",
            "moved out",
        ],
    );
    let done = json(&url, &["order", "complete", &order]);
    assert_eq!(done["status"], "completed");
    assert!(done["completed_at"].is_string());
    assert_eq!(
        app.main_balance(user.parse().unwrap(), 0).await.to_string(),
        "2.50"
    );
    let audit = admin_audit_entry::Entity::find()
        .filter(admin_audit_entry::Column::Action.eq("order.complete"))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].object_id, order);
    assert_eq!(audit[0].actor, "command line");

    let again = masterpay(&url, &["order", "complete", &order]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already completed"));
}

async fn migrate_is_idempotent(app: TestApp) {
    let url = app.database.url.clone();
    for _ in 0..2 {
        assert_eq!(json(&url, &["migrate"])["migrated"], true);
    }
}

/// Several processes starting at once on an empty database all succeed and
/// leave one complete schema.
async fn concurrent_first_starts_migrate_safely(app: TestApp) {
    let fresh = common::TestDatabase::create(app.backend).await;
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_masterpay"))
                .args(["migrate", "--json"])
                .env("MASTERPAY_DATABASE_URL", &fresh.url)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let project = json(&fresh.url, &["project", "create", "--name", "After race"]);
    assert_eq!(project["id"], 1);
}

/// The contract's promise, literally: the CLI changes a token while the
/// server runs, and the very next request sees it.
async fn token_changes_made_with_the_command_line_hold_on_the_next_request(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let user = app.user("alice@example.com").await;
    let query = format!("server_id=0&user_id={user}");
    let created = json(
        url,
        &[
            "token",
            "create",
            "--project",
            &project,
            "--name",
            "panel",
            "--allow",
            "payment/order/complete",
        ],
    );
    let id = id(&created);
    let token = created["token"].as_str().unwrap().to_owned();
    // Every state is checked many times before the next change, so that
    // it holds on whichever of the server's connections reads the token.
    answers(&app, &token, &query, 403, Some("ACCESS_DENIED")).await;
    json(
        url,
        &["token", "edit", &id, "--allow", "master-account/balance"],
    );
    answers(&app, &token, &query, 200, None).await;
    json(url, &["token", "disable", &id]);
    answers(&app, &token, &query, 403, Some("TOKEN_DISABLED")).await;
    json(url, &["token", "enable", &id]);
    answers(&app, &token, &query, 200, None).await;
    json(url, &["project", "disable", &project]);
    answers(&app, &token, &query, 404, Some("PROJECT_NOT_FOUND")).await;
    json(url, &["project", "enable", &project]);
    // A reissue with a grace period: both values work, and the list shows
    // each one's last 4 characters, until the grace is ended.
    let graced = json(url, &["token", "reissue", &id, "--grace", "24h"]);
    assert!(graced["previous_until"].is_string(), "{graced}");
    let graced_token = graced["token"].as_str().unwrap().to_owned();
    answers(&app, &token, &query, 200, None).await;
    answers(&app, &graced_token, &query, 200, None).await;
    let listed = |url| {
        let all = json(url, &["token", "list", "--project", &project]);
        let rows = all["tokens"].as_array().unwrap();
        let row = rows
            .iter()
            .find(|row| row["id"] == id.parse::<i64>().unwrap());
        row.cloned()
            .unwrap_or_else(|| panic!("token {id} listed: {all}"))
    };
    let row = listed(url);
    assert_eq!(row["last4"], graced_token[60..], "{row}");
    assert_eq!(row["previous_value"]["last4"], token[60..], "{row}");
    json(url, &["token", "end-grace", &id]);
    answers(&app, &token, &query, 403, Some("TOKEN_NOT_FOUND")).await;
    assert!(listed(url)["previous_value"].is_null());
    let reissued = json(url, &["token", "reissue", &id]);
    answers(&app, &graced_token, &query, 403, Some("TOKEN_NOT_FOUND")).await;
    let new_token = reissued["token"].as_str().unwrap();
    answers(&app, new_token, &query, 200, None).await;
    // An expiry ahead changes nothing yet; a past one and a grace beyond
    // 7 days are refused.
    let ahead = (chrono::Utc::now() + chrono::TimeDelta::days(1)).to_rfc3339();
    let edited = json(url, &["token", "edit", &id, "--expires", &ahead]);
    assert!(edited["expires_at"].is_string(), "{edited}");
    answers(&app, new_token, &query, 200, None).await;
    for args in [
        &["token", "edit", &id, "--expires", "2001-01-01T00:00:00Z"][..],
        &["token", "reissue", &id, "--grace", "8days"][..],
    ] {
        let out = masterpay(url, args);
        assert!(!out.status.success(), "{args:?} was accepted");
    }
    answers(&app, new_token, &query, 200, None).await;
    let edited = json(url, &["token", "edit", &id, "--expires", "never"]);
    assert!(edited["expires_at"].is_null(), "{edited}");
    json(url, &["token", "delete", &id]);
    answers(&app, new_token, &query, 403, Some("TOKEN_NOT_FOUND")).await;
}

/// Asks for the balance 64 times and checks every answer.
async fn answers(app: &TestApp, token: &str, query: &str, status: u16, code: Option<&str>) {
    for _ in 0..64 {
        let reply = app.get_balance(Some(token), query).await;
        match code {
            Some(code) => reply.assert_error(status, code),
            None => assert_eq!(reply.status, status, "{:?}", reply.body),
        }
    }
}

/// Runs a command with `stdin` as its standard input.
/// Runs a command whose stdout is read once and then closed, as
/// `masterpay ... | head -1` does.
fn masterpay_into_head(url: &str, args: &[&str]) -> Output {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .env("MASTERPAY_DATABASE_URL", url)
        .env_remove("MASTERPAY_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run masterpay");
    let mut first = [0; 4096];
    let read = child.stdout.take().unwrap().read(&mut first).unwrap();
    assert!(read > 0, "{args:?} printed something");
    child.wait_with_output().expect("masterpay ends")
}

async fn a_reader_that_closes_early_ends_the_command_quietly(app: TestApp) {
    use entity::project;
    let url = app.database.url.as_str();
    // More lines than a pipe holds (64 KiB), so the command is still writing
    // when the reader goes away.
    let now = chrono::Utc::now();
    for chunk in (0..4000).collect::<Vec<_>>().chunks(500) {
        project::Entity::insert_many(chunk.iter().map(|n| project::ActiveModel {
            name: Set(format!("A project with a long enough name, number {n}")),
            active: Set(true),
            created_at: Set(now),
            ..Default::default()
        }))
        .exec(&app.db)
        .await
        .unwrap();
    }
    for args in [&["project", "list"][..], &["project", "list", "--json"]] {
        let out = masterpay_into_head(url, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("error"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.trim().is_empty(), "{args:?}: quiet: {stderr}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: 128 + SIGPIPE");
    }
}

/// Creates the administrator `name` with the command line; returns its id.
#[track_caller]
fn create_admin(url: &str, name: &str) -> String {
    let out = masterpay_with_stdin(
        url,
        &["admin", "create", "--name", name, "--json"],
        "correct horse battery staple\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    id(&serde_json::from_slice(&out.stdout).unwrap())
}

fn masterpay_with_stdin(url: &str, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .env("MASTERPAY_DATABASE_URL", url)
        .env_remove("MASTERPAY_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run masterpay");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().expect("masterpay ends")
}

async fn administrators_keep_only_an_argon2id_hash_and_can_be_disabled(app: TestApp) {
    use masterpay::service::admins;
    let url = app.database.url.clone();
    let url = url.as_str();
    let password = "correct horse battery staple";
    let created = masterpay_with_stdin(
        url,
        &["admin", "create", "--name", "Ann", "--json"],
        &format!("{password}\n"),
    );
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    assert_eq!(created["name"], "Ann");
    assert_eq!(created["active"], true);
    assert!(!created.to_string().contains(password));
    // Only the hash is stored: argon2id, never the password.
    let stored = admins::list(&app.db).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert!(
        stored[0].password_hash.starts_with("$argon2id$"),
        "{}",
        stored[0].password_hash
    );
    assert!(!stored[0].password_hash.contains(password));
    assert!(
        admins::verify(&app.db, "Ann", password)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        admins::verify(&app.db, "Ann", "wrong password!")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        admins::verify(&app.db, "Nobody", password)
            .await
            .unwrap()
            .is_none()
    );

    // Refused: a name taken, a short password, no password at all; nothing changes.
    for (args, stdin, expected) in [
        (
            vec!["admin", "create", "--name", "Ann"],
            "another long password\n",
            "already exists",
        ),
        (
            vec!["admin", "create", "--name", "Bob"],
            "short\n",
            "at least 12 characters",
        ),
        (
            vec!["admin", "create", "--name", "Bob"],
            "",
            "at least 12 characters",
        ),
        (
            vec!["admin", "disable", "Nobody"],
            "",
            "no administrator is named",
        ),
    ] {
        let out = masterpay_with_stdin(url, &args, stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert_eq!(admins::list(&app.db).await.unwrap().len(), 1);

    // A disabled administrator's right password no longer signs in.
    create_admin(url, "Colleague");
    assert_eq!(json(url, &["admin", "disable", "Ann"])["active"], false);
    assert!(
        admins::verify(&app.db, "Ann", password)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(json(url, &["admin", "enable", "Ann"])["active"], true);
    assert!(
        admins::verify(&app.db, "Ann", password)
            .await
            .unwrap()
            .is_some()
    );
    let listed = json(url, &["admin", "list"]);
    assert_eq!(listed["administrators"][0]["name"], "Ann");
    assert!(!listed.to_string().contains("argon2"));
}

/// The audit rows written after the row `last` (0: all), oldest first.
async fn audit_rows_after(app: &TestApp, last: i64) -> Vec<admin_audit_entry::Model> {
    admin_audit_entry::Entity::find()
        .filter(admin_audit_entry::Column::Id.gt(last))
        .order_by_asc(admin_audit_entry::Column::Id)
        .all(&app.db)
        .await
        .expect("audit rows")
}

/// A row's `before` or `after` as JSON (`null` when there is none).
fn parsed(text: &Option<String>) -> Value {
    text.as_deref()
        .map(|t| serde_json::from_str(t).expect("JSON"))
        .unwrap_or(Value::Null)
}

/// Checks that exactly one audit row was written since `last`, by the
/// command line, of `action` on `kind` `id`; returns its before and after,
/// and moves `last` past it.
#[track_caller]
fn one_row(
    rows: Vec<admin_audit_entry::Model>,
    last: &mut i64,
    action: &str,
    kind: &str,
    id: &str,
) -> (Value, Value) {
    assert_eq!(rows.len(), 1, "{action}: one row: {rows:?}");
    let row = &rows[0];
    assert_eq!(
        (
            row.actor.as_str(),
            row.action.as_str(),
            row.object_kind.as_str(),
            row.object_id.as_str()
        ),
        ("command line", action, kind, id),
        "{row:?}"
    );
    assert_eq!((row.administrator_id, row.address.as_deref()), (None, None));
    *last = row.id;
    (parsed(&row.before), parsed(&row.after))
}

/// Every change the command line makes writes exactly one row of the
/// audit log, as the command line; reading and refused commands none.
async fn every_change_writes_one_audit_row_of_the_command_line(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let mut last = audit_rows_after(&app, 0)
        .await
        .last()
        .map_or(0, |row| row.id);
    macro_rules! expect_row {
        ($action:expr, $kind:expr, $id:expr) => {
            one_row(
                audit_rows_after(&app, last).await,
                &mut last,
                $action,
                $kind,
                AsRef::<str>::as_ref(&$id),
            )
        };
    }

    let project = id(&json(url, &["project", "create", "--name", "Audited"]));
    let (before, after) = expect_row!("project.create", "project", project);
    assert_eq!(before, Value::Null);
    assert_eq!(
        after,
        serde_json::json!({"name": "Audited", "active": true})
    );
    json(url, &["project", "disable", &project]);
    let (before, after) = expect_row!("project.disable", "project", project);
    assert_eq!(
        (&before["active"], &after["active"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    json(url, &["project", "enable", &project]);
    let (_, after) = expect_row!("project.enable", "project", project);
    assert_eq!(after["active"], true);

    let user = id(&json(
        url,
        &[
            "user",
            "create",
            "--project",
            &project,
            "--email",
            "Ann@Example.com",
        ],
    ));
    let (_, after) = expect_row!("user.create", "user", user);
    assert_eq!(after["email"], "ann@example.com");
    let server = id(&json(
        url,
        &[
            "server",
            "create",
            "--project",
            &project,
            "--name",
            "Survival",
        ],
    ));
    let (_, after) = expect_row!("server.create", "server", server);
    assert_eq!(after["name"], "Survival");

    json(
        url,
        &[
            "balance",
            "set",
            "--user",
            &user,
            "--server",
            &server,
            "--main",
            "10.5",
            "--reason",
            " opening balance ",
        ],
    );
    let (before, after) = expect_row!("balance.set", "balance", format!("{user}:{server}"));
    assert_eq!(before, serde_json::json!({"main": "0.00", "bonus": "0.00"}));
    assert_eq!(
        after,
        serde_json::json!({"main": "10.50", "bonus": "0.00", "reason": "opening balance"})
    );
    json(
        url,
        &[
            "balance", "set", "--user", &user, "--bonus", "2", "--reason", "goodwill",
        ],
    );
    let (_, after) = expect_row!("balance.set", "balance", format!("{user}:0"));
    assert_eq!(after["bonus"], "2.00");
    // The operation log still gets its rows: one per balance changed.
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) FROM operation_log WHERE user_id = {user} AND kind = 'balance_set'"
        ))
        .await,
        2
    );

    let order_args = |order_id: &'static str| {
        vec![
            "order".to_owned(),
            "create".into(),
            "--project".into(),
            project.clone(),
            "--user".into(),
            user.clone(),
            "--amount".into(),
            "5".into(),
            "--payment-system".into(),
            "cstm:paygate".into(),
            "--server".into(),
            server.clone(),
            "--order-id".into(),
            order_id.into(),
        ]
    };
    let args = order_args("Order:Audited12");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let order = json(url, &args);
    assert_eq!(order["status"], "pending");
    let (_, after) = expect_row!("order.create", "order", "Order:Audited12");
    assert_eq!(
        (&after["status"], &after["amount"], &after["user_id"]),
        (
            &Value::from("pending"),
            &Value::from("5.00"),
            &Value::from(user.parse::<i64>().unwrap())
        )
    );
    // A taken order id is refused, and nothing is written.
    let taken = masterpay(url, &args);
    assert!(
        String::from_utf8_lossy(&taken.stderr).contains("order id Order:Audited12 already exists"),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    assert!(audit_rows_after(&app, last).await.is_empty());
    // Generated order ids are drawn as for the API.
    let generated = json(
        url,
        &[
            "order",
            "create",
            "--project",
            &project,
            "--user",
            &user,
            "--amount",
            "1",
            "--payment-system",
            "cstm:paygate",
        ],
    );
    let generated = generated["order_id"].as_str().unwrap().to_owned();
    assert!(
        generated.parse::<masterpay::domain::OrderId>().is_ok(),
        "{generated}"
    );
    assert_eq!(generated.len(), "Order:".len() + 11);
    expect_row!("order.create", "order", generated);
    json(url, &["order", "cancel", "Order:Audited12"]);
    let (before, after) = expect_row!("order.cancel", "order", "Order:Audited12");
    assert_eq!(
        (&before["status"], &after["status"]),
        (&Value::from("pending"), &Value::from("cancelled"))
    );
    assert!(after["cancelled_at"].is_string(), "{after}");
    // Cancelling again is refused and writes nothing.
    assert!(
        !masterpay(url, &["order", "cancel", "Order:Audited12"])
            .status
            .success()
    );
    assert!(audit_rows_after(&app, last).await.is_empty());

    let token = json(
        url,
        &[
            "token",
            "create",
            "--project",
            &project,
            "--name",
            "panel",
            "--allow",
            "master-account/balance",
            "--description",
            "  for the shop  ",
        ],
    );
    let token_id = id(&token);
    let (_, after) = expect_row!("token.create", "token", token_id);
    assert_eq!(after["description"], "for the shop");
    assert_eq!(
        after["permissions"],
        serde_json::json!(["master-account/balance"])
    );
    let listed = json(url, &["token", "list", "--project", &project]);
    assert_eq!(listed["tokens"][0]["description"], "for the shop");
    assert_eq!(listed["tokens"][0]["created_by"], "command line");
    json(url, &["token", "edit", &token_id, "--name", "panel-2"]);
    let (before, after) = expect_row!("token.edit", "token", token_id);
    assert_eq!(
        (&before["name"], &after["name"]),
        (&Value::from("panel"), &Value::from("panel-2"))
    );
    json(url, &["token", "disable", &token_id]);
    expect_row!("token.disable", "token", token_id);
    json(url, &["token", "enable", &token_id]);
    expect_row!("token.enable", "token", token_id);
    json(url, &["token", "reissue", &token_id]);
    expect_row!("token.reissue", "token", token_id);
    json(url, &["token", "delete", &token_id]);
    let (before, after) = expect_row!("token.delete", "token", token_id);
    assert_eq!(
        (&before["name"], &after),
        (&Value::from("panel-2"), &Value::Null)
    );

    let admin = masterpay_with_stdin(
        url,
        &["admin", "create", "--name", "Ann", "--json"],
        "correct horse battery staple\n",
    );
    assert!(
        admin.status.success(),
        "{}",
        String::from_utf8_lossy(&admin.stderr)
    );
    let admin = id(&serde_json::from_slice(&admin.stdout).unwrap());
    let (_, after) = expect_row!("administrator.create", "administrator", admin);
    assert_eq!(after, serde_json::json!({"name": "Ann", "active": true}));
    let colleague = create_admin(url, "Colleague");
    expect_row!("administrator.create", "administrator", colleague);
    json(url, &["admin", "disable", "Ann"]);
    expect_row!("administrator.disable", "administrator", admin);
    json(url, &["admin", "enable", "Ann"]);
    expect_row!("administrator.enable", "administrator", admin);

    let audit = json(url, &["audit"]);
    assert_eq!(audit["ok"], true);
    let (_, after) = expect_row!("audit.run", "audit", "ledger");
    assert_eq!(after["mismatches"], 0);
    assert_eq!(after["findings"], serde_json::json!([]));
    assert_eq!(after["cancelled_orders"], 1);
    assert_eq!(after["log_rows"], audit["log_rows"]);
    // A run with mismatches is recorded too, with their lines.
    app.exec(&format!(
        "UPDATE balances SET main_cents = main_cents + 1 WHERE user_id = {user} AND server_id = {server}"
    ))
    .await;
    let failed = masterpay(url, &["audit"]);
    assert!(!failed.status.success());
    let (_, after) = expect_row!("audit.run", "audit", "ledger");
    assert_eq!(after["mismatches"], 1);
    assert!(
        after["findings"][0]
            .as_str()
            .unwrap()
            .contains(&format!("user {user} server {server} main")),
        "{after}"
    );

    // Reading changes nothing, and writes nothing.
    for args in [
        vec!["project", "list"],
        vec!["token", "list", "--project", &project],
        vec!["order", "get", "Order:Audited12"],
        vec!["order", "list", "--project", &project],
        vec!["admin", "list"],
    ] {
        json(url, &args);
    }
    assert!(audit_rows_after(&app, last).await.is_empty());
}

/// Neither a token's value nor its hash reaches the audit log, whatever
/// is done to the token.
async fn token_audit_rows_never_hold_its_value_or_hash(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let created = json(
        url,
        &[
            "token",
            "create",
            "--project",
            &project,
            "--name",
            "secret",
            "--allow",
            "payment/order/complete",
        ],
    );
    let token_id = id(&created);
    let mut values = vec![created["token"].as_str().unwrap().to_owned()];
    json(
        url,
        &[
            "token",
            "edit",
            &token_id,
            "--allow",
            "master-account/balance",
        ],
    );
    json(url, &["token", "disable", &token_id]);
    json(url, &["token", "enable", &token_id]);
    for _ in 0..2 {
        let reissued = json(url, &["token", "reissue", &token_id]);
        values.push(reissued["token"].as_str().unwrap().to_owned());
    }
    json(url, &["token", "delete", &token_id]);
    let rows = audit_rows_after(&app, 0).await;
    let of_token: Vec<_> = rows
        .iter()
        .filter(|row| row.object_kind == "token" && row.object_id == token_id)
        .collect();
    assert_eq!(of_token.len(), 7, "{of_token:?}");
    for row in &rows {
        for text in [&row.before, &row.after].into_iter().flatten() {
            assert!(
                !text.contains("token_hash") && !text.contains("\"token\""),
                "{text}"
            );
            for value in &values {
                assert!(!text.contains(value.as_str()), "a token value in {text}");
                let hash = masterpay::service::tokens::hash(value);
                assert!(!text.contains(&hash), "a token hash in {text}");
                assert!(
                    !text.contains(&hash.to_uppercase()),
                    "a token hash in {text}"
                );
            }
        }
    }
}

/// Disabling an administrator deletes every session of theirs in the
/// same transaction (and no one else's); enabling them again brings none
/// back.
async fn disabling_an_administrator_ends_their_sessions_at_once(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let ids: Vec<i64> = ["Ann", "Bob"]
        .into_iter()
        .map(|name| create_admin(url, name).parse().unwrap())
        .collect();
    let (ann, bob) = (ids[0], ids[1]);
    let now = chrono::Utc::now();
    for (n, administrator_id) in [ann, ann, bob].into_iter().enumerate() {
        admin_session::ActiveModel {
            session_hash: Set(format!("{n:064x}")),
            administrator_id: Set(administrator_id),
            created_at: Set(now),
            expires_at: Set(now + chrono::Duration::hours(8)),
            address: Set(Some("192.0.2.1".into())),
            by_link: Set(false),
            ..Default::default()
        }
        .insert(&app.db)
        .await
        .expect("session");
    }
    let sessions_of = |administrator_id: i64| {
        admin_session::Entity::find()
            .filter(admin_session::Column::AdministratorId.eq(administrator_id))
            .all(&app.db)
    };
    assert_eq!(sessions_of(ann).await.unwrap().len(), 2);

    assert_eq!(json(url, &["admin", "disable", "Ann"])["active"], false);
    assert!(
        sessions_of(ann).await.unwrap().is_empty(),
        "Ann's sessions ended"
    );
    assert_eq!(
        sessions_of(bob).await.unwrap().len(),
        1,
        "Bob's session kept"
    );
    let rows = audit_rows_after(&app, 0).await;
    let disabled = rows.last().unwrap();
    assert_eq!(disabled.action, "administrator.disable");
    assert_eq!(disabled.object_id, ann.to_string());
    assert_eq!(parsed(&disabled.after)["sessions_ended"], 2);

    json(url, &["admin", "enable", "Ann"]);
    assert!(sessions_of(ann).await.unwrap().is_empty());
    // Disabling someone without sessions is fine too.
    json(url, &["admin", "disable", "Ann"]);
    let rows = audit_rows_after(&app, 0).await;
    assert_eq!(parsed(&rows.last().unwrap().after)["sessions_ended"], 0);
}

/// `admin login-link` prints a URL under the panel's address whose secret
/// is stored only as its SHA-256, valid 15 minutes, and recorded in the
/// admin audit log without the secret; a disabled administrator gets none.
async fn admin_login_link_prints_a_single_use_url_stored_as_sha256(app: TestApp) {
    use sha2::{Digest, Sha256};
    let url = app.database.url.clone();
    let created = masterpay_with_stdin(
        &url,
        &["admin", "create", "--name", "ann"],
        "a long enough password\n",
    );
    assert!(created.status.success(), "{created:?}");
    let link = json(&url, &["admin", "login-link", "--name", "ann"]);
    let shown = link["url"].as_str().unwrap();
    let secret = shown
        .strip_prefix("http://127.0.0.1:8081/sign-in/link/")
        .unwrap_or_else(|| panic!("under the default panel address: {shown}"));
    assert!(secret.len() >= 40, "{secret}");
    let link = json(
        &url,
        &[
            "admin",
            "login-link",
            "--name",
            "ann",
            "--base-url",
            "https://panel.example/",
        ],
    );
    assert!(
        link["url"]
            .as_str()
            .unwrap()
            .starts_with("https://panel.example/sign-in/link/"),
        "{link}"
    );
    let stored = entity::admin_login_link::Entity::find()
        .order_by_asc(entity::admin_login_link::Column::Id)
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0].link_hash, hex::encode(Sha256::digest(secret)));
    assert_eq!(stored[0].used_at, None);
    let lifetime = stored[0].expires_at - stored[0].created_at;
    assert!(
        (lifetime - chrono::Duration::minutes(15)).abs() < chrono::Duration::seconds(1),
        "{lifetime}"
    );
    let rows = admin_audit_entry::Entity::find()
        .filter(admin_audit_entry::Column::Action.eq("administrator.login_link"))
        .all(&app.db)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|row| row.actor == "command line"));
    let everything = format!("{rows:?}");
    assert!(!everything.contains(secret), "no secret in the audit log");

    create_admin(&url, "colleague");
    assert!(json(&url, &["admin", "disable", "ann"])["active"] == false);
    let refused = masterpay(&url, &["admin", "login-link", "--name", "ann"]);
    assert!(!refused.status.success());
    let unknown = masterpay(&url, &["admin", "login-link", "--name", "nobody"]);
    assert!(!unknown.status.success());
    assert_eq!(
        entity::admin_login_link::Entity::find()
            .all(&app.db)
            .await
            .unwrap()
            .len(),
        0,
        "disabling voided the unused links; refusals made none"
    );
}

/// Every command reads the settings `serve` reads: the link is under the
/// panel address of `MASTERPAY_ADMIN_LISTEN` (over the file's), unless
/// `--base-url` names another. Nothing listens on these ports.
async fn admin_login_link_names_the_configured_panel_address(app: TestApp) {
    let url = app.database.url.clone();
    let created = masterpay_with_stdin(
        &url,
        &["admin", "create", "--name", "ann"],
        "a long enough password\n",
    );
    assert!(created.status.success(), "{created:?}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("masterpay.toml");
    std::fs::write(&config, "admin_listen = \"127.0.0.1:47182\"\n").unwrap();
    let config = config.to_str().unwrap();
    let login_link = |admin_listen: Option<&str>, extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_masterpay"));
        cmd.args(["--config", config, "admin", "login-link", "--name", "ann"])
            .args(extra)
            .env("MASTERPAY_DATABASE_URL", &url)
            .env_remove("MASTERPAY_LOG")
            .env_remove("MASTERPAY_ADMIN_LISTEN");
        if let Some(address) = admin_listen {
            cmd.env("MASTERPAY_ADMIN_LISTEN", address);
        }
        let out = cmd.output().expect("run masterpay");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        (out.status.success(), stdout + &stderr)
    };
    for (admin_listen, extra, prefix) in [
        (None, &[][..], "http://127.0.0.1:47182/sign-in/link/"),
        (
            Some("127.0.0.1:47181"),
            &[],
            "http://127.0.0.1:47181/sign-in/link/",
        ),
        (
            Some("127.0.0.1:47181"),
            &["--base-url", "https://panel.example"],
            "https://panel.example/sign-in/link/",
        ),
    ] {
        let (ok, shown) = login_link(admin_listen, extra);
        assert!(ok && shown.starts_with(prefix), "{admin_listen:?}: {shown}");
    }
    let (ok, shown) = login_link(Some("0.0.0.0:47181"), &[]);
    assert!(!ok, "{shown}");
    assert!(
        shown.contains("admin_listen 0.0.0.0:47181 is not a loopback address"),
        "{shown}"
    );
}

/// `serve --demo` prints a sign-in link for the administrator `demo`, and
/// the panel it names opens it.
async fn serve_demo_prints_a_sign_in_link_that_opens_the_panel(app: TestApp) {
    use std::io::{BufRead, BufReader};
    let (api, panel) = (common::free_port(), common::free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args([
            "serve",
            "--demo",
            "--listen",
            &format!("127.0.0.1:{api}"),
            "--admin-listen",
            &format!("127.0.0.1:{panel}"),
            "--metrics-listen",
            "off",
        ])
        .env("MASTERPAY_DATABASE_URL", &app.database.url)
        .env("MASTERPAY_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve --demo");
    // Kept open until the end: the server goes on writing to it.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let prefix = format!("http://127.0.0.1:{panel}/sign-in/link/");
    let link = lines.by_ref().map_while(Result::ok).find_map(|line| {
        let line = line.trim();
        line.starts_with(&prefix).then(|| line.to_owned())
    });
    let answer = match &link {
        Some(link) => Some(reqwest::get(link).await),
        None => None,
    };
    let _ = child.kill();
    let _ = child.wait();
    drop(lines);
    let link = link.expect("serve --demo printed a sign-in link");
    let answer = answer
        .expect("asked")
        .unwrap_or_else(|err| panic!("the panel answers {link}: {err:?}"));
    assert_eq!(answer.status(), 200);
    let page = answer.text().await.unwrap();
    assert!(page.contains("Sign in as demo"), "{page}");
}

async fn the_last_active_administrator_cannot_be_disabled(app: TestApp) {
    use masterpay::service::admins;
    let url = app.database.url.as_str();
    create_admin(url, "Ann");
    let rows = audit_rows_after(&app, 0).await.len();
    let refused = masterpay(url, &["admin", "disable", "Ann"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("Ann is the last active administrator"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(admins::list(&app.db).await.unwrap()[0].active);
    assert_eq!(audit_rows_after(&app, 0).await.len(), rows, "no audit row");
    // With a colleague, Ann may go; then the colleague is the last one.
    create_admin(url, "Bob");
    assert_eq!(json(url, &["admin", "disable", "Ann"])["active"], false);
    let rows = audit_rows_after(&app, 0).await.len();
    let refused = masterpay(url, &["admin", "disable", "Bob"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Bob is the last active"));
    assert_eq!(audit_rows_after(&app, 0).await.len(), rows, "no audit row");
    // A disabled one may be disabled again (nothing more is locked out).
    assert_eq!(json(url, &["admin", "disable", "Ann"])["active"], false);
}

/// A key sealing webhook secrets (32 bytes of base64), as an operator sets it.
const WEBHOOK_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn masterpay_with_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .env("MASTERPAY_DATABASE_URL", url)
        .env_remove("MASTERPAY_LOG")
        .env_remove("MASTERPAY_CONFIG")
        .env_remove("MASTERPAY_WEBHOOK_SECRET_KEY")
        .envs(env.iter().copied())
        .output()
        .expect("run masterpay")
}

async fn endpoint_row(app: &TestApp, id: i64) -> Option<webhook_endpoint::Model> {
    webhook_endpoint::Entity::find_by_id(id)
        .one(&app.db)
        .await
        .expect("endpoint row")
}

/// `webhook endpoint` create, list, show, update, disable, enable and
/// delete: the secret printed by `create` alone, once, stored sealed with
/// the configured key (the row does not hold it) or marked plain without
/// one; each change one audit row of the command line, without the secret.
async fn webhook_endpoints_are_managed_with_their_secret_shown_once_and_stored_sealed(
    app: TestApp,
) {
    use masterpay::{config::WebhookSecretKey, service::webhook_secrets};
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let key = [("MASTERPAY_WEBHOOK_SECRET_KEY", WEBHOOK_KEY)];
    let mut last = audit_rows_after(&app, 0).await.last().map_or(0, |r| r.id);

    let out = masterpay_with_env(
        url,
        &[
            "webhook",
            "endpoint",
            "create",
            "--project",
            &project,
            "--url",
            "https://hooks.example.com/masterpay",
            "--events",
            "order.completed, order.created",
            "--description",
            "shop backend",
            "--json",
        ],
        &key,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let secret = created["secret"].as_str().expect("the secret").to_owned();
    assert!(
        secret.starts_with("whsec_") && secret.len() == 50,
        "{secret}"
    );
    assert_eq!(
        created["event_types"],
        serde_json::json!(["order.created", "order.completed"])
    );
    assert_eq!(created["enabled"], true);
    let id = created["id"].as_i64().unwrap();
    let row = endpoint_row(&app, id).await.expect("stored");
    assert!(row.secret.starts_with("sealed:v1:"), "sealed");
    assert!(!row.secret.contains(&secret) && !row.secret.contains(&secret[6..]));
    let key_bytes: WebhookSecretKey = WEBHOOK_KEY.parse().unwrap();
    let opened = webhook_secrets::open(&row.secret, Some(&key_bytes)).expect("opens with the key");
    assert_eq!(opened.expose(), secret);
    let (_, after) = one_row(
        audit_rows_after(&app, last).await,
        &mut last,
        "webhook_endpoint.create",
        "webhook_endpoint",
        &id.to_string(),
    );
    assert_eq!(after["url"], "https://hooks.example.com/masterpay");

    // Without a key: stored in clear, marked so. Text output for people
    // prints the secret once too.
    let out = masterpay_with_env(
        url,
        &[
            "webhook",
            "endpoint",
            "create",
            "--project",
            &project,
            "--url",
            "http://hooks.example.net:9000/in",
        ],
        // A private address, allowed by the setting.
        &[("MASTERPAY_WEBHOOK_ALLOW_NETWORKS", "10.0.0.0/8")],
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let plain = text
        .lines()
        .find(|l| l.starts_with("whsec_"))
        .expect("secret line")
        .to_owned();
    assert_eq!(text.matches(&plain).count(), 1);
    let second = id + 1;
    let row = endpoint_row(&app, second).await.expect("stored");
    assert_eq!(row.secret, format!("plain:{plain}"));
    assert_eq!(row.event_types, None, "every type");
    last += 1;

    // Listing and showing never print a secret.
    for args in [
        vec!["webhook", "endpoint", "list"],
        vec!["webhook", "endpoint", "list", "--project", &project],
        vec!["webhook", "endpoint", "show", "1"],
    ] {
        let mut json_args = args.clone();
        json_args.push("--json");
        for out in [masterpay(url, &args), masterpay(url, &json_args)] {
            assert!(out.status.success());
            let stdout = String::from_utf8(out.stdout).unwrap();
            assert!(
                !stdout.contains(&secret) && !stdout.contains(&plain),
                "{args:?}"
            );
            assert!(
                !stdout.contains("whsec_") && !stdout.contains("sealed:"),
                "{stdout}"
            );
        }
    }
    let listed = json(url, &["webhook", "endpoint", "list", "--project", &project]);
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 2);

    let id_text = id.to_string();
    let updated = json(
        url,
        &[
            "webhook",
            "endpoint",
            "update",
            &id_text,
            "--url",
            "https://hooks.example.com/v2",
            "--events",
            "all",
            "--description",
            "",
        ],
    );
    assert_eq!(
        (
            &updated["url"],
            &updated["event_types"],
            &updated["description"]
        ),
        (
            &Value::from("https://hooks.example.com/v2"),
            &Value::Null,
            &Value::from("")
        )
    );
    one_row(
        audit_rows_after(&app, last).await,
        &mut last,
        "webhook_endpoint.edit",
        "webhook_endpoint",
        &id_text,
    );
    let updated = json(
        url,
        &[
            "webhook",
            "endpoint",
            "update",
            &id_text,
            "--events",
            "balance.set",
        ],
    );
    assert_eq!(updated["event_types"], serde_json::json!(["balance.set"]));
    assert_eq!(updated["url"], "https://hooks.example.com/v2", "kept");
    one_row(
        audit_rows_after(&app, last).await,
        &mut last,
        "webhook_endpoint.edit",
        "webhook_endpoint",
        &id_text,
    );

    let disabled = json(url, &["webhook", "endpoint", "disable", &id_text]);
    assert_eq!(
        (&disabled["enabled"], &disabled["disabled_reason"]),
        (
            &Value::Bool(false),
            &Value::from("disabled by an administrator")
        )
    );
    one_row(
        audit_rows_after(&app, last).await,
        &mut last,
        "webhook_endpoint.disable",
        "webhook_endpoint",
        &id_text,
    );
    let enabled = json(url, &["webhook", "endpoint", "enable", &id_text]);
    assert_eq!(
        (&enabled["enabled"], &enabled["disabled_reason"]),
        (&Value::Bool(true), &Value::Null)
    );
    one_row(
        audit_rows_after(&app, last).await,
        &mut last,
        "webhook_endpoint.enable",
        "webhook_endpoint",
        &id_text,
    );

    let deleted = json(url, &["webhook", "endpoint", "delete", &id_text]);
    assert_eq!(deleted["deleted"], true);
    assert!(endpoint_row(&app, id).await.is_none());
    one_row(
        audit_rows_after(&app, last).await,
        &mut last,
        "webhook_endpoint.delete",
        "webhook_endpoint",
        &id_text,
    );
    let out = masterpay(url, &["webhook", "endpoint", "show", &id_text]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("error: webhook endpoint {id} does not exist\n")
    );

    // No audit row holds a secret.
    for row in audit_rows_after(&app, 0).await {
        let text = format!("{:?} {:?}", row.before, row.after);
        assert!(!text.contains("whsec_") && !text.contains("sealed:") && !text.contains("plain:"));
    }
}

/// A refused endpoint command says why in one line on stderr, exits
/// non-zero, and changes nothing.
async fn webhook_endpoint_bad_input_is_one_line_error_and_changes_nothing(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let existing = json(
        url,
        &[
            "webhook",
            "endpoint",
            "create",
            "--project",
            &project,
            "--url",
            "https://hooks.example.com/in",
        ],
    );
    let id = existing["id"].as_i64().unwrap().to_string();
    let long_url = format!("https://hooks.example.com/{}", "a".repeat(2048));
    let long_text = "x".repeat(501);
    let create = |extra: &[&str]| {
        let mut args = vec!["webhook", "endpoint", "create", "--project", &project];
        args.extend_from_slice(extra);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            create(&["--url", "ftp://hooks.example.com/in"]),
            "http:// or https://",
        ),
        (create(&["--url", "hooks.example.com/in"]), "not valid"),
        (
            create(&["--url", "https://user:secret@hooks.example.com/in"]),
            "user name or password",
        ),
        (create(&["--url", &long_url]), "at most 2048 characters"),
        (
            create(&[
                "--url",
                "https://hooks.example.com/in",
                "--events",
                "order.paid",
            ]),
            "order.paid",
        ),
        (
            create(&["--url", "https://hooks.example.com/in", "--events", ""]),
            "event type",
        ),
        (
            create(&[
                "--url",
                "https://hooks.example.com/in",
                "--description",
                &long_text,
            ]),
            "500",
        ),
        (
            [
                "webhook",
                "endpoint",
                "create",
                "--project",
                "999999",
                "--url",
                "https://hooks.example.com/in",
            ]
            .map(String::from)
            .to_vec(),
            "project 999999 does not exist",
        ),
        (
            ["webhook", "endpoint", "update", &id, "--url", "gopher://x"]
                .map(String::from)
                .to_vec(),
            "http://",
        ),
        (
            [
                "webhook",
                "endpoint",
                "update",
                &id,
                "--events",
                "order.created,nope",
            ]
            .map(String::from)
            .to_vec(),
            "nope",
        ),
        (
            ["webhook", "endpoint", "disable", "999999"]
                .map(String::from)
                .to_vec(),
            "does not exist",
        ),
    ];
    let tables = ["webhook_endpoints", "admin_audit_log"];
    let mut before = Vec::new();
    for t in tables {
        before.push(app.count(&format!("SELECT COUNT(*) FROM {t}")).await);
    }
    let row_before = endpoint_row(&app, id.parse().unwrap()).await;
    for (args, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = masterpay(url, &args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    for (t, count) in tables.iter().zip(before) {
        assert_eq!(
            app.count(&format!("SELECT COUNT(*) FROM {t}")).await,
            count,
            "{t}"
        );
    }
    assert_eq!(endpoint_row(&app, id.parse().unwrap()).await, row_before);
}

/// The command line is another process writing the file (SQLite) or the
/// database the running server writes: its orders and completions land
/// between the API's, and every one holds.
async fn orders_written_with_the_command_line_while_the_api_writes_all_hold(app: TestApp) {
    let url = app.database.url.clone();
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    for round in 0..3 {
        let created = app
            .create_order(
                Some(&token),
                None,
                &serde_json::json!({"user_id": user, "server_id": 0, "amount": "1.00",
                    "payment_system": "cstm:paygate"}),
            )
            .await;
        assert_eq!(created.reply.status, 201, "{}", created.reply.text);
        let api_order = created.reply.body["order_id"].as_str().unwrap().to_owned();
        let cli_order = json(
            &url,
            &[
                "order",
                "create",
                "--project",
                &app.project_id.to_string(),
                "--user",
                &user.to_string(),
                "--amount",
                "0.10",
                "--payment-system",
                "cstm:paygate",
            ],
        )["order_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let done = json(&url, &["order", "complete", &api_order]);
        assert_eq!(done["status"], "completed", "round {round}");
        let reply = app.complete_order(&token, &cli_order, "cstm:paygate").await;
        assert_eq!(reply.status, 200, "round {round}: {:?}", reply.body);
    }
    assert_eq!(app.main_balance(user, 0).await.to_string(), "3.30");
}

async fn audit_reports_an_order_without_the_event_its_endpoint_was_to_receive(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    json(
        url,
        &[
            "webhook",
            "endpoint",
            "create",
            "--project",
            &project,
            "--url",
            "https://hooks.example.com/in",
            "--events",
            "order.completed",
        ],
    );
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "4.00", "cstm:paygate").await;
    let completed = app.complete_order(&token, &order, "cstm:paygate").await;
    assert_eq!(completed.status, 200, "{}", completed.text);
    assert_eq!(json(url, &["audit"])["ok"], true);

    app.exec("DELETE FROM webhook_deliveries").await;
    app.exec(&format!(
        "DELETE FROM webhook_events WHERE order_id = '{order}'"
    ))
    .await;
    let failed = masterpay(url, &["audit", "--json"]);
    assert!(!failed.status.success());
    let report: Value = serde_json::from_slice(&failed.stdout).expect("one JSON object");
    assert_eq!(report["ok"], false);
    assert_eq!(
        report["findings"],
        serde_json::json!([format!(
            "order {order} of project {project} has no order.completed event, though an enabled \
             endpoint of its project received order.completed then"
        )])
    );

    // A retention below 14 days is refused before anything runs.
    let refused = masterpay_with_env(
        url,
        &["audit"],
        &[("MASTERPAY_WEBHOOK_RETENTION_DAYS", "13")],
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("webhook_retention_days must be at least 14"),
        "{stderr}"
    );
}

/// `webhook event list` pages a project's events newest first and finds an
/// order's; `webhook event show` prints the exact body sent and each
/// delivery by endpoint; an unknown event is a one-line error.
async fn webhook_events_are_listed_by_order_and_shown_with_their_deliveries(app: TestApp) {
    let url = app.database.url.clone();
    let url = url.as_str();
    let project = app.project_id.to_string();
    let endpoint = json(
        url,
        &[
            "webhook",
            "endpoint",
            "create",
            "--project",
            &project,
            "--url",
            "https://hooks.example.com/in",
        ],
    )["id"]
        .clone();
    let user = app.user("alice@example.com").await.to_string();
    let order = |amount: &str| {
        json(
            url,
            &[
                "order",
                "create",
                "--project",
                &project,
                "--user",
                &user,
                "--amount",
                amount,
                "--payment-system",
                "cstm:paygate",
            ],
        )["order_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = order("1.00");
    let second = order("2.00");
    json(url, &["order", "complete", &first]);

    let all = json(url, &["webhook", "event", "list", "--project", &project]);
    let events = all["events"].as_array().unwrap();
    let listed: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["order_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [
            ("order.completed", first.as_str()),
            ("order.created", second.as_str()),
            ("order.created", first.as_str())
        ]
    );
    assert_eq!(all["older"], Value::Null);
    let of_first = json(
        url,
        &[
            "webhook",
            "event",
            "list",
            "--project",
            &project,
            "--order",
            &first,
        ],
    );
    assert_eq!(of_first["events"].as_array().unwrap().len(), 2);
    let newest = json(
        url,
        &[
            "webhook",
            "event",
            "list",
            "--project",
            &project,
            "--limit",
            "1",
        ],
    );
    assert_eq!(newest["events"].as_array().unwrap().len(), 1);
    let before = newest["older"].as_i64().expect("an older page").to_string();
    let older = json(
        url,
        &[
            "webhook",
            "event",
            "list",
            "--project",
            &project,
            "--before",
            &before,
        ],
    );
    assert_eq!(older["events"].as_array().unwrap().len(), 2);

    let id = events[0]["id"].as_i64().unwrap().to_string();
    let shown = json(url, &["webhook", "event", "show", &id]);
    let body: Value = serde_json::from_str(shown["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["type"], "order.completed");
    assert_eq!(body["data"]["order_id"], first.as_str());
    let deliveries = shown["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "{shown}");
    assert_eq!(deliveries[0]["endpoint_id"], endpoint);
    let text = masterpay(url, &["webhook", "event", "show", &id]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(events[0]["webhook_id"].as_str().unwrap()),
        "{text}"
    );

    let missing = masterpay(url, &["webhook", "event", "show", "999999"]);
    assert!(!missing.status.success());
    let error = String::from_utf8(missing.stderr).unwrap();
    assert_eq!(error.lines().count(), 1, "{error}");
}
