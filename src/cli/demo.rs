//! `masterpay demo` and `serve --demo`: a demo project to try the API with.

use sea_orm::DatabaseConnection;
use serde_json::json;

use super::Output;
use crate::service::{
    admin_audit::Actor,
    admin_sessions,
    admins::{self, Password},
    balances, orders,
    orders::OrderRequest,
    projects, servers,
    tokens::{self, Permission},
    users,
    users::UserRef,
};
use crate::store::Store;

/// Why the demo sets its balances, as the audit log keeps it.
const REASON: &str = "demo data";

/// Seeds a project with users, servers, balances, pending orders and a token
/// holding every permission, then prints how to call the API. Every change
/// is the command line's, in the audit log.
///
/// With the panel's address (`serve --demo` while the panel listens), it
/// also prints a sign-in link for the administrator `demo`, made when
/// missing with a random password no one is shown: the link (or another
/// from `admin login-link`) is how they sign in.
pub async fn seed(
    db: &DatabaseConnection,
    store: &dyn Store,
    out: Output,
    base: Option<&str>,
    panel: Option<&str>,
) -> anyhow::Result<()> {
    let base = base.unwrap_or("http://127.0.0.1:8080");
    let panel_link = match panel {
        Some(panel) => Some(demo_sign_in_link(db, panel).await?),
        None => None,
    };
    let actor = &Actor::CommandLine;
    let project = projects::create(db, actor, "Demo project").await?;
    let suffix = project.id;
    let alice = format!("alice{suffix}@example.com").parse()?;
    let alice = users::create(db, actor, project.id, &alice).await?;
    let bob = format!("bob{suffix}@example.com").parse()?;
    let bob = users::create(db, actor, project.id, &bob).await?;
    let server = servers::create(db, actor, project.id, "Survival #1").await?;
    servers::create(db, actor, project.id, "Creative #2").await?;
    for (user, server_id, main, bonus) in [
        (alice.id, None, "1250.50", Some("25")),
        (alice.id, Some(server.id), "99.99", None),
        (bob.id, None, "10", None),
    ] {
        let bonus = bonus.map(str::parse).transpose()?;
        balances::set(
            db,
            actor,
            user,
            server_id,
            Some(main.parse()?),
            bonus,
            REASON,
        )
        .await?;
    }
    let mut order_ids: Vec<String> = Vec::new();
    for (user, server_id, amount) in [
        (alice.id, None, "10.25"),
        (alice.id, Some(server.id), "5.00"),
        (bob.id, None, "100"),
    ] {
        let request = OrderRequest {
            project_id: project.id,
            who: UserRef::Id(user),
            server_id: server_id.unwrap_or(0),
            amount: amount.parse()?,
            payment_system: "cstm:paygate".parse()?,
            order_id: None,
        };
        order_ids.push(
            orders::create_as(db, store, actor, &request)
                .await?
                .order_id
                .into(),
        );
    }
    let (token, value) = tokens::create(
        db,
        actor,
        project.id,
        "demo",
        Some("made by masterpay demo"),
        &Permission::ALL,
        None,
    )
    .await?;
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
            "panel_sign_in": panel_link,
        }),
        || {
            format!(
                r#"Demo project {pid}: users {alice} ({alice_mail}) and {bob} ({bob_mail}), server {server}, pending orders {orders}.
Token (shown once, every permission):
  {value}

Swagger UI: {base}/docs/  (Authorize with the token above)
{panel}
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
                panel = panel_link.as_deref().map_or_else(String::new, |url| format!(
                    "Administration panel, signed in as demo by this single-use link (15 minutes):\n  {url}\n"
                )),
            )
        },
    );
    Ok(())
}

/// A sign-in link for the administrator `demo`, made first when missing.
async fn demo_sign_in_link(db: &DatabaseConnection, panel: &str) -> anyhow::Result<String> {
    const NAME: &str = "demo";
    if !admins::list(db).await?.iter().any(|a| a.name == NAME) {
        let unknown = admin_sessions::Secret::generate().expose().to_owned();
        admins::create(db, &Actor::CommandLine, NAME, Password::new(unknown)?).await?;
    }
    Ok(super::admin::login_link(db, NAME, panel).await?.0)
}
