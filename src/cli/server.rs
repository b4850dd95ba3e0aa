//! `masterpay server create`.

use clap::Subcommand;
use sea_orm::DatabaseConnection;

use super::{CliResult, Output};
use crate::service::{admin_audit::Actor, servers};

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Create a game server (ids start at 1; server_id 0 is the general account).
    Create {
        #[arg(long)]
        project: i64,
        #[arg(long)]
        name: String,
    },
}

pub async fn run(cmd: ServerCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    let ServerCommand::Create { project, name } = cmd;
    let s = servers::create(db, &Actor::CommandLine, project, &name).await?;
    out.created("server", s.id, s.project_id, ("name", &s.name))
}
