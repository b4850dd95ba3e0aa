//! A payment order: created pending, then completed (credited exactly once)
//! or cancelled (never credited); both are final.
use sea_orm::entity::prelude::*;

/// Where an order is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
pub enum OrderStatus {
    /// Created, not completed yet.
    #[sea_orm(string_value = "pending")]
    Pending,
    /// Completed: its amount was credited, exactly once. Final.
    #[sea_orm(string_value = "completed")]
    Completed,
    /// Cancelled while pending: nothing was credited, and nothing will be.
    /// Final.
    #[sea_orm(string_value = "cancelled")]
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payment_orders")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `Order:` plus 8 to 11 letters or digits; unique across all projects.
    pub order_id: String,
    pub project_id: i64,
    pub user_id: i64,
    /// The server credited on completion; `None` credits the general account.
    pub server_id: Option<i64>,
    /// `cstm:` plus 4 to 20 lower-case letters; must match on completion.
    pub payment_system: String,
    /// Amount in minor units (cents), > 0.
    pub amount_cents: i64,
    pub status: OrderStatus,
    pub payment_id: Option<String>,
    pub created_at: ChronoDateTimeUtc,
    pub completed_at: Option<ChronoDateTimeUtc>,
    pub cancelled_at: Option<ChronoDateTimeUtc>,
    /// The `Idempotency-Key` the order was created with, unique per project.
    pub idempotency_key: Option<String>,
    /// With a key: SHA-256 (hex) of the creation request, to tell a repeat
    /// of it from another request under the same key.
    pub request_hash: Option<String>,
    /// When the last completion of the order was refused with an answer no
    /// retry changes (the order stayed pending), and why.
    pub refused_at: Option<ChronoDateTimeUtc>,
    pub refusal: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::project::Entity",
        from = "Column::ProjectId",
        to = "super::project::Column::Id",
        on_delete = "Restrict",
        fk_name = "fk_orders_project"
    )]
    Project,
    #[sea_orm(
        belongs_to = "super::user::Entity",
        from = "Column::UserId",
        to = "super::user::Column::Id",
        on_delete = "Restrict",
        fk_name = "fk_orders_user"
    )]
    User,
    #[sea_orm(
        belongs_to = "super::server::Entity",
        from = "Column::ServerId",
        to = "super::server::Column::Id",
        on_delete = "Restrict",
        fk_name = "fk_orders_server"
    )]
    Server,
}

impl Related<super::project::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Project.def()
    }
}

impl Related<super::user::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::User.def()
    }
}

impl Related<super::server::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Server.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
