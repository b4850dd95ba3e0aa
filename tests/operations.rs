//! What an operator relies on: the ledger audit, database outages, logs that
//! never hold a token, request ids, metrics, configuration precedence and
//! graceful shutdown.

mod common;

use std::process::Command;

use common::{Backend, Reply, ServerProcess, TcpProxy, TestApp};
use masterpay::{app::Application, config::Settings, store::database};
use reqwest::Url;
use serde_json::{Value, json};

on_every_backend!(
    audit_passes_on_a_consistent_ledger_and_names_every_mismatch,
    token_values_never_appear_in_logs_even_at_trace_level,
    every_log_line_of_a_request_carries_its_request_id,
    request_id_is_echoed_or_generated,
    metrics_count_requests_and_completions_by_outcome,
    flags_beat_environment_and_environment_beats_the_config_file,
    sigterm_lets_the_server_finish_and_exit_cleanly,
    every_access_log_line_is_written_before_the_server_exits,
    the_schema_goes_down_and_up_again_and_holds_the_rules,
    entity_relations_are_the_foreign_keys_of_the_schema,
    readyz_says_why_while_the_database_refuses_writes_and_recovers_by_itself,
    metrics_have_a_listener_of_their_own_and_off_starts_none,
);

// An embedded file cannot become unreachable, and SQLite has no row locks
// (its writers queue in the process): these hold only for a server.
on_server_backends!(
    database_outage_fails_fast_with_json_and_recovers_by_itself,
    sigterm_drains_a_completion_in_flight,
    a_statement_stuck_on_a_row_lock_is_bounded_by_the_statement_timeout,
);

fn masterpay(url: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_masterpay"));
    cmd.args(args).env("MASTERPAY_DATABASE_URL", url);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run masterpay")
}

/// The migration goes down (every table dropped) and up again on a database
/// a running server has just used, and the schema it makes then holds: the
/// service completes an order and reads the balance, and the database itself
/// refuses what the rules forbid (a second row for an account, money out of
/// range, a balance whose project is not its user's, a log row without its
/// account or a second one for an order).
async fn the_schema_goes_down_and_up_again_and_holds_the_rules(app: TestApp) {
    use migration::{Migrator, MigratorTrait};
    use sea_orm::ConnectionTrait;
    // Used before the rollback, so that the server holds statements and
    // connections on the tables that go.
    let token = app.full_token().await;
    let user = app.user("before@example.com").await;
    let order = app.order(user, None, "1.00", "cstm:paygate").await;
    let reply = app.complete_order(&token, &order, "cstm:paygate").await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    let tables = match app.backend {
        Backend::Sqlite => {
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' \
             AND name NOT IN ('seaql_migrations', 'sqlite_sequence')"
        }
        Backend::Postgres => {
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name <> 'seaql_migrations'"
        }
        Backend::MySql => {
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name <> 'seaql_migrations'"
        }
    };
    assert_eq!(app.count(tables).await, 17);
    Migrator::down(&app.db, None).await.expect("down");
    assert_eq!(app.count(tables).await, 0, "down drops every table");
    Migrator::up(&app.db, None).await.expect("up");
    assert_eq!(app.count(tables).await, 17);
    let storage = match app.backend {
        Backend::Sqlite => Some(
            "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'balances' \
             AND sql LIKE '%WITHOUT ROWID'",
        ),
        Backend::Postgres => Some(
            "SELECT COUNT(*) FROM pg_class WHERE relname IN ('payment_orders', 'balances') \
             AND relnamespace = current_schema()::regnamespace \
             AND 'fillfactor=90' = ANY(reloptions)",
        ),
        Backend::MySql => None,
    };
    if let Some(storage) = storage {
        let expected = if app.backend == Backend::Postgres {
            2
        } else {
            1
        };
        assert_eq!(app.count(storage).await, expected, "{storage}");
    }

    // Everything again, from an empty schema. Ids start over with the
    // tables, so the project made again is the test's own.
    let project = app.project("Test project").await;
    assert_eq!(project, app.project_id);
    let token = app.full_token().await;
    let user = app.user("after@example.com").await;
    let server = app.server("again").await;
    let other = app.project("Other").await;
    let stranger = app.user_in(other, "stranger@example.com").await;
    app.set_balance(user, None, "5.00", "6.00").await;
    let order = app.order(user, Some(server), "3.10", "cstm:paygate").await;
    let reply = app.complete_order(&token, &order, "cstm:paygate").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = app
        .get_balance(Some(&token), &format!("server_id={server}&user_id={user}"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["main_balance"], "3.10");
    let reply = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(reply.body["bonus_balance"], "6.00");

    let balance = |user_id: i64, server_id: i64, cents: &str, project_id: i64| {
        format!(
            "INSERT INTO balances (user_id, server_id, main_cents, bonus_cents, updated_at, project_id) \
             VALUES ({user_id}, {server_id}, {cents}, 0, '2026-01-01 00:00:00', {project_id})"
        )
    };
    let log = |user_id: i64, server_id: i64, order_ref: &str| {
        format!(
            "INSERT INTO operation_log (kind, order_ref, user_id, server_id, balance_type, \
             amount_cents, balance_before_cents, balance_after_cents, created_at) \
             VALUES ('balance_set', {order_ref}, {user_id}, {server_id}, 'main', 0, 0, 0, \
             '2026-01-01 00:00:00')"
        )
    };
    let order_ref = app
        .count(&format!(
            "SELECT id FROM payment_orders WHERE order_id = '{order}'"
        ))
        .await
        .to_string();
    for (refused, why) in [
        (
            balance(user, 0, "1", project),
            "a second row for an account",
        ),
        (balance(user, 999, "-1", project), "a negative balance"),
        (
            balance(user, 999, "100000000000000000", project),
            "a balance above the ceiling",
        ),
        (balance(user, -1, "0", project), "a negative server id"),
        (
            balance(user, 999, "0", other),
            "another project than the user's",
        ),
        (
            balance(stranger, 999, "0", project),
            "another project than the user's",
        ),
        (balance(user + 1000, 999, "0", project), "an unknown user"),
        (
            log(user, 999, "NULL"),
            "a log row of an account without a balance",
        ),
        (
            log(user, server, &order_ref),
            "a second log row for an order",
        ),
    ] {
        assert!(
            app.db.execute_unprepared(&refused).await.is_err(),
            "{why} is refused: {refused}"
        );
    }
    // Amounts default to zero, and with its account there the log row goes in.
    app.exec(&format!(
        "INSERT INTO balances (user_id, server_id, updated_at, project_id) \
         VALUES ({user}, 999, '2026-01-01 00:00:00', {project})"
    ))
    .await;
    assert_eq!(
        app.count(&format!(
            "SELECT COUNT(*) FROM balances WHERE user_id = {user} AND server_id = 999 \
             AND main_cents = 0 AND bonus_cents = 0"
        ))
        .await,
        1
    );
    app.exec(&log(user, 999, "NULL")).await;
}

/// The entities' `belongs_to` relations are exactly the database's foreign
/// keys: same columns, same referenced key, same `ON DELETE`, and (where the
/// database keeps them; SQLite does not) same names.
async fn entity_relations_are_the_foreign_keys_of_the_schema(app: TestApp) {
    use sea_orm::{
        ConnectionTrait, Iterable, RelationTrait, Statement,
        sea_query::{ForeignKeyCreateStatement, TableName, TableRef},
    };
    let named = app.backend != Backend::Sqlite;
    let key = |name: &str,
               table: &str,
               columns: &[String],
               to: &str,
               to_columns: &[String],
               on_delete: &str| {
        let name = if named { name } else { "" };
        format!(
            "{name}: {table} ({}) -> {to} ({}) ON DELETE {}",
            columns.join(", "),
            to_columns.join(", "),
            on_delete.to_uppercase()
        )
    };

    fn belongs_to<R: RelationTrait + Iterable>() -> Vec<ForeignKeyCreateStatement> {
        R::iter()
            .map(|relation| relation.def())
            // sea-orm marks `belongs_to` as the side that is not the owner.
            .filter(|def| !def.is_owner)
            .map(Into::<ForeignKeyCreateStatement>::into)
            .collect()
    }
    let table_name = |table: Option<&TableRef>| match table {
        Some(TableRef::Table(TableName(_, name), _)) => name.to_string(),
        other => panic!("not a table: {other:?}"),
    };
    let mut declared: Vec<String> = [
        belongs_to::<entity::project::Relation>(),
        belongs_to::<entity::user::Relation>(),
        belongs_to::<entity::server::Relation>(),
        belongs_to::<entity::balance::Relation>(),
        belongs_to::<entity::payment_order::Relation>(),
        belongs_to::<entity::app_token::Relation>(),
        belongs_to::<entity::token_permission::Relation>(),
        belongs_to::<entity::operation_log::Relation>(),
        belongs_to::<entity::administrator::Relation>(),
        belongs_to::<entity::admin_session::Relation>(),
        belongs_to::<entity::admin_login_link::Relation>(),
        belongs_to::<entity::admin_sign_in_failure::Relation>(),
        belongs_to::<entity::admin_audit_entry::Relation>(),
        belongs_to::<entity::webhook_endpoint::Relation>(),
        belongs_to::<entity::webhook_event::Relation>(),
        belongs_to::<entity::webhook_delivery::Relation>(),
        belongs_to::<entity::webhook_attempt::Relation>(),
    ]
    .concat()
    .iter()
    .map(|statement| {
        let fk = statement.get_foreign_key();
        key(
            fk.get_name().expect("a named key"),
            &table_name(fk.get_table()),
            &fk.get_columns(),
            &table_name(fk.get_ref_table()),
            &fk.get_ref_columns(),
            &format!("{:?}", fk.get_on_delete().expect("ON DELETE declared")),
        )
    })
    .collect();
    declared.sort();

    // One row per column of a key: its name (SQLite: its number within the
    // table), table, column, referenced table, referenced column, action.
    let sql = match app.backend {
        Backend::Sqlite => {
            "SELECT CAST(p.id AS TEXT), m.name, p.\"from\", p.\"table\", p.\"to\", p.on_delete \
             FROM sqlite_schema AS m, pragma_foreign_key_list(m.name) AS p \
             WHERE m.type = 'table' ORDER BY m.name, p.id, p.seq"
        }
        Backend::Postgres => {
            "SELECT c.conname::text, c.conrelid::regclass::text, a.attname::text, \
             c.confrelid::regclass::text, r.attname::text, \
             CASE c.confdeltype WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE' \
             ELSE c.confdeltype::text END \
             FROM pg_constraint AS c, unnest(c.conkey, c.confkey) WITH ORDINALITY AS k(col, ref, n), \
             pg_attribute AS a, pg_attribute AS r \
             WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace \
             AND a.attrelid = c.conrelid AND a.attnum = k.col \
             AND r.attrelid = c.confrelid AND r.attnum = k.ref \
             ORDER BY 2, 1, k.n"
        }
        Backend::MySql => {
            "SELECT k.constraint_name, k.table_name, k.column_name, k.referenced_table_name, \
             k.referenced_column_name, c.delete_rule \
             FROM information_schema.key_column_usage AS k \
             JOIN information_schema.referential_constraints AS c \
             ON c.constraint_schema = k.constraint_schema AND c.constraint_name = k.constraint_name \
             WHERE k.table_schema = DATABASE() AND k.referenced_table_name IS NOT NULL \
             ORDER BY k.table_name, k.constraint_name, k.ordinal_position"
        }
    };
    let rows = app
        .db
        .query_all_raw(Statement::from_string(app.backend_kind(), sql))
        .await
        .expect("foreign keys");
    struct Found {
        name: String,
        table: String,
        columns: Vec<String>,
        to: String,
        to_columns: Vec<String>,
        on_delete: String,
    }
    let mut keys: Vec<Found> = Vec::new();
    for row in rows {
        let text = |i: usize| row.try_get_by_index::<String>(i).expect("text");
        let (name, table) = (text(0), text(1));
        match keys.last_mut() {
            Some(last) if last.name == name && last.table == table => {
                last.columns.push(text(2));
                last.to_columns.push(text(4));
            }
            _ => keys.push(Found {
                name,
                table,
                columns: vec![text(2)],
                to: text(3),
                to_columns: vec![text(4)],
                on_delete: text(5),
            }),
        }
    }
    let mut found: Vec<String> = keys
        .iter()
        .map(|k| {
            key(
                &k.name,
                &k.table,
                &k.columns,
                &k.to,
                &k.to_columns,
                &k.on_delete,
            )
        })
        .collect();
    found.sort();
    assert_eq!(found, declared);
}

async fn audit_passes_on_a_consistent_ledger_and_names_every_mismatch(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    app.set_balance(user, None, "10", "3").await;
    let order = app.order(user, None, "2.50", "cstm:paygate").await;
    app.order(user, None, "1", "cstm:paygate").await; // stays pending
    assert_eq!(
        app.complete_order(&token, &order, "cstm:paygate")
            .await
            .status,
        200
    );
    app.set_balance(user, None, "4", "3").await; // a decrease, logged too
    let url = app.database.url.clone();
    let out = masterpay(&url, &["audit"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ledger consistent"));

    // Tamper with a balance behind the service's back, and fake a completion.
    app.exec(&format!(
        "UPDATE balances SET main_cents = main_cents + 1 WHERE user_id = {user}"
    ))
    .await;
    let pending = app.order(user, None, "9", "cstm:paygate").await;
    app.exec(&format!(
        "UPDATE payment_orders SET status = 'completed', completed_at = created_at \
         WHERE order_id = '{pending}'"
    ))
    .await;
    // A cancelled order credited behind the service's back (its real credit
    // moved to it), and an order cancelled without its time.
    let cancelled = app.order(user, None, "2.50", "cstm:paygate").await;
    app.exec(&format!(
        "UPDATE payment_orders SET status = 'cancelled', cancelled_at = created_at \
         WHERE order_id = '{cancelled}'"
    ))
    .await;
    app.exec(&format!(
        "UPDATE operation_log SET order_ref = \
            (SELECT id FROM payment_orders WHERE order_id = '{cancelled}') \
         WHERE order_ref = (SELECT id FROM payment_orders WHERE order_id = '{order}')"
    ))
    .await;
    let untimed = app.order(user, None, "1", "cstm:paygate").await;
    app.exec(&format!(
        "UPDATE payment_orders SET status = 'cancelled' WHERE order_id = '{untimed}'"
    ))
    .await;
    let out = masterpay(&url, &["audit", "--json"], &[]);
    assert!(!out.status.success(), "audit must fail");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    let findings: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(findings.len(), 5, "{findings:?}");
    assert!(
        findings
            .iter()
            .any(|f| f.contains("balance 4.01 but the log sums to 4.00")),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.contains(&pending) && f.contains("0 log rows")),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.contains(&order) && f.contains("0 log rows")),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.contains(&cancelled) && f.contains("which is cancelled")),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.contains(&untimed) && f.contains("times say otherwise")),
        "{findings:?}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("5 mismatches"));
}

async fn database_outage_fails_fast_with_json_and_recovers_by_itself(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "5", "cstm:paygate").await;
    let direct = Url::parse(&app.database.url).unwrap();
    let target = format!("{}:{}", direct.host_str().unwrap(), direct.port().unwrap());
    let proxy = TcpProxy::start(target).await;
    let mut via_proxy = direct.clone();
    via_proxy.set_port(Some(proxy.port)).unwrap();
    // The service's own defaults: what an operator gets. On a free port and
    // without the panel, whose default address may be taken.
    let settings = Settings {
        database_url: via_proxy.to_string(),
        listen: "127.0.0.1:0".into(),
        admin_listen: None,
        metrics_listen: None,
        ..Settings::default()
    };
    let db = database::connect(&settings.database_url, &settings.pool)
        .await
        .unwrap();
    let server = Application::build(&settings, db).await.unwrap();
    let base = format!("http://127.0.0.1:{}", server.port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(server.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let balance = || {
        client
            .get(format!(
                "{base}/v2/master-account/balance?server_id=0&user_id={user}"
            ))
            .bearer_auth(&token)
            .send()
    };
    let complete = || {
        client
            .post(format!("{base}/v2/payment/order/complete"))
            .bearer_auth(&token)
            .json(&json!({"payment_system": "cstm:paygate", "order_id": order}))
            .send()
    };
    assert_eq!(balance().await.unwrap().status(), 200);

    proxy.cut();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let r = balance().await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(r.status(), 503);
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            body,
            json!({"success": false, "code": "SERVICE_UNAVAILABLE"})
        );
        // The panel's webhook caller gives up after 3 s; the answer must come first.
        assert!(
            elapsed < std::time::Duration::from_secs(3),
            "took {elapsed:?}"
        );
        let r = complete().await.unwrap();
        assert_eq!(r.status(), 503);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["success"], false);
    }
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);

    proxy.restore();
    let mut recovered = false;
    for _ in 0..20 {
        if balance().await.unwrap().status() == 200 {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "the service did not recover by itself");
    // /readyz keeps its answer for a second: it turns 200 within a few.
    let mut ready = false;
    for _ in 0..400 {
        let status = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status();
        if status == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ready, "/readyz did not recover by itself");
    assert_eq!(complete().await.unwrap().status(), 200);
    assert_eq!(complete().await.unwrap().status(), 409);
    assert_eq!(
        app.main_balance(user, 0).await.to_string(),
        "5.00",
        "credited exactly once"
    );
    let _ = stop.send(());
    let _ = handle.await;
}

/// While the database refuses writes, /readyz answers 503 with the reason
/// and a completion a retryable JSON 503 that changes nothing; once it
/// accepts them again, both recover by themselves. How each backend is made
/// to refuse them is in [`Refusal`].
async fn readyz_says_why_while_the_database_refuses_writes_and_recovers_by_itself(app: TestApp) {
    let refusal = match app.backend {
        Backend::Postgres => Refusal::ReadOnlyDatabase,
        Backend::MySql => Refusal::ReadOnlySessions,
        Backend::Sqlite => Refusal::ImmutableFile,
    };
    readyz_while_writes_are_refused(app, refusal).await;
}

/// [`readyz_says_why_while_the_database_refuses_writes_and_recovers_by_itself`]
/// on MariaDB in `read_only` mode, the setting a failover tool sets: on a
/// server of the test's own (the setting is global), the service connecting
/// as a user that `read_only` binds (no `READ_ONLY ADMIN`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_mysql_url, ignore = "MASTERPAY_TEST_MYSQL_URL is not set")]
async fn readyz_says_why_while_mariadb_is_in_read_only_mode() {
    let server = OwnMariaDb::start().await;
    let database = common::TestDatabase::on_own_server(Backend::MySql, server.service_url());
    let app = TestApp::spawn_on(database, |_| {}).await;
    let root_url = server.root_url();
    readyz_while_writes_are_refused(app, Refusal::ServerReadOnly { root_url }).await;
}

async fn readyz_while_writes_are_refused(app: TestApp, refusal: Refusal) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let first = app.order(user, None, "1", "cstm:paygate").await;
    let second = app.order(user, None, "2", "cstm:paygate").await;
    assert_eq!(
        app.complete_order(&token, &first, "cstm:paygate")
            .await
            .status,
        200
    );
    let ready = readyz(&app).await;
    assert_eq!(
        (ready.status, &ready.body),
        (200, &json!({"status": "ready"}))
    );

    let refusal = refusal.start(&app).await;
    let refused = app.complete_order(&token, &second, "cstm:paygate").await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert!(refused.content_type.starts_with("application/json"));
    assert_eq!(refused.body["success"], false, "{}", refused.text);
    // SERVICE_UNAVAILABLE when the token's read met a connection that the
    // PostgreSQL server ended.
    assert!(
        ["PAYMENT_PROCESSING_ERROR", "SERVICE_UNAVAILABLE"].contains(&refused.code()),
        "{}",
        refused.text
    );
    // A pooled connection the refusal ended may answer one check first as
    // "database unreachable" (true, and also a 503); the next check says why.
    let not_ready = readyz_until(&app, |r| {
        r.status == 503 && r.body["reason"] != "database unreachable"
    })
    .await;
    assert_eq!(
        not_ready.body,
        json!({"status": "not_ready", "reason": "database is read-only"}),
        "{}",
        not_ready.text
    );
    assert!(not_ready.content_type.starts_with("application/json"));
    assert_eq!(app.main_balance(user, 0).await.to_string(), "1.00");
    let order = app
        .read_order(Some(&token), &format!("order_id={second}"))
        .await;
    assert_eq!(order.body["status"], "pending", "{}", order.text);

    refusal.end().await;
    let ready = readyz_until(&app, |r| r.status == 200).await;
    assert_eq!(ready.body, json!({"status": "ready"}));
    let completed = app.complete_order(&token, &second, "cstm:paygate").await;
    assert_eq!(completed.status, 200, "{}", completed.text);
    assert_eq!(app.main_balance(user, 0).await.to_string(), "3.00");
}

async fn readyz(app: &TestApp) -> Reply {
    app.send(app.client.get(app.url("/readyz"))).await
}

/// Asks /readyz until `done` holds, at most 400 times 50 ms apart: its
/// answer is kept for a second, so a change shows within a few.
async fn readyz_until(app: &TestApp, done: impl Fn(&Reply) -> bool) -> Reply {
    let mut reply = readyz(app).await;
    for _ in 0..400 {
        if done(&reply) {
            return reply;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        reply = readyz(app).await;
    }
    panic!(
        "/readyz never answered as expected: {} {}",
        reply.status, reply.text
    );
}

/// How a test makes the database refuse the service's writes, without
/// touching the shared servers' global settings.
enum Refusal {
    /// PostgreSQL: the test database set read-only for the sessions to come
    /// (`ALTER DATABASE ... SET default_transaction_read_only`) and the
    /// service's sessions ended, as a failover that leaves it on a
    /// read-only node does; ended by `RESET`.
    ReadOnlyDatabase,
    /// MariaDB: `read_only` is global, so not on the shared server: the
    /// service's pooled sessions are made read-only instead (`SET SESSION
    /// TRANSACTION READ ONLY`), whose writes the server refuses (1792). It
    /// ends by itself: the service closes each session on which a write was
    /// refused and opens writable ones.
    ReadOnlySessions,
    /// MariaDB in `read_only` mode (1290), on a server of the test's own,
    /// whose root is `root_url`; ended by turning it off.
    ServerReadOnly { root_url: String },
    /// SQLite: the database file and its write-ahead log made immutable
    /// (`chattr +i`, which binds root too; the tests run as root, for whom
    /// permissions do not): the next write fails with an I/O error, and the
    /// file opens read-only. Ended by `chattr -i`.
    ImmutableFile,
}

/// A [`Refusal`] in force, until [`Refused::end`].
enum Refused {
    ReadOnlyDatabase {
        admin: sea_orm::DatabaseConnection,
        name: String,
    },
    ReadOnlySessions,
    ServerReadOnly(sea_orm::DatabaseConnection),
    ImmutableFile(ImmutableFiles),
}

impl Refusal {
    async fn start(self, app: &TestApp) -> Refused {
        use sea_orm::ConnectionTrait;
        match self {
            Refusal::ReadOnlyDatabase => {
                let admin_url = std::env::var("MASTERPAY_TEST_POSTGRES_URL").unwrap();
                let admin = sea_orm::Database::connect(admin_url.as_str())
                    .await
                    .unwrap();
                let url = Url::parse(&app.database.url).unwrap();
                let name = url.path().trim_start_matches('/').to_owned();
                for sql in [
                    format!("ALTER DATABASE {name} SET default_transaction_read_only = on"),
                    format!(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = '{name}' AND pid <> pg_backend_pid()"
                    ),
                ] {
                    admin.execute_unprepared(&sql).await.unwrap();
                }
                Refused::ReadOnlyDatabase { admin, name }
            }
            Refusal::ReadOnlySessions => {
                // Every session of the pool read-only (all held at once, so
                // none is missed), and at least three of them, so that the
                // completion's and /readyz's checks meet one.
                let pool = app.db.get_mysql_connection_pool();
                let mut sessions = Vec::new();
                while sessions.len() < (pool.size() as usize).max(3) {
                    sessions.push(pool.acquire().await.unwrap());
                }
                for conn in &mut sessions {
                    sea_orm::sqlx::query("SET SESSION TRANSACTION READ ONLY")
                        .execute(&mut **conn)
                        .await
                        .unwrap();
                }
                // A connection goes back to its pool in a task of its own:
                // until all are back, a request would open a writable one.
                let held = sessions.len();
                drop(sessions);
                let mut back = false;
                for _ in 0..400 {
                    if pool.num_idle() >= held {
                        back = true;
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                assert!(back, "the read-only sessions did not go back to the pool");
                Refused::ReadOnlySessions
            }
            Refusal::ServerReadOnly { root_url } => {
                let root = sea_orm::Database::connect(root_url.as_str()).await.unwrap();
                root.execute_unprepared("SET GLOBAL read_only = 1")
                    .await
                    .unwrap();
                Refused::ServerReadOnly(root)
            }
            Refusal::ImmutableFile => {
                let path = app.database.url.trim_start_matches("sqlite://").to_owned();
                Refused::ImmutableFile(ImmutableFiles::set(vec![
                    path.clone().into(),
                    format!("{path}-wal").into(),
                ]))
            }
        }
    }
}

impl Refused {
    async fn end(self) {
        use sea_orm::ConnectionTrait;
        match self {
            Refused::ReadOnlyDatabase { admin, name } => {
                let sql = format!("ALTER DATABASE {name} RESET default_transaction_read_only");
                admin.execute_unprepared(&sql).await.unwrap();
                admin.close().await.unwrap();
            }
            Refused::ReadOnlySessions => {}
            Refused::ServerReadOnly(root) => {
                root.execute_unprepared("SET GLOBAL read_only = 0")
                    .await
                    .unwrap();
                root.close().await.unwrap();
            }
            Refused::ImmutableFile(files) => drop(files),
        }
    }
}

/// A MariaDB server of the test's own, on a free port, with a fresh data
/// directory (about 5 s to make and start); killed when dropped. Its
/// database `masterpay` belongs to the user `masterpay`, who has every
/// privilege on it and none on the server.
struct OwnMariaDb {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl OwnMariaDb {
    async fn start() -> OwnMariaDb {
        use sea_orm::ConnectionTrait;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let installed = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root",
            ])
            .output()
            .expect("run mariadb-install-db");
        assert!(
            installed.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
        let port = common::free_port();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("socket").display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--user=root", "--skip-log-bin"])
            .arg("--innodb-buffer-pool-size=16M")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run mariadbd");
        let mut server = OwnMariaDb { child, port, dir };
        let mut root = None;
        for _ in 0..400 {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("mariadbd exited with {status}: {}", server.log());
            }
            if let Ok(conn) = sea_orm::Database::connect(server.root_url().as_str()).await {
                root = Some(conn);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let root = root.unwrap_or_else(|| panic!("mariadbd never answered: {}", server.log()));
        for sql in [
            "CREATE DATABASE masterpay",
            "CREATE USER 'masterpay'@'%'",
            "GRANT ALL ON masterpay.* TO 'masterpay'@'%'",
        ] {
            root.execute_unprepared(sql).await.unwrap();
        }
        root.close().await.unwrap();
        server
    }

    fn root_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }

    fn service_url(&self) -> String {
        format!("mysql://masterpay@127.0.0.1:{}/masterpay", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for OwnMariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Files made immutable (`chattr +i`) until this is dropped.
struct ImmutableFiles(Vec<std::path::PathBuf>);

impl ImmutableFiles {
    fn set(paths: Vec<std::path::PathBuf>) -> ImmutableFiles {
        let files = ImmutableFiles(paths);
        let out = Command::new("chattr")
            .arg("+i")
            .args(&files.0)
            .output()
            .expect("run chattr");
        assert!(
            out.status.success(),
            "chattr +i (needs root and ext4): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        files
    }
}

impl Drop for ImmutableFiles {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").args(&self.0).status();
    }
}

async fn token_values_never_appear_in_logs_even_at_trace_level(app: TestApp) {
    let url = app.database.url.clone();
    let trace = [("MASTERPAY_LOG", "trace")];
    let project = app.project_id.to_string();
    let created = masterpay(
        &url,
        &[
            "token",
            "create",
            "--project",
            &project,
            "--name",
            "t",
            "--allow",
            "master-account/balance,payment/order/complete",
            "--json",
        ],
        &trace,
    );
    let created_json: Value = serde_json::from_slice(&created.stdout).unwrap();
    let token = created_json["token"].as_str().unwrap().to_owned();
    let reissued = masterpay(
        &url,
        &[
            "token",
            "reissue",
            &created_json["id"].to_string(),
            "--json",
        ],
        &trace,
    );
    let new_token = serde_json::from_slice::<Value>(&reissued.stdout).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    let mut server = ServerProcess::start(&url, &trace).await;
    let client = reqwest::Client::new();
    let unknown = "Q".repeat(64);
    for t in [&token, &new_token, &unknown, &"short".to_owned()] {
        client
            .get(format!(
                "{}/v2/master-account/balance?server_id=0&user_id={user}",
                server.base
            ))
            .bearer_auth(t)
            .send()
            .await
            .unwrap();
        client
            .post(format!("{}/v2/payment/order/complete", server.base))
            .bearer_auth(t)
            .json(&json!({"payment_system": "cstm:paygate", "order_id": order}))
            .send()
            .await
            .unwrap();
    }
    // The log is complete once the server has exited (lines are written by
    // a thread of their own, which the exit waits for).
    assert!(server.terminate().success());
    let logs = format!(
        "{}{}{}",
        server.log(),
        String::from_utf8_lossy(&created.stderr),
        String::from_utf8_lossy(&reissued.stderr)
    );
    assert!(logs.contains("request finished"), "trace logs were written");
    for secret in [&token, &new_token, &unknown] {
        assert!(
            !logs.contains(secret.as_str()),
            "a token value is in the logs"
        );
    }
    // Nor in the database, in any column of any token.
    let stored = app.count(&format!(
        "SELECT COUNT(*) FROM app_tokens WHERE token_hash = '{token}' OR token_hash = '{new_token}' OR name = '{token}'"
    )).await;
    assert_eq!(stored, 0);
}

async fn every_log_line_of_a_request_carries_its_request_id(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    let mut server = ServerProcess::start(
        &app.database.url,
        &[("MASTERPAY_LOG", "debug"), ("MASTERPAY_LOG_FORMAT", "json")],
    )
    .await;
    let r = reqwest::Client::new()
        .post(format!("{}/v2/payment/order/complete", server.base))
        .bearer_auth(&token)
        .header("X-Request-Id", "webhook-42")
        .json(&json!({"payment_system": "cstm:paygate", "order_id": order}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(server.terminate().success());
    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &Value| l["span"]["request_id"] == "webhook-42")
        .collect();
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert!(messages.contains(&"order completed"), "{messages:?}\n{log}");
    assert!(messages.contains(&"request finished"), "{messages:?}");
    // Every line that mentions the order belongs to the request's span.
    for line in log.lines().filter(|l| l.contains(&order)) {
        let v: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(v["span"]["request_id"], "webhook-42", "{line}");
    }
}

async fn request_id_is_echoed_or_generated(app: TestApp) {
    let given = app
        .client
        .get(app.url("/healthz"))
        .header("X-Request-Id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(given.headers()["x-request-id"], "abc-123");
    let generated = app.client.get(app.url("/nothing")).send().await.unwrap();
    let id = generated.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 20);
    let unsafe_id = app
        .client
        .get(app.url("/healthz"))
        .header("X-Request-Id", "x".repeat(500))
        .send()
        .await
        .unwrap();
    assert_eq!(
        unsafe_id.headers()["x-request-id"].len(),
        20,
        "replaced, not echoed"
    );
}

async fn metrics_count_requests_and_completions_by_outcome(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "1", "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:paygate").await;
    app.complete_order(&token, &order, "cstm:paygate").await;
    app.complete_order(&token, "Order:nosuch123", "cstm:paygate")
        .await;
    app.get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    app.send(
        app.client
            .get(app.url("/v2/some/thing/1234"))
            .bearer_auth(&token),
    )
    .await;
    let metrics = format!("{}/metrics", app.metrics_base.as_deref().unwrap());
    let text = app.send(app.client.get(metrics)).await.text;
    for line in [
        r#"masterpay_order_completions_total{outcome="completed"} 1"#,
        r#"masterpay_order_completions_total{outcome="already_completed"} 1"#,
        r#"masterpay_order_completions_total{outcome="order_not_found"} 1"#,
        r#"masterpay_http_requests_total{endpoint="/v2/payment/order/complete",method="POST",status="409"} 1"#,
        r#"masterpay_http_requests_total{endpoint="/v2/master-account/balance",method="GET",status="200"} 1"#,
        r#"masterpay_http_requests_total{endpoint="/v2/other",method="GET",status="404"} 1"#,
        r#"masterpay_http_request_duration_seconds_count{endpoint="/v2/master-account/balance",method="GET",status="200"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    assert!(text.contains("masterpay_db_pool_connections{state=\"idle\"}"));
    // The test pool asks for 10; SQLite caps its pool at 8 (one writer at a time).
    let max = if app.backend == Backend::Sqlite {
        8
    } else {
        10
    };
    assert!(
        text.contains(&format!("masterpay_db_pool_max_connections {max}")),
        "{text}"
    );
}

/// `/metrics` is served on a listener of its own (`metrics_listen`), which
/// serves nothing else; the API's listener answers it with its JSON 404, as
/// any unknown path. With `metrics_listen = off` the server listens on the
/// API's address alone.
async fn metrics_have_a_listener_of_their_own_and_off_starts_none(app: TestApp) {
    let metrics = app
        .metrics_base
        .clone()
        .expect("the tests' metrics listener");
    app.send(app.client.get(app.url("/metrics")))
        .await
        .assert_error(404, "NOT_FOUND");
    let scraped = app.send(app.client.get(format!("{metrics}/metrics"))).await;
    assert_eq!(scraped.status, 200);
    assert!(
        scraped.content_type.starts_with("text/plain"),
        "{}",
        scraped.content_type
    );
    assert!(
        scraped.text.contains(
            r#"masterpay_http_requests_total{endpoint="other",method="GET",status="404"} 1"#
        ),
        "{}",
        scraped.text
    );
    for path in [
        "/readyz",
        "/healthz",
        "/v2/master-account/balance",
        "/docs/",
    ] {
        let other = app.send(app.client.get(format!("{metrics}{path}"))).await;
        assert_eq!(other.status, 404, "{path}: {}", other.text);
    }

    // The binary, with the setting from its environment.
    let port = common::free_port();
    let address = format!("127.0.0.1:{port}");
    let server = ServerProcess::start(
        &app.database.url,
        &[("MASTERPAY_METRICS_LISTEN", address.as_str())],
    )
    .await;
    let scraped = app
        .send(app.client.get(format!("http://{address}/metrics")))
        .await;
    assert_eq!(scraped.status, 200);
    assert!(
        scraped.text.contains(r#"endpoint="/readyz""#),
        "{}",
        scraped.text
    );
    let api_port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    let mut ports = listening_ports(server.child.id());
    ports.sort_unstable();
    let mut expected = vec![api_port, port];
    expected.sort_unstable();
    assert_eq!(ports, expected);
    drop(server);

    let server =
        ServerProcess::start(&app.database.url, &[("MASTERPAY_METRICS_LISTEN", "off")]).await;
    let api_port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(listening_ports(server.child.id()), [api_port]);
    assert!(
        !server.log().contains("metrics listening"),
        "{}",
        server.log()
    );
}

/// The TCP ports process `pid` listens on: its sockets (`/proc/PID/fd`)
/// that `/proc/net/tcp` and `tcp6` list in the LISTEN state.
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the process's descriptors")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            let inode = target.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_owned())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, state (0A: LISTEN), inode.
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state == "0A" && inodes.iter().any(|own| own == inode) {
                let port = local.rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

async fn flags_beat_environment_and_environment_beats_the_config_file(app: TestApp) {
    let dir = tempfile::tempdir().unwrap();
    let (file_port, env_port, flag_port) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let config = dir.path().join("masterpay.toml");
    std::fs::write(
        &config,
        format!("database_url = \"{}\"\nlisten = \"127.0.0.1:{file_port}\"\nrequest_timeout_ms = 2000\n", app.database.url),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let start = |extra_env: Vec<(&'static str, String)>, args: Vec<String>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_masterpay"));
        cmd.arg("--config")
            .arg(&config)
            .arg("serve")
            .args(args)
            .env_remove("MASTERPAY_DATABASE_URL")
            .env_remove("MASTERPAY_LISTEN")
            .env("MASTERPAY_ADMIN_LISTEN", "off")
            .env("MASTERPAY_METRICS_LISTEN", "off")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    };
    let client = reqwest::Client::new();
    let ready = |port: u16| {
        let client = client.clone();
        async move {
            for _ in 0..600 {
                if let Ok(r) = client
                    .get(format!("http://127.0.0.1:{port}/readyz"))
                    .send()
                    .await
                    && r.status() == 200
                {
                    return true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            false
        }
    };
    let mut from_file = start(vec![], vec![]);
    assert!(ready(file_port).await, "file's listen address used");
    let _ = from_file.kill();
    let mut from_env = start(
        vec![("MASTERPAY_LISTEN", format!("127.0.0.1:{env_port}"))],
        vec![],
    );
    assert!(ready(env_port).await, "environment beats the file");
    let _ = from_env.kill();
    let mut from_flag = start(
        vec![("MASTERPAY_LISTEN", format!("127.0.0.1:{env_port}"))],
        vec!["--listen".into(), format!("127.0.0.1:{flag_port}")],
    );
    assert!(ready(flag_port).await, "flag beats the environment");
    let _ = from_flag.kill();
    let _ = (from_file.wait(), from_env.wait(), from_flag.wait());
    // A bad file is one clear error.
    std::fs::write(
        dir.path().join("bad.toml"),
        "request_timeout_ms = \"soon\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args([
            "--config",
            dir.path().join("bad.toml").to_str().unwrap(),
            "migrate",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("bad.toml"), "{stderr}");
}

/// Log lines are written by a thread of their own (see `telemetry`); none
/// of them may be lost when the server stops: one access-log line per
/// request, each with its request id.
async fn every_access_log_line_is_written_before_the_server_exits(app: TestApp) {
    let mut server = ServerProcess::start(&app.database.url, &[]).await;
    let client = reqwest::Client::new();
    let requests = 300;
    let answers = futures::future::join_all((0..requests).map(|i| {
        client
            .get(format!("{}/healthz", server.base))
            .header("X-Request-Id", format!("burst-{i:04}"))
            .send()
    }))
    .await;
    for answer in answers {
        assert_eq!(answer.unwrap().status(), 200);
    }
    assert!(server.terminate().success());
    let log = server.log();
    let mut logged: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("request finished"))
        .filter_map(|line| line.split("request_id=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|id| id.starts_with("burst-"))
        .collect();
    logged.sort_unstable();
    let expected: Vec<String> = (0..requests).map(|i| format!("burst-{i:04}")).collect();
    assert_eq!(logged, expected, "{log}");
    assert!(log.trim_end().ends_with("stopped"), "{log}");
}

async fn sigterm_lets_the_server_finish_and_exit_cleanly(app: TestApp) {
    let mut server = ServerProcess::start(&app.database.url, &[]).await;
    let r = reqwest::get(format!("{}/healthz", server.base))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
    let log = server.log();
    assert!(log.contains("shutdown signal received"), "{log}");
    // Written to a file, not a terminal: plain text without colour codes.
    assert!(log.contains("request finished"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in the log file: {log:?}"
    );
}

/// A completion blocked on a row lock is in flight when SIGTERM arrives; the
/// server waits for it (within the grace period), answers 200 and exits 0.
async fn sigterm_drains_a_completion_in_flight(app: TestApp) {
    let waiting_sql = match app.backend {
        Backend::Sqlite => unreachable!("a server backend's test"),
        Backend::Postgres => {
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        }
        Backend::MySql => {
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'UPDATE%payment_orders%'"
        }
    };
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "4.20", "cstm:paygate").await;
    let mut server = ServerProcess::start(
        &app.database.url,
        &[
            ("MASTERPAY_REQUEST_TIMEOUT_MS", "60000"),
            ("MASTERPAY_DB_STATEMENT_TIMEOUT_MS", "60000"),
            ("MASTERPAY_SHUTDOWN_GRACE_MS", "60000"),
        ],
    )
    .await;
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let lock = app.db.begin().await.unwrap();
    lock.execute_unprepared(&format!(
        "SELECT id FROM payment_orders WHERE order_id = '{order}' FOR UPDATE"
    ))
    .await
    .unwrap();
    let request = tokio::spawn({
        let base = server.base.clone();
        let token = token.clone();
        let order = order.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{base}/v2/payment/order/complete"))
                .bearer_auth(token)
                .json(&json!({"payment_system": "cstm:paygate", "order_id": order}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    });
    let mut in_flight = false;
    for _ in 0..1000 {
        if app.count(waiting_sql).await > 0 {
            in_flight = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        in_flight,
        "the completion never reached the lock: {}",
        server.log()
    );
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Shutdown has begun; the in-flight request must still be answered.
    lock.rollback().await.unwrap();
    assert_eq!(request.await.unwrap().expect("answered"), 200);
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(app.main_balance(user, 0).await.to_string(), "4.20");
}

/// A completion whose statement waits on a row lock held elsewhere fails
/// after the statement timeout (PostgreSQL `statement_timeout`, MariaDB
/// `max_statement_time`), not after the database's own lock-wait limit:
/// JSON 500 ORDER_UPDATE_FAILED, nothing changed, and the retry credits once.
async fn a_statement_stuck_on_a_row_lock_is_bounded_by_the_statement_timeout(app: TestApp) {
    let cancelled = match app.backend {
        Backend::Sqlite => unreachable!("a server backend's test"),
        Backend::Postgres => "canceling statement due to statement timeout",
        Backend::MySql => "max_statement_time",
    };
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "4.20", "cstm:paygate").await;
    let mut server = ServerProcess::start(
        &app.database.url,
        &[
            ("MASTERPAY_DB_STATEMENT_TIMEOUT_MS", "2000"),
            ("MASTERPAY_REQUEST_TIMEOUT_MS", "60000"),
        ],
    )
    .await;
    let complete = || {
        reqwest::Client::new()
            .post(format!("{}/v2/payment/order/complete", server.base))
            .bearer_auth(&token)
            .json(&json!({"payment_system": "cstm:paygate", "order_id": order}))
            .send()
    };
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let lock = app.db.begin().await.unwrap();
    lock.execute_unprepared(&format!(
        "SELECT id FROM payment_orders WHERE order_id = '{order}' FOR UPDATE"
    ))
    .await
    .unwrap();
    let r = complete().await.unwrap();
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body,
        json!({"success": false, "code": "ORDER_UPDATE_FAILED"})
    );
    lock.rollback().await.unwrap();
    assert_eq!(
        app.count("SELECT COUNT(*) FROM operation_log WHERE kind = 'order_credit'")
            .await,
        0
    );
    let r = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(r.body["main_balance"], "0.00", "{}", r.text);
    let r = complete().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .get_balance(Some(&token), &format!("server_id=0&user_id={user}"))
        .await;
    assert_eq!(r.body["main_balance"], "4.20", "{}", r.text);
    // The error was logged with the database's reason.
    assert!(server.terminate().success());
    let log = server.log();
    assert!(log.contains(cancelled), "{log}");
}
