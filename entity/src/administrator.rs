//! An administrator of the panel. The password is kept only as an argon2id
//! hash (a PHC string, with its parameters and salt).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "administrators")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Unique; what the administrator signs in with.
    pub name: String,
    pub password_hash: String,
    /// An inactive administrator cannot sign in.
    pub active: bool,
    pub created_at: ChronoDateTimeUtc,
    /// When they last signed in; none before their first sign-in.
    pub last_signed_in_at: Option<ChronoDateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
