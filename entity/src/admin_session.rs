//! A signed-in browser of the panel, found by the SHA-256 of its cookie.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "admin_sessions")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Lower-case hex SHA-256 of the cookie value.
    pub session_hash: String,
    pub administrator_id: i64,
    pub created_at: ChronoDateTimeUtc,
    pub expires_at: ChronoDateTimeUtc,
    /// The address the session was signed in from.
    pub address: Option<String>,
    /// Whether a sign-in link opened it (not a password).
    pub by_link: bool,
    /// When it last opened a page, to a minute; none before its first.
    pub last_seen_at: Option<ChronoDateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::administrator::Entity",
        from = "Column::AdministratorId",
        to = "super::administrator::Column::Id",
        on_delete = "Cascade",
        fk_name = "fk_admin_sessions_administrator"
    )]
    Administrator,
}

impl Related<super::administrator::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Administrator.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
