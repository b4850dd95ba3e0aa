//! `masterpay user create`.

use clap::Subcommand;
use sea_orm::DatabaseConnection;

use super::{CliResult, Output};
use crate::{
    domain::Email,
    service::{admin_audit::Actor, users},
};

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user (the e-mail is unique within the project).
    Create {
        #[arg(long)]
        project: i64,
        #[arg(long)]
        email: Email,
    },
}

pub async fn run(cmd: UserCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    let UserCommand::Create { project, email } = cmd;
    let u = users::create(db, &Actor::CommandLine, project, &email).await?;
    out.created("user", u.id, u.project_id, ("email", &u.email))
}
