//! `masterpay order create`.

use clap::Subcommand;
use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{CliResult, Output, parse_amount};
use crate::service::orders::{self, NewOrder};

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
        amount: String,
        /// cstm: followed by 4 to 20 lower-case letters.
        #[arg(long)]
        payment_system: String,
        /// Server credited on completion; omitted for the general account.
        #[arg(long)]
        server: Option<i64>,
        /// Order: followed by 8 to 11 letters or digits; generated when omitted.
        #[arg(long)]
        order_id: Option<String>,
    },
}

pub async fn run(cmd: OrderCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    let OrderCommand::Create {
        project,
        user,
        amount,
        payment_system,
        server,
        order_id,
    } = cmd;
    let amount = parse_amount("--amount", &amount)?;
    let o = orders::create(
        db,
        NewOrder {
            project_id: project,
            user_id: user,
            server_id: server,
            amount,
            payment_system,
            order_id,
        },
    )
    .await?;
    out.emit(json!({"id": o.id, "order_id": o.order_id}), || {
        format!(
            "created order {} for user {} ({} via {})",
            o.order_id, o.user_id, amount, o.payment_system
        )
    });
    Ok(())
}
