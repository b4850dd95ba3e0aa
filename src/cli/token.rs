//! `masterpay token create|list|edit|disable|enable|delete|reissue`.
//!
//! The value is printed by `create` and `reissue` only, once; `list` never
//! shows it (it is not stored).

use clap::Subcommand;
use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{CliResult, Output, output::state, parse_permissions};
use crate::service::{
    admin_audit::Actor,
    tokens::{self, TokenInfo},
};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a token; prints its value once.
    Create {
        #[arg(long)]
        project: i64,
        #[arg(long)]
        name: String,
        /// Comma-separated permissions: master-account/balance, payment/order/complete.
        /// A token without permissions is refused with EMPTY_ACCESS.
        #[arg(long)]
        allow: Option<String>,
        /// What the token is for (at most 500 characters).
        #[arg(long)]
        description: Option<String>,
    },
    /// List a project's tokens (never their values).
    List {
        #[arg(long)]
        project: i64,
    },
    /// Rename a token, replace its description and/or its permissions.
    Edit {
        id: i64,
        #[arg(long)]
        name: Option<String>,
        /// Replaces the description; an empty value removes it.
        #[arg(long)]
        description: Option<String>,
        /// Replaces all permissions; an empty value removes them all.
        #[arg(long)]
        allow: Option<String>,
    },
    /// Disable a token (403 TOKEN_DISABLED).
    Disable { id: i64 },
    /// Enable a disabled token.
    Enable { id: i64 },
    /// Delete a token (403 TOKEN_NOT_FOUND).
    Delete { id: i64 },
    /// Give a token a new value; the old one stops working at once.
    Reissue { id: i64 },
}

fn info_json(info: &TokenInfo) -> serde_json::Value {
    json!({
        "id": info.token.id,
        "project_id": info.token.project_id,
        "name": info.token.name,
        "active": info.token.active,
        "description": info.token.description,
        "created_by": info.token.created_by,
        "permissions": info.permissions.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "created_at": info.token.created_at,
        "last_used_at": info.token.last_used_at,
    })
}

fn describe(info: &TokenInfo) -> String {
    let perms: Vec<_> = info.permissions.iter().map(|p| p.as_str()).collect();
    let last_used = info.token.last_used_at.map(|t| t.to_rfc3339());
    format!(
        "{}\t{}\t{}\t[{}]\tlast used {}",
        info.token.id,
        state(info.token.active),
        info.token.name,
        perms.join(","),
        last_used.as_deref().unwrap_or("never")
    )
}

pub async fn run(cmd: TokenCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    match cmd {
        TokenCommand::Create {
            project,
            name,
            allow,
            description,
        } => {
            let permissions = allow
                .as_deref()
                .map(parse_permissions)
                .transpose()?
                .unwrap_or_default();
            let (info, value) = tokens::create(
                db,
                &Actor::CommandLine,
                project,
                &name,
                description.as_deref(),
                &permissions,
            )
            .await?;
            out.emit(json!({"id": info.token.id, "token": value.expose()}), || {
                format!(
                    "created token {} ({}) for project {}\n{}\nThis value is shown once and cannot be recovered; keep it in a secret store.",
                    info.token.id,
                    info.token.name,
                    info.token.project_id,
                    value.expose()
                )
            });
        }
        TokenCommand::List { project } => {
            let all = tokens::list(db, project).await?;
            out.list("tokens", &all, info_json, describe, "no tokens");
        }
        TokenCommand::Edit {
            id,
            name,
            description,
            allow,
        } => {
            let permissions = allow.as_deref().map(parse_permissions).transpose()?;
            let info = tokens::edit(
                db,
                &Actor::CommandLine,
                id,
                name.as_deref(),
                description.as_deref(),
                permissions.as_deref(),
            )
            .await?;
            out.emit(info_json(&info), || {
                format!("updated token {}", describe(&info))
            });
        }
        TokenCommand::Disable { id } | TokenCommand::Enable { id } => {
            let active = matches!(cmd, TokenCommand::Enable { .. });
            let t = tokens::set_active(db, &Actor::CommandLine, id, active).await?;
            let done = if active { "enabled" } else { "disabled" };
            out.emit(json!({"id": t.id, "active": t.active}), || {
                format!("token {} {done}", t.id)
            });
        }
        TokenCommand::Delete { id } => {
            tokens::delete(db, &Actor::CommandLine, id).await?;
            out.emit(json!({"id": id, "deleted": true}), || {
                format!("deleted token {id}")
            });
        }
        TokenCommand::Reissue { id } => {
            let (t, value) = tokens::reissue(db, &Actor::CommandLine, id).await?;
            out.emit(json!({"id": t.id, "token": value.expose()}), || {
                format!(
                    "reissued token {} ({}); the old value no longer works\n{}\nThis value is shown once and cannot be recovered.",
                    t.id,
                    t.name,
                    value.expose()
                )
            });
        }
    }
    Ok(())
}
