//! `masterpay balance set`.

use clap::Subcommand;
use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{CliResult, Output};
use crate::{
    money::Money,
    service::{admin_audit::Actor, balances},
};

#[derive(Debug, Subcommand)]
pub enum BalanceCommand {
    /// Set a user's main and/or bonus balance; the change is logged.
    Set {
        #[arg(long)]
        user: i64,
        /// Server id; omitted or 0 for the general account.
        #[arg(long)]
        server: Option<i64>,
        /// New main balance, e.g. 100 or 100.50.
        #[arg(long, allow_hyphen_values = true)]
        main: Option<Money>,
        /// New bonus balance.
        #[arg(long, allow_hyphen_values = true)]
        bonus: Option<Money>,
        /// Why the balance is set (at most 500 characters); kept in the
        /// administration audit log.
        #[arg(long)]
        reason: String,
    },
}

pub async fn run(cmd: BalanceCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    let BalanceCommand::Set {
        user,
        server,
        main,
        bonus,
        reason,
    } = cmd;
    let change = balances::set(db, &Actor::CommandLine, user, server, main, bonus, &reason).await?;
    let server_id = server.unwrap_or(0);
    out.emit(
        json!({
            "user_id": user,
            "server_id": server_id,
            "main_balance": change.after.main.to_string(),
            "bonus_balance": change.after.bonus.to_string(),
        }),
        || {
            format!(
                "user {user} on server {server_id}: main {} -> {}, bonus {} -> {}",
                change.before.main, change.after.main, change.before.bonus, change.after.bonus
            )
        },
    );
    Ok(())
}
