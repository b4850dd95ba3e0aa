//! Integrators' webhook endpoints: where a project's events go, which
//! types each receives, and its signing secret.
//!
//! A secret is drawn when the endpoint is made, shown once, and stored
//! sealed (see [`webhook_secrets`]); listing never shows it. Every change
//! is in the admin audit log, never with the secret. An address is checked
//! by [`check_destination`] when it is set (created or changed): it must be
//! an `http` or `https` URL with a host, without credentials, of at most
//! 2048 characters, whose host is not, and does not resolve to, an address
//! the destination rules refuse (see [`webhook_destination`]; the relay
//! checks again at every send).

use chrono::{DateTime, Utc};
use entity::webhook_endpoint;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection,
    EntityTrait, QueryFilter, QueryOrder,
};
use serde_json::{Value, json};

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change, toggle_action},
    now, projects, validate,
    webhook_destination::Destinations,
    webhook_secrets::{self, WebhookSecret},
};
use crate::{
    config::WebhookSecretKey,
    events::{self, EventType},
};

/// Longest endpoint address accepted.
pub const URL_MAX_LEN: usize = 2048;

/// Why an endpoint stops receiving when an administrator disables it.
pub const DISABLED_BY_ADMINISTRATOR: &str = "disabled by an administrator";

/// Whether events may be sent to `url`, trimmed: an `http` or `https` URL
/// with a host, no user name or password (a secret in an address ends up in
/// logs), at most [`URL_MAX_LEN`] characters, going nowhere `destinations`
/// refuse (it may resolve the host). Every address an endpoint is given
/// passes here.
pub async fn check_destination(url: &str, destinations: &Destinations) -> Result<String, String> {
    let url = url.trim();
    if url.chars().count() > URL_MAX_LEN {
        return Err(format!("the URL must be at most {URL_MAX_LEN} characters"));
    }
    let parsed = url::Url::parse(url).map_err(|err| format!("the URL is not valid: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("the URL must start with http:// or https://".to_owned());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the URL must name a host".to_owned());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the URL must not carry a user name or password".to_owned());
    }
    destinations
        .policy
        .check(url, &*destinations.lookup.0)
        .await
        .map_err(|refusal| refusal.to_string())?;
    Ok(url.to_owned())
}

/// An endpoint as the audit log shows it: never its secret.
fn audited(endpoint: &webhook_endpoint::Model) -> Value {
    json!({
        "project_id": endpoint.project_id,
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": endpoint.event_types,
        "enabled": endpoint.enabled,
        "disabled_reason": endpoint.disabled_reason,
    })
}

/// Makes an endpoint of `project_id` receiving `types` (`None`: every
/// type) at `url`; returns it and its secret, shown this once. The secret is
/// sealed with `key`, the address checked against `destinations`.
#[allow(clippy::too_many_arguments)] // the settings' two, the endpoint's five
pub async fn create(
    db: &DatabaseConnection,
    key: Option<&WebhookSecretKey>,
    destinations: &Destinations,
    actor: &Actor,
    project_id: i64,
    url: &str,
    types: Option<&[EventType]>,
    description: Option<&str>,
) -> Result<(webhook_endpoint::Model, WebhookSecret), AdminError> {
    let url = check_destination(url, destinations)
        .await
        .map_err(AdminError::invalid("url"))?;
    let description = validate::description(description)?
        .flatten()
        .unwrap_or_default();
    projects::get(db, project_id).await?;
    let secret = WebhookSecret::generate();
    let at = now();
    let txn = AuditedChange::begin(db, actor).await?;
    let endpoint = webhook_endpoint::ActiveModel {
        project_id: Set(project_id),
        url: Set(url),
        description: Set(description),
        event_types: Set(types.map(events::stored_types)),
        secret: Set(webhook_secrets::seal(&secret, key)),
        previous_secret: Set(None),
        previous_secret_until: Set(None),
        enabled: Set(true),
        disabled_reason: Set(None),
        failing_since: Set(None),
        created_at: Set(at),
        updated_at: Set(at),
        ..Default::default()
    }
    .insert(&*txn)
    .await?;
    let change = Change::new("webhook_endpoint.create", "webhook_endpoint", endpoint.id)
        .after(audited(&endpoint));
    txn.commit(change).await?;
    Ok((endpoint, secret))
}

/// The endpoints of `project_id` (of every project when `None`), by id.
pub async fn list(
    db: &DatabaseConnection,
    project_id: Option<i64>,
) -> Result<Vec<webhook_endpoint::Model>, AdminError> {
    let mut query = webhook_endpoint::Entity::find();
    if let Some(project_id) = project_id {
        projects::get(db, project_id).await?;
        query = query.filter(webhook_endpoint::Column::ProjectId.eq(project_id));
    }
    Ok(query
        .order_by_asc(webhook_endpoint::Column::Id)
        .all(db)
        .await?)
}

/// The endpoint `id`.
pub async fn get(db: &DatabaseConnection, id: i64) -> Result<webhook_endpoint::Model, AdminError> {
    find(db, id, false).await
}

/// The endpoint `id`; with `lock`, locked until the end of the write
/// transaction `db`.
pub(super) async fn find<C: ConnectionTrait>(
    db: &C,
    id: i64,
    lock: bool,
) -> Result<webhook_endpoint::Model, AdminError> {
    super::find_row(db, webhook_endpoint::Entity, "webhook endpoint", id, lock).await
}

/// Changes the endpoint `id` under its lock with `change`; logged as
/// `action`, with the endpoint before and after.
async fn update(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    action: &str,
    change: impl FnOnce(&mut webhook_endpoint::ActiveModel),
) -> Result<webhook_endpoint::Model, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let before = find(&*txn, id, true).await?;
    let mut model: webhook_endpoint::ActiveModel = before.clone().into();
    change(&mut model);
    model.updated_at = Set(now());
    let endpoint = model.update(&*txn).await?;
    let change = Change::new(action, "webhook_endpoint", id)
        .before(audited(&before))
        .after(audited(&endpoint));
    txn.commit(change).await?;
    Ok(endpoint)
}

/// What an edit changes; what is `None` stays as it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct EndpointEdit<'a> {
    pub url: Option<&'a str>,
    /// `Some(None)`: every type.
    pub types: Option<Option<&'a [EventType]>>,
    /// A blank description removes it.
    pub description: Option<&'a str>,
}

/// Changes the address, the types and/or the description of the endpoint
/// `id`.
pub async fn edit(
    db: &DatabaseConnection,
    destinations: &Destinations,
    actor: &Actor,
    id: i64,
    edit: EndpointEdit<'_>,
) -> Result<webhook_endpoint::Model, AdminError> {
    let url = match edit.url {
        Some(url) => Some(
            check_destination(url, destinations)
                .await
                .map_err(AdminError::invalid("url"))?,
        ),
        None => None,
    };
    let description = validate::description(edit.description)?.map(Option::unwrap_or_default);
    update(db, actor, id, "webhook_endpoint.edit", |model| {
        if let Some(url) = url {
            model.url = Set(url);
        }
        if let Some(types) = edit.types {
            model.event_types = Set(types.map(events::stored_types));
        }
        if let Some(description) = description {
            model.description = Set(description);
        }
    })
    .await
}

/// Enables the endpoint `id` (its run of failures starts over), or
/// disables it as [`DISABLED_BY_ADMINISTRATOR`]: then its changes record
/// no more events for it.
pub async fn set_enabled(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    enabled: bool,
) -> Result<webhook_endpoint::Model, AdminError> {
    let action = toggle_action("webhook_endpoint", enabled);
    update(db, actor, id, &action, |model| {
        model.enabled = Set(enabled);
        model.failing_since = Set(None);
        model.disabled_reason = Set((!enabled).then(|| DISABLED_BY_ADMINISTRATOR.to_owned()));
    })
    .await
}

/// Deletes the endpoint `id` with its deliveries and their attempts; its
/// project's events stay.
pub async fn delete(db: &DatabaseConnection, actor: &Actor, id: i64) -> Result<(), AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let before = find(&*txn, id, true).await?;
    webhook_endpoint::Entity::delete_by_id(id)
        .exec(&*txn)
        .await?;
    let change =
        Change::new("webhook_endpoint.delete", "webhook_endpoint", id).before(audited(&before));
    txn.commit(change).await?;
    Ok(())
}

/// When the secret a rotation replaced stops signing; `None` when there is
/// none or it has stopped.
pub fn previous_secret_until(endpoint: &webhook_endpoint::Model) -> Option<DateTime<Utc>> {
    endpoint
        .previous_secret
        .as_ref()
        .and(endpoint.previous_secret_until)
        .filter(|until| *until > now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn destinations_are_http_urls_with_a_host_and_no_credentials() {
        let open = Destinations::default();
        let check = |url: &str| {
            let url = url.to_owned();
            let open = open.clone();
            async move { check_destination(&url, &open).await }
        };
        assert_eq!(
            check(" https://93.184.215.14/masterpay?x=1 ").await,
            Ok("https://93.184.215.14/masterpay?x=1".to_owned())
        );
        let private = "http://10.0.0.5:8080/in";
        assert_eq!(
            check(private).await.unwrap_err(),
            "10.0.0.5 is not a public address (webhook_allow_networks can allow it)"
        );
        let allowed = Destinations {
            policy: crate::service::webhook_destination::DestinationPolicy {
                allow: vec!["10.0.0.0/8".parse().unwrap()],
                https_only: false,
            },
            ..Destinations::default()
        };
        assert!(check_destination(private, &allowed).await.is_ok());
        for refused in [
            "",
            "hooks.example.com/in",
            "ftp://hooks.example.com/in",
            "https://",
            "https://user:pass@hooks.example.com/in",
            "file:///etc/passwd",
        ] {
            assert!(check(refused).await.is_err(), "{refused:?}");
        }
        let long = format!("https://example.com/{}", "a".repeat(URL_MAX_LEN));
        assert!(check(&long).await.unwrap_err().contains("2048"));
    }
}
