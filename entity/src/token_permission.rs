//! One permission ("key access") of a token: the name of a v2 endpoint it may call.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "token_permissions")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub token_id: i64,
    /// `master-account/balance` or `payment/order/complete`.
    pub permission: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// Deleting a token deletes its permissions.
    #[sea_orm(
        belongs_to = "super::app_token::Entity",
        from = "Column::TokenId",
        to = "super::app_token::Column::Id",
        on_delete = "Cascade",
        fk_name = "fk_permissions_token"
    )]
    AppToken,
}

impl Related<super::app_token::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::AppToken.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
