//! `masterpay token create|list|edit|disable|enable|delete|reissue|end-grace`.
//!
//! The value is printed by `create` and `reissue` only, once; `list` never
//! shows it (it is not stored), only its last 4 characters.

use chrono::{DateTime, TimeDelta, Utc};
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
        /// When the token stops working (RFC 3339, e.g. 2027-01-31T00:00:00Z);
        /// then it answers 403 TOKEN_DISABLED.
        #[arg(long)]
        expires: Option<DateTime<Utc>>,
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
        /// When the token stops working (RFC 3339), or `never`.
        #[arg(long, value_parser = parse_expiry)]
        expires: Option<Expiry>,
    },
    /// Disable a token (403 TOKEN_DISABLED).
    Disable { id: i64 },
    /// Enable a disabled token.
    Enable { id: i64 },
    /// Delete a token (403 TOKEN_NOT_FOUND).
    Delete { id: i64 },
    /// Give a token a new value; the old one keeps working for the grace
    /// period (then 403 TOKEN_NOT_FOUND).
    Reissue {
        id: i64,
        /// How long the old value keeps working: 0 (the default) to 7d, e.g.
        /// 1h, 24h. A reissue ends an earlier grace period.
        #[arg(long, default_value = "0s", value_parser = parse_grace)]
        grace: TimeDelta,
    },
    /// End a reissue's grace period: the old value stops working now.
    EndGrace { id: i64 },
}

/// An `--expires` of `edit`: a time, or none.
#[derive(Debug, Clone, Copy)]
pub struct Expiry(Option<DateTime<Utc>>);

fn parse_expiry(text: &str) -> Result<Expiry, String> {
    if text == "never" {
        return Ok(Expiry(None));
    }
    text.parse()
        .map(|at| Expiry(Some(at)))
        .map_err(|err| format!("{err}; give an RFC 3339 time or `never`"))
}

fn parse_grace(text: &str) -> Result<TimeDelta, String> {
    let grace = humantime::parse_duration(text).map_err(|err| err.to_string())?;
    TimeDelta::from_std(grace).map_err(|err| err.to_string())
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
        "last4": info.token.last4,
        "expires_at": info.token.expires_at,
        "last_used_at": info.token.last_used_at,
        "previous_value": tokens::grace_until(&info.token).map(|until| json!({
            "last4": info.token.previous_last4,
            "works_until": until,
            "last_used_at": info.token.previous_last_used_at,
        })),
    })
}

fn describe(info: &TokenInfo) -> String {
    let perms: Vec<_> = info.permissions.iter().map(|p| p.as_str()).collect();
    let last_used = info.token.last_used_at.map(|t| t.to_rfc3339());
    let mut line = format!(
        "{}\t{}\t{}\t…{}\t[{}]\tlast used {}",
        info.token.id,
        state(info.token.active),
        info.token.name,
        info.token.last4.as_deref().unwrap_or("????"),
        perms.join(","),
        last_used.as_deref().unwrap_or("never")
    );
    if let Some(expiry) = info.token.expires_at {
        line += &format!("\texpires {}", expiry.to_rfc3339());
    }
    if let Some(until) = tokens::grace_until(&info.token) {
        line += &format!(
            "\told value …{} works until {}",
            info.token.previous_last4.as_deref().unwrap_or("????"),
            until.to_rfc3339()
        );
    }
    line
}

pub async fn run(cmd: TokenCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    match cmd {
        TokenCommand::Create {
            project,
            name,
            allow,
            description,
            expires,
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
                expires,
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
            expires,
        } => {
            let permissions = allow.as_deref().map(parse_permissions).transpose()?;
            let edit = tokens::TokenEdit {
                name: name.as_deref(),
                description: description.as_deref(),
                permissions: permissions.as_deref(),
                expires_at: expires.map(|Expiry(at)| at),
            };
            let info = tokens::edit(db, &Actor::CommandLine, id, edit).await?;
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
        TokenCommand::Reissue { id, grace } => {
            let (t, value) = tokens::reissue(db, &Actor::CommandLine, id, grace).await?;
            let old = match t.previous_until {
                Some(until) => format!("the old value works until {}", until.to_rfc3339()),
                None => "the old value no longer works".to_owned(),
            };
            let answer =
                json!({"id": t.id, "token": value.expose(), "previous_until": t.previous_until});
            out.emit(answer, || {
                format!(
                    "reissued token {} ({}); {old}\n{}\nThis value is shown once and cannot be recovered.",
                    t.id,
                    t.name,
                    value.expose()
                )
            });
        }
        TokenCommand::EndGrace { id } => {
            let t = tokens::end_grace(db, &Actor::CommandLine, id).await?;
            out.emit(json!({"id": t.id, "previous_until": null}), || {
                format!("token {}: the old value no longer works", t.id)
            });
        }
    }
    Ok(())
}
