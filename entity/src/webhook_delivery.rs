//! One event to one endpoint: pending until it succeeded or failed.
use sea_orm::entity::prelude::*;

/// Where a delivery is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
pub enum DeliveryStatus {
    /// Due at `next_attempt_at`.
    #[sea_orm(string_value = "pending")]
    Pending,
    /// The endpoint answered 2xx. Final.
    #[sea_orm(string_value = "succeeded")]
    Succeeded,
    /// The schedule ran out, or the endpoint was disabled. Final.
    #[sea_orm(string_value = "failed")]
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub event_id: i64,
    pub endpoint_id: i64,
    pub status: DeliveryStatus,
    pub attempts: i32,
    /// When it is due; `None` once final.
    pub next_attempt_at: Option<ChronoDateTimeUtc>,
    /// Held by `lease_owner` until then.
    pub leased_until: Option<ChronoDateTimeUtc>,
    /// The relay instance holding it.
    pub lease_owner: Option<String>,
    pub last_attempt_at: Option<ChronoDateTimeUtc>,
    pub created_at: ChronoDateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::webhook_event::Entity",
        from = "Column::EventId",
        to = "super::webhook_event::Column::Id",
        on_delete = "Cascade",
        fk_name = "fk_webhook_deliveries_event"
    )]
    Event,
    #[sea_orm(
        belongs_to = "super::webhook_endpoint::Entity",
        from = "Column::EndpointId",
        to = "super::webhook_endpoint::Column::Id",
        on_delete = "Cascade",
        fk_name = "fk_webhook_deliveries_endpoint"
    )]
    Endpoint,
}

impl Related<super::webhook_event::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Event.def()
    }
}

impl Related<super::webhook_endpoint::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Endpoint.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
