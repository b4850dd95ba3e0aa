//! `masterpay webhook endpoint create|list|show|update|enable|disable|delete`.
//!
//! `create` prints the endpoint's signing secret once; nothing shows it
//! again (it is stored sealed when `webhook_secret_key` is configured).

use clap::Subcommand;
use entity::webhook_endpoint;
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use super::{CliResult, Output};
use crate::{
    config::Settings,
    events::{self, EventType},
    service::{
        admin_audit::Actor, webhook_destination::Destinations, webhook_endpoints as endpoints,
    },
};

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Manage the endpoints events are sent to.
    #[command(subcommand)]
    Endpoint(EndpointCommand),
}

#[derive(Debug, Subcommand)]
pub enum EndpointCommand {
    /// Add an endpoint to a project; prints its signing secret once.
    Create {
        #[arg(long)]
        project: i64,
        /// Where events are sent: an http:// or https:// URL.
        #[arg(long)]
        url: String,
        /// Comma-separated event types it receives (order.created,
        /// order.completed, order.cancelled, balance.set, webhook.test)
        /// [default: every type].
        #[arg(long, value_parser = parse_types)]
        events: Option<Types>,
        /// What the endpoint is for (at most 500 characters).
        #[arg(long)]
        description: Option<String>,
    },
    /// List the endpoints of a project, or of every project.
    List {
        #[arg(long)]
        project: Option<i64>,
    },
    /// Show an endpoint (never its secret).
    Show { id: i64 },
    /// Change an endpoint's URL, event types and/or description.
    Update {
        id: i64,
        #[arg(long)]
        url: Option<String>,
        /// Comma-separated event types, or `all` for every type.
        #[arg(long, value_parser = parse_types)]
        events: Option<Types>,
        /// Replaces the description; an empty value removes it.
        #[arg(long)]
        description: Option<String>,
    },
    /// Enable an endpoint.
    Enable { id: i64 },
    /// Disable an endpoint: no more events are recorded for it.
    Disable { id: i64 },
    /// Delete an endpoint with its deliveries.
    Delete { id: i64 },
}

/// An `--events` value: the types, or every type (`None`).
#[derive(Debug, Clone)]
pub struct Types(Option<Vec<EventType>>);

fn parse_types(text: &str) -> Result<Types, String> {
    if text.trim() == "all" {
        return Ok(Types(None));
    }
    events::parse_types(text).map(|types| Types(Some(types)))
}

fn endpoint_json(endpoint: &webhook_endpoint::Model) -> Value {
    json!({
        "id": endpoint.id,
        "project_id": endpoint.project_id,
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": endpoint.event_types.as_deref().map(|types| types.split(',').collect::<Vec<_>>()),
        "enabled": endpoint.enabled,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": endpoint.failing_since,
        "previous_secret_until": endpoints::previous_secret_until(endpoint),
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
    })
}

fn describe(endpoint: &webhook_endpoint::Model) -> String {
    let state = match (&endpoint.enabled, &endpoint.disabled_reason) {
        (true, _) => "enabled".to_owned(),
        (false, Some(reason)) => format!("disabled ({reason})"),
        (false, None) => "disabled".to_owned(),
    };
    let mut line = format!(
        "{}\tproject {}\t{}\t{}\t[{}]",
        endpoint.id,
        endpoint.project_id,
        state,
        endpoint.url,
        endpoint.event_types.as_deref().unwrap_or("every type")
    );
    if !endpoint.description.is_empty() {
        line += &format!("\t{}", endpoint.description);
    }
    if let Some(since) = endpoint.failing_since {
        line += &format!("\tfailing since {}", since.to_rfc3339());
    }
    line
}

pub async fn run(
    cmd: WebhookCommand,
    db: &DatabaseConnection,
    settings: &Settings,
    out: Output,
) -> CliResult {
    let WebhookCommand::Endpoint(cmd) = cmd;
    let actor = &Actor::CommandLine;
    match cmd {
        EndpointCommand::Create {
            project,
            url,
            events,
            description,
        } => {
            let types = events.and_then(|Types(types)| types);
            let (endpoint, secret) = endpoints::create(
                db,
                settings.webhook_secret_key.as_ref(),
                &Destinations::of(&settings.webhooks),
                actor,
                project,
                &url,
                types.as_deref(),
                description.as_deref(),
            )
            .await?;
            let mut answer = endpoint_json(&endpoint);
            answer["secret"] = secret.expose().into();
            out.emit(answer, || {
                format!(
                    "created webhook endpoint {} for project {}\n{}\nThis secret is shown once and cannot be recovered; configure it where the endpoint verifies signatures.",
                    endpoint.id,
                    endpoint.project_id,
                    secret.expose()
                )
            });
        }
        EndpointCommand::List { project } => {
            let all = endpoints::list(db, project).await?;
            out.list(
                "endpoints",
                &all,
                endpoint_json,
                describe,
                "no webhook endpoints",
            );
        }
        EndpointCommand::Show { id } => {
            let endpoint = endpoints::get(db, id).await?;
            out.emit(endpoint_json(&endpoint), || describe(&endpoint));
        }
        EndpointCommand::Update {
            id,
            url,
            events,
            description,
        } => {
            let types = events.as_ref().map(|Types(types)| types.as_deref());
            let edit = endpoints::EndpointEdit {
                url: url.as_deref(),
                types,
                description: description.as_deref(),
            };
            let destinations = Destinations::of(&settings.webhooks);
            let endpoint = endpoints::edit(db, &destinations, actor, id, edit).await?;
            out.emit(endpoint_json(&endpoint), || {
                format!("updated webhook endpoint {}", describe(&endpoint))
            });
        }
        EndpointCommand::Enable { id } | EndpointCommand::Disable { id } => {
            let enabled = matches!(cmd, EndpointCommand::Enable { .. });
            let endpoint = endpoints::set_enabled(db, actor, id, enabled).await?;
            let done = if enabled { "enabled" } else { "disabled" };
            out.emit(endpoint_json(&endpoint), || {
                format!("webhook endpoint {} {done}", endpoint.id)
            });
        }
        EndpointCommand::Delete { id } => {
            endpoints::delete(db, actor, id).await?;
            out.emit(json!({"id": id, "deleted": true}), || {
                format!("deleted webhook endpoint {id}")
            });
        }
    }
    Ok(())
}
