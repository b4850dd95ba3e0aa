//! `masterpay demo` and `serve --demo`: a demo project to try the API with.

use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{Output, parse_amount};
use crate::service::{
    balances, orders,
    orders::OrderRequest,
    projects, servers,
    tokens::{self, Permission},
    users,
    users::UserRef,
};
use crate::store::Store;

/// Seeds a project with users, servers, balances, pending orders and a token
/// holding every permission, then prints how to call the API.
pub async fn run(
    db: &DatabaseConnection,
    store: &dyn Store,
    out: Output,
    base: Option<&str>,
) -> anyhow::Result<()> {
    let base = base.unwrap_or("http://127.0.0.1:8080");
    let project = projects::create(db, "Demo project").await?;
    let suffix = project.id;
    let alice = users::create(db, project.id, &format!("alice{suffix}@example.com")).await?;
    let bob = users::create(db, project.id, &format!("bob{suffix}@example.com")).await?;
    let server = servers::create(db, project.id, "Survival #1").await?;
    servers::create(db, project.id, "Creative #2").await?;
    balances::set(
        db,
        alice.id,
        None,
        Some(parse_amount("main", "1250.50")?),
        Some(parse_amount("bonus", "25")?),
    )
    .await?;
    balances::set(
        db,
        alice.id,
        Some(server.id),
        Some(parse_amount("main", "99.99")?),
        None,
    )
    .await?;
    balances::set(db, bob.id, None, Some(parse_amount("main", "10")?), None).await?;
    let mut order_ids = Vec::new();
    for (user, server_id, amount) in [
        (alice.id, None, "10.25"),
        (alice.id, Some(server.id), "5.00"),
        (bob.id, None, "100"),
    ] {
        let request = OrderRequest {
            project_id: project.id,
            who: UserRef {
                user_id: Some(user),
                email: None,
            },
            server_id: server_id.unwrap_or(0),
            amount: parse_amount("amount", amount)?,
            payment_system: "cstm:paygate".into(),
            order_id: None,
        };
        order_ids.push(
            orders::create(db, store, &request, None)
                .await?
                .order
                .order_id,
        );
    }
    let (token, value) = tokens::create(db, project.id, "demo", &Permission::ALL).await?;
    let value = value.expose();
    out.emit(
        json!({
            "project_id": project.id,
            "token_id": token.token.id,
            "token": value,
            "user_ids": [alice.id, bob.id],
            "server_id": server.id,
            "order_ids": order_ids,
            "docs": format!("{base}/docs/"),
        }),
        || {
            format!(
                r#"Demo project {pid}: users {alice} ({alice_mail}) and {bob} ({bob_mail}), server {server}, pending orders {orders}.
Token (shown once, every permission):
  {value}

Swagger UI: {base}/docs/  (Authorize with the token above)

  export TOKEN={value}
  curl -s -H "Authorization: Bearer $TOKEN" '{base}/v2/master-account/balance?server_id=0&user_id={alice}'
  curl -s -H "Authorization: Bearer $TOKEN" '{base}/v2/master-account/balance?server_id={server}&email={alice_mail}&balance_type=main'
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' \
       -d '{{"user_id":{alice},"server_id":0,"amount":"10.25","payment_system":"cstm:paygate"}}' \
       {base}/v2/payment/order/create
  curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
       -d '{{"payment_system":"cstm:paygate","order_id":"{first}","payment_id":"demo-1"}}' \
       {base}/v2/payment/order/complete
  curl -s -H "Authorization: Bearer $TOKEN" '{base}/v2/payment/order?order_id={first}'
  curl -s -H "Authorization: Bearer $TOKEN" '{base}/v2/master-account/operations?user_id={alice}'"#,
                pid = project.id,
                alice = alice.id,
                alice_mail = alice.email,
                bob = bob.id,
                bob_mail = bob.email,
                server = server.id,
                orders = order_ids.join(", "),
                first = order_ids[0],
            )
        },
    );
    Ok(())
}
