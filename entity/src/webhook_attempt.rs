//! One attempt of a delivery: when, how long, what answered, and what was
//! scheduled after it.
use sea_orm::entity::prelude::*;

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
pub enum AttemptOutcome {
    /// A 2xx answer.
    #[sea_orm(string_value = "succeeded")]
    Succeeded,
    /// Any other status but a redirect or 410.
    #[sea_orm(string_value = "http_error")]
    HttpError,
    #[sea_orm(string_value = "timeout")]
    Timeout,
    #[sea_orm(string_value = "connect_error")]
    ConnectError,
    /// A 3xx answer; redirects are not followed.
    #[sea_orm(string_value = "redirect")]
    Redirect,
    /// The address resolved to one events are never sent to.
    #[sea_orm(string_value = "refused_address")]
    RefusedAddress,
    /// 410 Gone: the endpoint is disabled.
    #[sea_orm(string_value = "gone")]
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub delivery_id: i64,
    pub attempted_at: ChronoDateTimeUtc,
    pub duration_ms: i32,
    /// The HTTP status, when one answered.
    pub response_status: Option<i32>,
    pub outcome: AttemptOutcome,
    /// At most 1 KiB of the answer, for operators.
    #[sea_orm(column_type = "Text")]
    pub response_excerpt: String,
    /// What was scheduled after this attempt; `None` when it ended the
    /// delivery.
    pub next_attempt_at: Option<ChronoDateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::webhook_delivery::Entity",
        from = "Column::DeliveryId",
        to = "super::webhook_delivery::Column::Id",
        on_delete = "Cascade",
        fk_name = "fk_webhook_attempts_delivery"
    )]
    Delivery,
}

impl Related<super::webhook_delivery::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Delivery.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
