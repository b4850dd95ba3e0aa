//! The balance of one user on one server, or on the general account (`server_id` 0).
//!
//! `server_id` 0 is not a row of `servers`, so this column carries no foreign key;
//! the service layer only writes ids it has checked, and `masterpay audit` verifies.
//! A missing row reads as zero.
use sea_orm::entity::prelude::*;

/// The `server_id` of the general master account.
pub const GENERAL_ACCOUNT: i64 = 0;

/// Keyed by its account, (user, server): every statement finds a balance
/// that way.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "balances")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub user_id: i64,
    #[sea_orm(primary_key, auto_increment = false)]
    pub server_id: i64,
    /// Main balance in minor units (cents).
    pub main_cents: i64,
    /// Bonus balance in minor units (cents).
    pub bonus_cents: i64,
    pub updated_at: ChronoDateTimeUtc,
    /// The user's project, kept equal to it by the foreign key
    /// `(user_id, project_id)` → `users (id, project_id)`: a lookup finds the
    /// balance of a project's user without reading the user.
    pub project_id: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// Through the pair, so that the row's project is its user's.
    #[sea_orm(
        belongs_to = "super::user::Entity",
        from = "(Column::UserId, Column::ProjectId)",
        to = "(super::user::Column::Id, super::user::Column::ProjectId)",
        on_delete = "Restrict",
        fk_name = "fk_balances_user_project"
    )]
    User,
}

impl Related<super::user::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::User.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
