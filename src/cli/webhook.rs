//! `masterpay webhook endpoint create|list|show|update|enable|disable|delete|
//! test|rotate-secret`, `masterpay webhook event list|show` and
//! `masterpay webhook resend|replay`.
//!
//! `create` and `rotate-secret` print the endpoint's signing secret once;
//! nothing shows it again (it is stored sealed when `webhook_secret_key` is
//! configured). `test`, `resend` and `replay` only record what to send: the
//! relay of a running `serve` sends it.

use chrono::{DateTime, SecondsFormat, Utc};
use clap::Subcommand;
use entity::{webhook_endpoint, webhook_event};
use sea_orm::{ActiveEnum, DatabaseConnection};
use serde_json::{Value, json};

use super::{CliResult, Output};
use crate::{
    config::Settings,
    events::{self, EventType},
    service::{
        admin_audit::Actor, keyset::Keyset, webhook_destination::Destinations,
        webhook_endpoints as endpoints, webhook_events, webhook_redelivery as redelivery,
    },
};

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Manage the endpoints events are sent to.
    #[command(subcommand)]
    Endpoint(EndpointCommand),
    /// Read the recorded events and what became of their deliveries.
    #[command(subcommand)]
    Event(EventCommand),
    /// Send an event again, with its webhook-id and body (to every enabled
    /// endpoint it went to, or to --endpoint).
    Resend {
        event_id: i64,
        #[arg(long)]
        endpoint: Option<i64>,
    },
    /// Send again the failed deliveries to an endpoint of the events
    /// recorded in a window of at most 14 days.
    Replay {
        #[arg(long)]
        endpoint: i64,
        /// Start of the window (RFC 3339, `2026-11-20T00:00:00Z`).
        #[arg(long, value_parser = parse_time)]
        since: DateTime<Utc>,
        /// End of the window (RFC 3339) [default: now].
        #[arg(long, value_parser = parse_time)]
        until: Option<DateTime<Utc>>,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// The events of a project, newest first.
    List {
        #[arg(long)]
        project: i64,
        /// Only the events about this order.
        #[arg(long)]
        order: Option<String>,
        /// Older than this event id (the `older` of the previous page).
        #[arg(long)]
        before: Option<i64>,
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// An event, its body, and each delivery with its attempts.
    Show { id: i64 },
}

fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|time| time.with_timezone(&Utc))
        .map_err(|_| format!("{text:?} is not an RFC 3339 time (2026-11-20T00:00:00Z)"))
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
    /// Send a webhook.test event to an endpoint.
    Test { id: i64 },
    /// Give an endpoint a new signing secret (printed once); the current one
    /// keeps signing too during the overlap.
    RotateSecret {
        id: i64,
        /// How long both secrets sign (at most 7 days; 0: the old one stops
        /// at once).
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        overlap: std::time::Duration,
    },
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
    let actor = &Actor::CommandLine;
    let cmd = match cmd {
        WebhookCommand::Endpoint(cmd) => cmd,
        WebhookCommand::Event(cmd) => return run_event(cmd, db, out).await,
        WebhookCommand::Resend { event_id, endpoint } => {
            let endpoints = redelivery::resend(db, actor, event_id, endpoint).await?;
            out.emit(
                json!({"event_id": event_id, "endpoints": endpoints}),
                || {
                    format!(
                        "event {event_id} queued for endpoints {:?}; a running serve sends it",
                        endpoints
                    )
                },
            );
            return Ok(());
        }
        WebhookCommand::Replay {
            endpoint,
            since,
            until,
        } => {
            let count = redelivery::replay(db, actor, endpoint, since, until).await?;
            out.emit(json!({"endpoint_id": endpoint, "events": count}), || {
                format!("{count} failed events queued again for endpoint {endpoint}; a running serve sends them")
            });
            return Ok(());
        }
    };
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
        EndpointCommand::Test { id } => {
            let event = redelivery::test_endpoint(db, actor, id).await?;
            out.emit(
                json!({"endpoint_id": id, "event_id": event.id, "webhook_id": event.webhook_id}),
                || {
                    format!(
                        "webhook.test event {} ({}) queued for endpoint {id}; a running serve sends it",
                        event.id, event.webhook_id
                    )
                },
            );
        }
        EndpointCommand::RotateSecret { id, overlap } => {
            let (endpoint, secret) = redelivery::rotate_secret(
                db,
                settings.webhook_secret_key.as_ref(),
                actor,
                id,
                overlap,
            )
            .await?;
            let until = endpoint.previous_secret_until.map(|t| t.to_rfc3339());
            let mut answer = endpoint_json(&endpoint);
            answer["secret"] = secret.expose().into();
            answer["previous_secret_until"] = until.clone().into();
            out.emit(answer, || {
                let overlap = match &until {
                    Some(until) => format!("The previous secret signs too until {until}."),
                    None => "The previous secret no longer signs.".to_owned(),
                };
                format!(
                    "rotated the secret of webhook endpoint {id}\n{}\nThis secret is shown once and cannot be recovered. {overlap}",
                    secret.expose()
                )
            });
        }
    }
    Ok(())
}

async fn run_event(cmd: EventCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    match cmd {
        EventCommand::List {
            project,
            order,
            before,
            limit,
        } => {
            let filter = webhook_events::EventFilter {
                order_id: order,
                ..Default::default()
            };
            let page = Keyset {
                before,
                size: limit.clamp(1, 1000),
            };
            let listed = webhook_events::page(db, project, &filter, page).await?;
            let events: Vec<Value> = listed.rows.iter().map(event_json).collect();
            out.emit(json!({"events": events, "older": listed.older}), || {
                let mut lines: Vec<String> = listed
                    .rows
                    .iter()
                    .map(|e| {
                        format!(
                            "{}\t{}\t{}\t{}\t{}",
                            e.id,
                            events::type_name(e.event_type),
                            e.order_id.as_deref().unwrap_or("-"),
                            e.webhook_id,
                            e.created_at.to_rfc3339_opts(SecondsFormat::Secs, true)
                        )
                    })
                    .collect();
                if let Some(older) = listed.older {
                    lines.push(format!("(older: --before {older})"));
                }
                lines.join("\n")
            });
        }
        EventCommand::Show { id } => {
            let (event, deliveries) = webhook_events::get(db, id).await?;
            let deliveries: Vec<Value> = deliveries
                .iter()
                .map(|d| {
                    json!({
                        "id": d.delivery.id,
                        "endpoint_id": d.delivery.endpoint_id,
                        "status": d.delivery.status.to_value(),
                        "attempts": d.attempts.iter().map(|a| json!({
                            "at": a.attempted_at,
                            "duration_ms": a.duration_ms,
                            "response_status": a.response_status,
                            "outcome": a.outcome.to_value(),
                            "response_excerpt": a.response_excerpt,
                            "next_attempt_at": a.next_attempt_at,
                        })).collect::<Vec<_>>(),
                        "next_attempt_at": d.delivery.next_attempt_at,
                    })
                })
                .collect();
            let mut answer = event_json(&event);
            answer["body"] = event.payload.clone().into();
            answer["deliveries"] = deliveries.clone().into();
            out.emit(answer, || {
                let mut text = format!(
                    "event {} ({}, {})\n{}",
                    event.id,
                    events::type_name(event.event_type),
                    event.webhook_id,
                    event.payload
                );
                for d in &deliveries {
                    text.push_str(&format!(
                        "\ndelivery {} to endpoint {}: {} after {} attempt(s)",
                        d["id"],
                        d["endpoint_id"],
                        d["status"].as_str().unwrap_or("?"),
                        d["attempts"].as_array().map_or(0, Vec::len)
                    ));
                    for a in d["attempts"].as_array().into_iter().flatten() {
                        text.push_str(&format!(
                            "\n  {} {} {} in {} ms",
                            a["at"].as_str().unwrap_or("?"),
                            a["outcome"].as_str().unwrap_or("?"),
                            a["response_status"],
                            a["duration_ms"]
                        ));
                    }
                }
                text
            });
        }
    }
    Ok(())
}

fn event_json(event: &webhook_event::Model) -> Value {
    json!({
        "id": event.id,
        "webhook_id": event.webhook_id,
        "project_id": event.project_id,
        "type": events::type_name(event.event_type),
        "order_id": event.order_id,
        "created_at": event.created_at,
    })
}
