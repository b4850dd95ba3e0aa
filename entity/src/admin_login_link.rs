//! A single-use sign-in link, found by the SHA-256 of its secret.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "admin_login_links")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Lower-case hex SHA-256 of the link's secret.
    pub link_hash: String,
    pub administrator_id: i64,
    pub created_at: ChronoDateTimeUtc,
    pub expires_at: ChronoDateTimeUtc,
    /// Set by the one sign-in that used the link.
    pub used_at: Option<ChronoDateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::administrator::Entity",
        from = "Column::AdministratorId",
        to = "super::administrator::Column::Id",
        on_delete = "Cascade",
        fk_name = "fk_admin_login_links_administrator"
    )]
    Administrator,
}

impl Related<super::administrator::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Administrator.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
