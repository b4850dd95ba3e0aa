//! Several `masterpay serve` processes on one database: exactly once across
//! instances, and an exact ledger after one instance is killed with SIGKILL
//! in the middle of a stream of completions.

mod common;

use std::process::Command;

use common::{ServerProcess, TestApp};
use serde_json::json;

on_every_backend!(
    a_thousand_identical_completes_on_two_instances_credit_once,
    killing_an_instance_mid_stream_loses_and_duplicates_nothing,
);

/// Generous limits: these tests are about exactly-once, not latency.
const PATIENT: &[(&str, &str)] = &[
    ("MASTERPAY_REQUEST_TIMEOUT_MS", "60000"),
    ("MASTERPAY_DB_ACQUIRE_TIMEOUT_MS", "50000"),
    ("MASTERPAY_DB_STATEMENT_TIMEOUT_MS", "50000"),
    ("MASTERPAY_LOG", "warn"),
];

async fn complete(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    order: &str,
) -> Result<u16, reqwest::Error> {
    // Bounded, so that a request lost with a killed instance counts as
    // unanswered (and is retried) instead of waiting forever.
    client
        .post(format!("{base}/v2/payment/order/complete"))
        .bearer_auth(token)
        .json(&json!({"payment_system": "cstm:paygate", "order_id": order}))
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .map(|r| r.status().as_u16())
}

async fn a_thousand_identical_completes_on_two_instances_credit_once(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let order = app.order(user, None, "12.34", "cstm:paygate").await;
    let a = ServerProcess::start(&app.database.url, PATIENT).await;
    let b = ServerProcess::start(&app.database.url, PATIENT).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(600)
        .build()
        .unwrap();
    let statuses = futures::future::join_all((0..1000).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        complete(&client, base, &token, &order)
    }))
    .await;
    let statuses: Vec<u16> = statuses.into_iter().map(|s| s.expect("answered")).collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let conflict = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!(
        (ok, conflict),
        (1, 999),
        "other statuses: {:?}",
        statuses
            .iter()
            .filter(|s| **s != 200 && **s != 409)
            .collect::<Vec<_>>()
    );
    assert_eq!(app.main_balance(user, 0).await.to_string(), "12.34");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM operation_log WHERE kind = 'order_credit'")
            .await,
        1
    );
}

async fn killing_an_instance_mid_stream_loses_and_duplicates_nothing(app: TestApp) {
    let token = app.full_token().await;
    let user = app.user("alice@example.com").await;
    let server = app.server("Busy").await;
    let mut orders = Vec::new();
    let mut expected_cents = [0i64; 2];
    for i in 0..200i64 {
        let cents = 100 + i;
        let target = (i % 2) as usize;
        expected_cents[target] += cents;
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let server_id = if target == 0 { None } else { Some(server) };
        orders.push(app.order(user, server_id, &amount, "cstm:paygate").await);
    }
    let mut a = ServerProcess::start(&app.database.url, PATIENT).await;
    let b = ServerProcess::start(&app.database.url, PATIENT).await;
    let client = reqwest::Client::new();

    // Stream completions to A, 16 at a time; SIGKILL A once 60 have answered.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(usize, Result<u16, reqwest::Error>)>(1);
    let sender = {
        let client = client.clone();
        let token = token.clone();
        let orders = orders.clone();
        let base = a.base.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            futures::stream::iter(orders.into_iter().enumerate())
                .for_each_concurrent(16, |(i, order)| {
                    let client = client.clone();
                    let token = token.clone();
                    let base = base.clone();
                    let tx = tx.clone();
                    async move {
                        let status = complete(&client, &base, &token, &order).await;
                        let _ = tx.send((i, status)).await;
                    }
                })
                .await;
        })
    };
    let mut confirmed = vec![false; orders.len()];
    let mut answered = 0;
    while let Some((i, status)) = rx.recv().await {
        if let Ok(code) = status {
            assert!(code == 200 || code == 409, "order {i}: {code}");
            confirmed[i] = true;
        }
        answered += 1;
        if answered == 60 {
            a.kill_hard();
        }
        if answered == orders.len() {
            break;
        }
    }
    sender.await.unwrap();
    let unconfirmed = confirmed.iter().filter(|c| !**c).count();
    assert!(unconfirmed > 0, "the kill interrupted the stream");

    // Retry everything unconfirmed on B: 200 (not done yet) or 409 (done before the crash).
    for (i, order) in orders.iter().enumerate() {
        if !confirmed[i] {
            let code = complete(&client, &b.base, &token, order)
                .await
                .expect("B answers");
            assert!(code == 200 || code == 409, "retry of order {i}: {code}");
        }
    }
    let completed = app
        .count("SELECT COUNT(*) FROM payment_orders WHERE status = 'completed'")
        .await;
    assert_eq!(completed, 200);
    assert_eq!(app.main_balance(user, 0).await.cents(), expected_cents[0]);
    assert_eq!(
        app.main_balance(user, server).await.cents(),
        expected_cents[1]
    );
    let audit = Command::new(env!("CARGO_BIN_EXE_masterpay"))
        .args(["audit", "--json"])
        .env("MASTERPAY_DATABASE_URL", &app.database.url)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert!(audit.status.success(), "audit: {report}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["completed_orders"], 200);
}
