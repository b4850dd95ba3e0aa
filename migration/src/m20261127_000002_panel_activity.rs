//! What the panel shows of its administrators' activity.
//!
//! - `administrators.last_signed_in_at`: when the administrator last signed
//!   in (by password or link); none before the first sign-in.
//! - `admin_sessions.last_seen_at`: when the session last opened a page,
//!   to a minute (it is written at most once a minute); none before its
//!   first page.
//!
//! SQLite adds one column per `ALTER TABLE`, so each column is its own
//! statement on every backend.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261127_000002_panel_activity"
    }
}

/// A nullable point in time with microseconds (`DATETIME(6)` on
/// MariaDB/MySQL, as in the initial schema).
fn instant<T: IntoIden>(col: T, backend: DbBackend) -> ColumnDef {
    let mut def = ColumnDef::new(col);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("DATETIME(6)")),
        _ => def.timestamp_with_time_zone(),
    };
    def.null().to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_database_backend();
        manager
            .alter_table(
                Table::alter()
                    .table(Administrators::Table)
                    .add_column(instant(Administrators::LastSignedInAt, db))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(AdminSessions::Table)
                    .add_column(instant(AdminSessions::LastSeenAt, db))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(AdminSessions::Table)
                    .drop_column(AdminSessions::LastSeenAt)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Administrators::Table)
                    .drop_column(Administrators::LastSignedInAt)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Administrators {
    Table,
    LastSignedInAt,
}

#[derive(DeriveIden)]
enum AdminSessions {
    Table,
    LastSeenAt,
}
