//! `masterpay order create|get|cancel|complete|list`: the API's order
//! operations, for the operator.

use clap::Subcommand;
use entity::payment_order::OrderStatus;
use sea_orm::{ActiveEnum, DatabaseConnection};
use serde_json::{Value, json};

use super::{CliResult, Output};
use crate::{
    config::Settings,
    domain::{OrderId, PaymentSystem},
    money::Money,
    service::{
        admin_audit::Actor,
        keyset::Keyset,
        orders::{self, Cancellation, CompleteError, Order, OrderFilter, OrderRequest},
        users::UserRef,
    },
};

#[derive(Debug, Subcommand)]
pub enum OrderCommand {
    /// Create a pending payment order.
    Create {
        #[arg(long)]
        project: i64,
        #[arg(long)]
        user: i64,
        /// Amount, e.g. 10 or 10.25 (at most two fraction digits).
        #[arg(long, allow_hyphen_values = true)]
        amount: Money,
        /// cstm: followed by 4 to 20 lower-case letters.
        #[arg(long)]
        payment_system: PaymentSystem,
        /// Server credited on completion; omitted for the general account.
        #[arg(long)]
        server: Option<i64>,
        /// Order: followed by 8 to 11 letters or digits; generated when omitted.
        #[arg(long)]
        order_id: Option<OrderId>,
    },
    /// Show an order.
    Get { order_id: OrderId },
    /// Cancel a pending order (it is then never credited).
    Cancel { order_id: OrderId },
    /// Complete a pending order as the API's completion does (credited
    /// exactly once), recorded in the admin audit log: how an order whose
    /// completion was refused is completed once its balance allows.
    Complete { order_id: OrderId },
    /// List a project's orders, newest first.
    List {
        #[arg(long)]
        project: i64,
        /// Only this user's orders.
        #[arg(long)]
        user: Option<i64>,
        /// Only orders in this status.
        #[arg(long, value_parser = ["pending", "completed", "cancelled"])]
        status: Option<String>,
        /// Show at most this many.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
}

pub async fn run(
    cmd: OrderCommand,
    db: &DatabaseConnection,
    settings: &Settings,
    out: Output,
) -> CliResult {
    match cmd {
        OrderCommand::Create {
            project,
            user,
            amount,
            payment_system,
            server,
            order_id,
        } => {
            let request = OrderRequest {
                project_id: project,
                who: UserRef::Id(user),
                server_id: server.unwrap_or(0),
                amount,
                payment_system,
                order_id,
            };
            let store = super::store_of(db, settings)?;
            let order = orders::create_as(db, &*store, &Actor::CommandLine, &request).await?;
            out.emit(order_json(&order), || {
                format!(
                    "created order {} for user {} ({} via {})",
                    order.order_id, order.user_id, order.amount, order.payment_system
                )
            });
        }
        OrderCommand::Get { order_id } => {
            let order = find(db, &order_id).await?;
            out.emit(order_json(&order), || order_line(&order));
        }
        OrderCommand::Cancel { order_id } => {
            let found = find(db, &order_id).await?;
            let request = Cancellation {
                project_id: found.project_id,
                order_id: found.order_id,
                payment_system: found.payment_system,
            };
            let order = orders::cancel(db, Some(&Actor::CommandLine), &request).await?;
            out.emit(order_json(&order), || {
                format!("cancelled order {}", order.order_id)
            });
        }
        OrderCommand::Complete { order_id } => {
            let found = find(db, &order_id).await?;
            let store = super::store_of(db, settings)?;
            let actor = Actor::CommandLine;
            let done = orders::complete_as(db, &*store, &actor, found.project_id, &found.order_id)
                .await
                .map_err(|err| match err {
                    CompleteError::BalanceCeiling => anyhow::anyhow!(
                        "order {order_id} was not completed: {}",
                        orders::BALANCE_CEILING_REFUSAL
                    ),
                    err => anyhow::anyhow!("order {order_id} was not completed: {err}"),
                })?;
            let order = find(db, &done.order_id).await?;
            out.emit(order_json(&order), || {
                format!(
                    "completed order {}: {} credited, main balance now {}",
                    done.order_id, done.amount, done.balance_after
                )
            });
        }
        OrderCommand::List {
            project,
            user,
            status,
            limit,
        } => {
            let filter = OrderFilter {
                project_id: Some(project),
                user_id: user,
                status: status
                    .as_ref()
                    .map(OrderStatus::try_from_value)
                    .transpose()?,
                ..OrderFilter::default()
            };
            let listed = orders::list(db, &filter, Keyset::first(limit)).await?.rows;
            let total = orders::count(db, &filter).await?;
            out.emit(
                json!({
                    "orders": listed.iter().map(order_json).collect::<Vec<_>>(),
                    "total": total,
                }),
                || {
                    let mut text: Vec<String> = listed.iter().map(order_line).collect();
                    let total = crate::service::count(total, "order", "orders");
                    text.push(format!("{} of {total} shown", listed.len()));
                    text.join("\n")
                },
            );
        }
    }
    Ok(())
}

async fn find(db: &DatabaseConnection, order_id: &str) -> anyhow::Result<Order> {
    orders::get(db, None, order_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("order {order_id} does not exist"))
}

/// An order as the API answers it, plus its project.
fn order_json(order: &Order) -> Value {
    json!({
        "order_id": order.order_id,
        "project_id": order.project_id,
        "status": order.status.to_value(),
        "user_id": order.user_id,
        "server_id": order.server_id,
        "amount": order.amount.to_string(),
        "payment_system": order.payment_system,
        "payment_id": order.payment_id,
        "created_at": order.created_at,
        "completed_at": order.completed_at,
        "cancelled_at": order.cancelled_at,
        "refused_at": order.refused_at,
        "refusal": order.refusal,
    })
}

fn order_line(order: &Order) -> String {
    let mut line = format!(
        "{} {} user {} server {} {} via {} created {}",
        order.order_id,
        order.status.to_value(),
        order.user_id,
        order.server_id,
        order.amount,
        order.payment_system,
        order.created_at.to_rfc3339(),
    );
    if let (Some(at), Some(why)) = (order.refused_at, &order.refusal) {
        line.push_str(&format!("; completion refused {}: {why}", at.to_rfc3339()));
    }
    line
}
