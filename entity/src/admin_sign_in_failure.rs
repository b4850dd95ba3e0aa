//! One failed sign-in, counted by name and by address for the rate limit.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "admin_sign_in_failures")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The name as typed (it need not exist).
    pub name: String,
    pub address: String,
    pub failed_at: ChronoDateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
