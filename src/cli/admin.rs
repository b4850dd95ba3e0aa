//! `masterpay admin create|list|disable|enable|login-link`: the
//! administrators of the panel. A password is read from a prompt that does not echo it, or from
//! the first line of standard input when that is not a terminal; never from
//! a flag, which would leave it in the shell's history and the process list.

use std::io::{BufRead, IsTerminal};

use clap::Subcommand;
use entity::administrator;
use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{CliResult, Output, output::state};
use crate::{
    config::Settings,
    service::{
        admin_audit::Actor,
        admin_sessions,
        admins::{self, Password},
    },
};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create an administrator; the password is read from a prompt or stdin.
    Create {
        #[arg(long)]
        name: String,
    },
    /// List the administrators.
    List,
    /// Disable an administrator: they can no longer sign in.
    Disable { name: String },
    /// Enable an administrator.
    Enable { name: String },
    /// Print a single-use sign-in link, valid 15 minutes (first sign-in,
    /// recovery).
    LoginLink {
        #[arg(long)]
        name: String,
        /// The panel's address as the browser reaches it [default:
        /// http:// (https:// with admin_cookie_secure) and admin_listen from
        /// MASTERPAY_ADMIN_LISTEN or the config file, or 127.0.0.1:8081].
        #[arg(long)]
        base_url: Option<String>,
    },
}

/// A new sign-in link for `name`, as a URL under `base`.
pub(super) async fn login_link(
    db: &DatabaseConnection,
    name: &str,
    base: &str,
) -> anyhow::Result<(String, chrono::DateTime<chrono::Utc>)> {
    let (secret, expires_at) =
        admin_sessions::create_login_link(db, &Actor::CommandLine, name).await?;
    Ok((admin_sessions::link_url(base, &secret), expires_at))
}

fn to_json(a: &administrator::Model) -> serde_json::Value {
    json!({"id": a.id, "name": a.name, "active": a.active, "created_at": a.created_at})
}

/// The new password: typed twice at a prompt, or the first line of stdin.
fn read_password() -> anyhow::Result<Password> {
    let text = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("Password: ")?;
        if rpassword::prompt_password("Password again: ")? != first {
            anyhow::bail!("the passwords differ");
        }
        first
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    };
    Ok(Password::new(text)?)
}

pub async fn run(
    cmd: AdminCommand,
    db: &DatabaseConnection,
    settings: &Settings,
    out: Output,
) -> CliResult {
    match cmd {
        AdminCommand::LoginLink { name, base_url } => {
            // The panel's address from the settings, when it listens.
            let secure = settings.admin_cookie_secure;
            let scheme = if secure { "https" } else { "http" };
            let panel = settings
                .admin_listen
                .as_ref()
                .map(|at| format!("{scheme}://{at}"));
            let base = base_url.or(panel).ok_or_else(|| {
                anyhow::anyhow!("the panel is off (admin_listen = off); pass --base-url")
            })?;
            let (url, expires_at) = login_link(db, &name, &base).await?;
            out.emit(json!({"url": url, "expires_at": expires_at}), || {
                format!(
                    "{url}\nsigns {name} in once, until {}",
                    expires_at.format("%Y-%m-%d %H:%M:%S UTC")
                )
            });
        }
        AdminCommand::Create { name } => {
            let admin = admins::create(db, &Actor::CommandLine, &name, read_password()?).await?;
            out.emit(to_json(&admin), || {
                format!("created administrator {}", admin.name)
            });
        }
        AdminCommand::List => {
            let all = admins::list(db).await?;
            let line = |a: &administrator::Model| {
                let since = a.created_at.to_rfc3339();
                format!("{} {} since {since}", a.name, state(a.active))
            };
            out.list("administrators", &all, to_json, line, "");
        }
        AdminCommand::Disable { ref name } | AdminCommand::Enable { ref name } => {
            let active = matches!(cmd, AdminCommand::Enable { .. });
            let admin = admins::set_active(db, &Actor::CommandLine, name, active).await?;
            out.emit(to_json(&admin), || {
                let done = if active { "enabled" } else { "disabled" };
                format!("{done} administrator {}", admin.name)
            });
        }
    }
    Ok(())
}
