//! One change sent to a project's endpoints, recorded in the transaction
//! (or the statement) of the change, and only when an enabled endpoint of
//! the project is subscribed to its type.
use sea_orm::entity::prelude::*;

/// What changed. The string values are the `type` of the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(32))")]
pub enum EventType {
    #[sea_orm(string_value = "order.created")]
    OrderCreated,
    #[sea_orm(string_value = "order.completed")]
    OrderCompleted,
    #[sea_orm(string_value = "order.cancelled")]
    OrderCancelled,
    /// One of an account's balances set by an operator.
    #[sea_orm(string_value = "balance.set")]
    BalanceSet,
    /// Sent on request, to try an endpoint.
    #[sea_orm(string_value = "webhook.test")]
    WebhookTest,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `msg_` + 32 lower-case hex digits: the `webhook-id` header, the same
    /// on every attempt of every endpoint.
    pub webhook_id: String,
    pub project_id: i64,
    pub event_type: EventType,
    /// The order an `order.*` event is about.
    pub order_id: Option<String>,
    /// The exact body sent: `{"type","timestamp","data"}`.
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    pub created_at: ChronoDateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
