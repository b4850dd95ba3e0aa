//! Whether a panel session was opened by a sign-in link.
//!
//! - `admin_sessions.by_link`: true for a session a sign-in link opened (the
//!   lost-password path), which may set a new password without the current
//!   one during the link's lifetime after sign-in.

use sea_orm_migration::prelude::*;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261126_000002_session_by_link"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(AdminSessions::Table)
                    .add_column(
                        ColumnDef::new(AdminSessions::ByLink)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(AdminSessions::Table)
                    .drop_column(AdminSessions::ByLink)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum AdminSessions {
    Table,
    ByLink,
}
