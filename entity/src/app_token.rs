//! An application token. Only the SHA-256 of the value is stored; the value
//! itself is shown once, at creation or reissue, and cannot be recovered.
use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "app_tokens")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub project_id: i64,
    pub name: String,
    /// Lower-case hex SHA-256 of the 64-character token value.
    pub token_hash: String,
    pub active: bool,
    pub created_at: ChronoDateTimeUtc,
    pub last_used_at: Option<ChronoDateTimeUtc>,
    /// What the token is for, as its creator wrote it.
    pub description: Option<String>,
    /// Who created it: an administrator's name, or `command line`.
    pub created_by: Option<String>,
    /// The last 4 characters of the current value (`None` for values issued
    /// before they were kept).
    pub last4: Option<String>,
    /// When the token stops working; `None`: never.
    pub expires_at: Option<ChronoDateTimeUtc>,
    /// The value a reissue replaced, working until `previous_until`.
    pub previous_hash: Option<String>,
    pub previous_last4: Option<String>,
    pub previous_last_used_at: Option<ChronoDateTimeUtc>,
    pub previous_until: Option<ChronoDateTimeUtc>,
}

/// The hash is not secret in the way the value is, but it identifies a
/// credential: keep it out of logs all the same.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("app_token::Model")
            .field("id", &self.id)
            .field("project_id", &self.project_id)
            .field("name", &self.name)
            .field("token_hash", &"[redacted]")
            .field("active", &self.active)
            .field("created_at", &self.created_at)
            .field("last_used_at", &self.last_used_at)
            .field("description", &self.description)
            .field("created_by", &self.created_by)
            .field("last4", &self.last4)
            .field("expires_at", &self.expires_at)
            .field(
                "previous_hash",
                &self.previous_hash.as_ref().map(|_| "[redacted]"),
            )
            .field("previous_last4", &self.previous_last4)
            .field("previous_last_used_at", &self.previous_last_used_at)
            .field("previous_until", &self.previous_until)
            .finish()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::project::Entity",
        from = "Column::ProjectId",
        to = "super::project::Column::Id",
        on_delete = "Restrict",
        fk_name = "fk_tokens_project"
    )]
    Project,
}

impl Related<super::project::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Project.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
