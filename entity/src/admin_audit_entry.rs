//! One change made through the panel or the command line, written in the
//! transaction of the change. `before` and `after` are JSON objects of the
//! changed object's fields, never a secret.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "admin_audit_log")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub at: ChronoDateTimeUtc,
    /// The administrator who made the change; none for the command line.
    pub administrator_id: Option<i64>,
    /// The administrator's name, or `command line`.
    pub actor: String,
    /// What was done, as `object.verb` (`token.create`, `balance.set`).
    pub action: String,
    /// The kind of the changed object (`token`, `project`, `order`...).
    pub object_kind: String,
    /// Its id (an order's `order_id`).
    pub object_id: String,
    #[sea_orm(column_type = "Text", nullable)]
    pub before: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub after: Option<String>,
    /// The administrator's address; none for the command line.
    pub address: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
