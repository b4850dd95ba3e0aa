//! The command line (every command, text and `--json`), run as a user would:
//! the real binary against a fresh sqlite://, postgres:// and mysql:// database.

mod common;

use std::process::{Command, Output};

use common::TestApp;
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
);

fn masterpay(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(args)
        .env("MASTERPAY_DATABASE_URL", url)
        .env_remove("MASTERPAY_LOG")
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
            "balance", "set", "--user", &user, "--server", &server, "--main", "10.5", "--bonus",
            "2",
        ],
    );
    assert_eq!(
        (set["main_balance"].as_str(), set["bonus_balance"].as_str()),
        (Some("10.50"), Some("2.00"))
    );
    let set = json(url, &["balance", "set", "--user", &user, "--bonus", "1"]);
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
        masterpay::service::validate::is_order_id(order_id),
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
    let tables = [
        "projects",
        "users",
        "servers",
        "balances",
        "payment_orders",
        "app_tokens",
        "token_permissions",
        "operation_log",
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
            vec!["balance", "set", "--user", "999999", "--main", "1"],
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
            "not a valid e-mail",
        ),
        (
            vec!["balance", "set", "--user", &user, "--main", "1.234"],
            "at most two fraction digits",
        ),
        (
            vec!["balance", "set", "--user", &user, "--main", "-5"],
            "must not be negative",
        ),
        (
            vec!["balance", "set", "--user", &user, "--main", "abc"],
            "decimal number",
        ),
        (vec!["balance", "set", "--user", &user], "--main, --bonus"),
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
            "payment system",
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
            "order id",
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

async fn migrate_is_idempotent(app: TestApp) {
    let url = app.database.url.clone();
    for _ in 0..2 {
        assert_eq!(json(&url, &["migrate"])["migrated"], true);
    }
}

/// Several processes starting at once on an empty database all succeed and
/// leave one complete schema.
async fn concurrent_first_starts_migrate_safely(app: TestApp) {
    let fresh = common::TestDatabase::create(app.backend).await.unwrap();
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
    // Every answer is asked for many times, so that each of the
    // server's connections has read (and, on SQLite, cached) the token
    // before the next change.
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
    let reissued = json(url, &["token", "reissue", &id]);
    answers(&app, &token, &query, 403, Some("TOKEN_NOT_FOUND")).await;
    let new_token = reissued["token"].as_str().unwrap();
    answers(&app, new_token, &query, 200, None).await;
    json(url, &["token", "delete", &id]);
    answers(&app, new_token, &query, 403, Some("TOKEN_NOT_FOUND")).await;
}

/// Asks for the balance 64 times (twice the most connections a server has
/// for reads: 2 × CPUs, at most 32) and checks every answer.
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
