//! `masterpay serve`: runs the HTTP server until SIGINT or SIGTERM.

use clap::Args;
use sea_orm::DatabaseConnection;

use super::{CliResult, Output, demo as demo_project};
use crate::{
    app::{Application, shutdown_signal},
    config::{Settings, SettingsArgs},
};

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Seed a demo project first and print a token and curl lines.
    #[arg(long)]
    pub demo: bool,
}

pub async fn run(demo: bool, settings: Settings, db: DatabaseConnection, out: Output) -> CliResult {
    let app = Application::build(&settings, db.clone()).await?;
    let base = format!("http://{}", app.local_addr());
    if demo {
        let panel = app.panel_addr().map(|addr| format!("http://{addr}"));
        demo_project::seed(&db, app.store(), out, Some(&base), panel.as_deref()).await?;
    }
    tracing::info!(address = %app.local_addr(), database = %super::redact(&settings.database_url), "masterpay listening");
    if let Some(panel) = app.panel_addr() {
        tracing::info!(address = %panel, "administration panel listening");
    }
    if settings.webhook_secret_key.is_none() {
        tracing::warn!(
            "no webhook_secret_key is configured: webhook secrets are stored in clear in the database"
        );
    }
    if let Some(metrics) = app.metrics_addr() {
        tracing::info!(address = %metrics, "metrics listening");
    }
    app.run_until_stopped(shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}
