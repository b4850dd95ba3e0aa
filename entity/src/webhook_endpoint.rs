//! An integrator's endpoint: where a project's events are sent, signed with
//! the endpoint's secret (Standard Webhooks v1).
use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub project_id: i64,
    /// `http` or `https`, at most 2048 characters.
    pub url: String,
    /// What the endpoint is for, as its creator wrote it (may be empty).
    pub description: String,
    /// The event types it receives, comma-separated canonical names
    /// (`order.completed,balance.set`); `None`: every type.
    #[sea_orm(column_type = "Text", nullable)]
    pub event_types: Option<String>,
    /// The signing secret, sealed (`sealed:v1:...`) or, without a sealing
    /// key, in clear (`plain:whsec_...`).
    #[sea_orm(column_type = "Text")]
    pub secret: String,
    /// The secret a rotation replaced, which signs too until
    /// `previous_secret_until`.
    #[sea_orm(column_type = "Text", nullable)]
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<ChronoDateTimeUtc>,
    pub enabled: bool,
    /// Why it stopped receiving (`answered 410`, `failing for 5 days`,
    /// `disabled by an administrator`); `None` while enabled.
    pub disabled_reason: Option<String>,
    /// The first failed attempt of the current run of failures; a success
    /// clears it.
    pub failing_since: Option<ChronoDateTimeUtc>,
    pub created_at: ChronoDateTimeUtc,
    pub updated_at: ChronoDateTimeUtc,
}

/// A sealed secret is safe to print, a plain one is not: keep both out of
/// logs.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("webhook_endpoint::Model")
            .field("id", &self.id)
            .field("project_id", &self.project_id)
            .field("url", &self.url)
            .field("description", &self.description)
            .field("event_types", &self.event_types)
            .field("secret", &"[redacted]")
            .field(
                "previous_secret",
                &self.previous_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("previous_secret_until", &self.previous_secret_until)
            .field("enabled", &self.enabled)
            .field("disabled_reason", &self.disabled_reason)
            .field("failing_since", &self.failing_since)
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .finish()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::project::Entity",
        from = "Column::ProjectId",
        to = "super::project::Column::Id",
        on_delete = "Restrict",
        fk_name = "fk_webhook_endpoints_project"
    )]
    Project,
}

impl Related<super::project::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Project.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
