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
    let app = Application::build(&settings, db.clone())
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen on {}: {err}", settings.listen))?;
    let base = format!("http://{}", app.local_addr());
    if demo {
        // The application's own store: on SQLite its one writer.
        demo_project::run(&db, &*app.store(), out, Some(&base)).await?;
    }
    tracing::info!(address = %app.local_addr(), database = %super::redact(&settings.database_url), "masterpay listening");
    app.run_until_stopped(shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}
