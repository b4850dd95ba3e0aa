//! The `masterpay` command line, one module per command.
//!
//! Every command opens the database, applies pending migrations, and calls
//! the same `service` functions the API uses. `--json` (accepted anywhere
//! after the command) prints exactly one JSON object on stdout; errors go to
//! stderr as one line and exit non-zero, having changed nothing.

mod admin;
mod audit;
mod balance;
mod demo;
mod openapi;
mod order;
mod output;
mod project;
mod serve;
mod server;
mod token;
mod user;
mod webhook;

use std::{process::ExitCode, sync::Arc};

use clap::{Parser, Subcommand};
use sea_orm::DatabaseConnection;

pub use self::output::Output;
use crate::{
    config::{Settings, SettingsArgs},
    store::{Store, Uncounted, database},
};

#[derive(Debug, Parser)]
#[command(
    name = "masterpay",
    version,
    about = "Master-account balances and payment order completion (API v2)"
)]
pub struct Cli {
    /// Database URL: sqlite://PATH, postgres://... or mysql://...
    /// [default: sqlite://masterpay.db]
    #[arg(long, env = "MASTERPAY_DATABASE_URL", global = true)]
    pub database_url: Option<String>,

    /// Optional TOML file with settings (flags and environment win over it).
    #[arg(long, env = "MASTERPAY_CONFIG", global = true)]
    pub config: Option<std::path::PathBuf>,

    /// Print exactly one JSON object on stdout instead of text for people.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server.
    // Boxed: its flags (every setting) make it far larger than the others.
    Serve(Box<serve::ServeArgs>),
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the OpenAPI document (byte-identical to openapi/v2.yaml).
    Openapi(openapi::OpenapiArgs),
    /// Manage projects.
    #[command(subcommand)]
    Project(project::ProjectCommand),
    /// Manage users.
    #[command(subcommand)]
    User(user::UserCommand),
    /// Manage game servers.
    #[command(subcommand)]
    Server(server::ServerCommand),
    /// Set balances.
    #[command(subcommand)]
    Balance(balance::BalanceCommand),
    /// Manage payment orders.
    #[command(subcommand)]
    Order(order::OrderCommand),
    /// Manage application tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Manage the endpoints that receive the projects' events (webhooks).
    #[command(subcommand)]
    Webhook(webhook::WebhookCommand),
    /// Manage the administrators who may sign in to the administration panel.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Seed a demo project and print a token and ready curl lines.
    Demo,
    /// Check the ledger: balances equal their logged changes, every completed
    /// order is logged exactly once. Exits non-zero on any mismatch.
    Audit,
}

/// A failure to report on stderr as one line.
pub type CliResult = anyhow::Result<()>;

/// Entry point of the binary.
pub async fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(), // --help, --version
        Err(err) => {
            // One line, like every other error of the command line.
            let rendered = err.render().to_string();
            let summary: Vec<&str> = rendered
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{} (see --help)", summary.join(" "));
            return ExitCode::from(2);
        }
    };
    let serving = matches!(cli.command, Command::Serve(_));
    crate::telemetry::init(if serving { "info" } else { "warn" });
    let result = dispatch(cli).await;
    // Log lines first (they are written by a thread of their own), then the
    // error line.
    crate::telemetry::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err)
            if err
                .downcast_ref::<std::io::Error>()
                .is_some_and(output::is_closed_stdout) =>
        {
            ExitCode::from(output::CLOSED_STDOUT)
        }
        Err(err) => {
            let message = format!("{err:#}").replace('\n', " ");
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> CliResult {
    let out = Output { json: cli.json };
    if let Command::Openapi(args) = &cli.command {
        return openapi::run(args);
    }
    let file = cli.config.as_deref().map(SettingsArgs::load).transpose()?;
    // Only `serve` has the flags; every command reads their variables, so
    // that `admin login-link` names the panel `serve` was configured with.
    let mut given = match &cli.command {
        Command::Serve(args) => args.settings.clone(),
        _ => SettingsArgs::from_environment()?,
    };
    given.database_url = cli.database_url.clone();
    let settings = Settings::resolve(file.unwrap_or_default(), given)?;
    let db = open(&settings).await?;
    match cli.command {
        Command::Serve(args) => serve::run(args.demo, settings, db, out).await,
        Command::Migrate => {
            out.emit(serde_json::json!({"migrated": true}), || {
                "database is up to date".to_owned()
            });
            Ok(())
        }
        Command::Openapi(_) => unreachable!("handled before connecting"),
        Command::Project(cmd) => project::run(cmd, &db, out).await,
        Command::User(cmd) => user::run(cmd, &db, out).await,
        Command::Server(cmd) => server::run(cmd, &db, out).await,
        Command::Balance(cmd) => balance::run(cmd, &db, out).await,
        Command::Order(cmd) => order::run(cmd, &db, &settings, out).await,
        Command::Token(cmd) => token::run(cmd, &db, out).await,
        Command::Admin(cmd) => admin::run(cmd, &db, &settings, out).await,
        Command::Webhook(cmd) => webhook::run(cmd, &db, &settings, out).await,
        Command::Demo => demo::seed(&db, &*store_of(&db, &settings)?, out, None, None).await,
        Command::Audit => audit::run(&db, &settings, out).await,
    }
}

/// The store of `db`, for the commands that run an operation of the
/// request path (creating and completing orders) as the API does.
fn store_of(db: &DatabaseConnection, settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    let sizes = Arc::new(Uncounted);
    Ok(database::open_store(
        db,
        &settings.database_url,
        &settings.pool,
        sizes,
    )?)
}

/// Connects and migrates, with the URL in the error when it fails.
async fn open(settings: &Settings) -> anyhow::Result<DatabaseConnection> {
    let db = database::connect(&settings.database_url, &settings.pool)
        .await
        .map_err(|err| {
            anyhow::anyhow!(
                "cannot open database {}: {err}",
                redact(&settings.database_url)
            )
        })?;
    database::migrate(&db)
        .await
        .map_err(|err| anyhow::anyhow!("cannot migrate database: {err}"))?;
    Ok(db)
}

/// A database URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Parses `--allow a,b` into permissions.
pub(crate) fn parse_permissions(
    text: &str,
) -> anyhow::Result<Vec<crate::service::tokens::Permission>> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().map_err(|e: String| anyhow::anyhow!(e)))
        .collect()
}
