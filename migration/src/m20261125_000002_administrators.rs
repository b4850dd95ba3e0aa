//! The administrators: the people who may sign in to the administration
//! panel, each with a name, an argon2id password hash (a PHC string: the
//! parameters and salt travel with the hash) and an active flag.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000002_administrators"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut created_at = ColumnDef::new(Administrators::CreatedAt);
        match manager.get_database_backend() {
            DbBackend::MySql => created_at.custom(Alias::new("DATETIME(6)")),
            _ => created_at.timestamp_with_time_zone(),
        };
        manager
            .create_table(
                Table::create()
                    .table(Administrators::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(Administrators::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(Administrators::Name)
                            .string_len(200)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(Administrators::PasswordHash)
                            .string_len(255)
                            .not_null(),
                    )
                    .col(ColumnDef::new(Administrators::Active).boolean().not_null())
                    .col(created_at.not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_administrators_name")
                    .table(Administrators::Table)
                    .col(Administrators::Name)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(Administrators::Table)
                    .if_exists()
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Administrators {
    Table,
    Id,
    Name,
    PasswordHash,
    Active,
    CreatedAt,
}
