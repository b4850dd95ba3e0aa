//! A project: the tenant that owns users, servers, orders and tokens.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "projects")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub name: String,
    /// An inactive project answers every token of its with 404 PROJECT_NOT_FOUND.
    pub active: bool,
    pub created_at: ChronoDateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(has_many = "super::user::Entity")]
    User,
    #[sea_orm(has_many = "super::server::Entity")]
    Server,
    #[sea_orm(has_many = "super::payment_order::Entity")]
    PaymentOrder,
    #[sea_orm(has_many = "super::app_token::Entity")]
    AppToken,
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

impl Related<super::payment_order::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::PaymentOrder.def()
    }
}

impl Related<super::app_token::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::AppToken.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
