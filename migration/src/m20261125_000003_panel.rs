//! What the administration panel keeps:
//!
//! - `admin_sessions`: one row per signed-in browser, found by the SHA-256
//!   of its cookie (the cookie value itself is never stored); it ends at
//!   `expires_at` or when deleted (sign-out, the administrator disabled).
//! - `admin_login_links`: single-use sign-in links, by the SHA-256 of their
//!   secret; `used_at` is set by the one request that redeems a link.
//! - `admin_sign_in_failures`: failed sign-ins by name and address, counted
//!   over a sliding window for the rate limit; kept in the database so that
//!   every instance counts the same failures.
//! - `admin_audit_log`: every change made through the panel or the command
//!   line, written in the transaction of the change: who (an administrator
//!   or the command line), what, on which object, before and after (JSON,
//!   never a secret), when and from which address.
//! - `app_tokens.description` and `created_by`: what a token is for, and
//!   who created it (an administrator's name, or `command line`).

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000003_panel"
    }
}

/// A point in time with microseconds (`DATETIME(6)` on MariaDB/MySQL, as in
/// the initial schema).
fn instant<T: IntoIden>(col: T, backend: DbBackend) -> ColumnDef {
    let mut def = ColumnDef::new(col);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("DATETIME(6)")),
        _ => def.timestamp_with_time_zone(),
    };
    def.to_owned()
}

fn id<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col)
        .big_integer()
        .not_null()
        .auto_increment()
        .primary_key()
        .to_owned()
}

fn text<T: IntoIden>(col: T, len: u32) -> ColumnDef {
    ColumnDef::new(col).string_len(len).not_null().to_owned()
}

fn to_administrator<T: IntoIden + 'static>(
    name: &str,
    table: T,
    column: T,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(table, column)
        .to(Administrators::Table, Administrators::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

fn index<T: IntoIden + Clone + 'static>(
    name: &str,
    table: T,
    columns: Vec<T>,
    unique: bool,
) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table(table);
    for column in columns {
        index.col(column);
    }
    if unique {
        index.unique();
    }
    index.to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_database_backend();
        manager
            .create_table(
                Table::create()
                    .table(AdminSessions::Table)
                    .if_not_exists()
                    .col(id(AdminSessions::Id))
                    .col(text(AdminSessions::SessionHash, 64))
                    .col(
                        ColumnDef::new(AdminSessions::AdministratorId)
                            .big_integer()
                            .not_null(),
                    )
                    .col(instant(AdminSessions::CreatedAt, db).not_null())
                    .col(instant(AdminSessions::ExpiresAt, db).not_null())
                    .col(ColumnDef::new(AdminSessions::Address).string_len(64).null())
                    .foreign_key(&mut to_administrator(
                        "fk_admin_sessions_administrator",
                        AdminSessions::Table,
                        AdminSessions::AdministratorId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AdminLoginLinks::Table)
                    .if_not_exists()
                    .col(id(AdminLoginLinks::Id))
                    .col(text(AdminLoginLinks::LinkHash, 64))
                    .col(
                        ColumnDef::new(AdminLoginLinks::AdministratorId)
                            .big_integer()
                            .not_null(),
                    )
                    .col(instant(AdminLoginLinks::CreatedAt, db).not_null())
                    .col(instant(AdminLoginLinks::ExpiresAt, db).not_null())
                    .col(instant(AdminLoginLinks::UsedAt, db).null())
                    .foreign_key(&mut to_administrator(
                        "fk_admin_login_links_administrator",
                        AdminLoginLinks::Table,
                        AdminLoginLinks::AdministratorId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AdminSignInFailures::Table)
                    .if_not_exists()
                    .col(id(AdminSignInFailures::Id))
                    .col(text(AdminSignInFailures::Name, 200))
                    .col(text(AdminSignInFailures::Address, 64))
                    .col(instant(AdminSignInFailures::FailedAt, db).not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AdminAuditLog::Table)
                    .if_not_exists()
                    .col(id(AdminAuditLog::Id))
                    .col(instant(AdminAuditLog::At, db).not_null())
                    .col(
                        ColumnDef::new(AdminAuditLog::AdministratorId)
                            .big_integer()
                            .null(),
                    )
                    .col(text(AdminAuditLog::Actor, 200))
                    .col(text(AdminAuditLog::Action, 64))
                    .col(text(AdminAuditLog::ObjectKind, 32))
                    .col(text(AdminAuditLog::ObjectId, 64))
                    .col(ColumnDef::new(AdminAuditLog::Before).text().null())
                    .col(ColumnDef::new(AdminAuditLog::After).text().null())
                    .col(ColumnDef::new(AdminAuditLog::Address).string_len(64).null())
                    .to_owned(),
            )
            .await?;
        for statement in [
            index(
                "ux_admin_sessions_hash",
                AdminSessions::Table,
                vec![AdminSessions::SessionHash],
                true,
            ),
            index(
                "ix_admin_sessions_administrator",
                AdminSessions::Table,
                vec![AdminSessions::AdministratorId],
                false,
            ),
        ] {
            manager.create_index(statement).await?;
        }
        manager
            .create_index(index(
                "ux_admin_login_links_hash",
                AdminLoginLinks::Table,
                vec![AdminLoginLinks::LinkHash],
                true,
            ))
            .await?;
        for statement in [
            index(
                "ix_admin_sign_in_failures_name",
                AdminSignInFailures::Table,
                vec![AdminSignInFailures::Name, AdminSignInFailures::FailedAt],
                false,
            ),
            index(
                "ix_admin_sign_in_failures_address",
                AdminSignInFailures::Table,
                vec![AdminSignInFailures::Address, AdminSignInFailures::FailedAt],
                false,
            ),
        ] {
            manager.create_index(statement).await?;
        }
        for statement in [
            index(
                "ix_admin_audit_log_object",
                AdminAuditLog::Table,
                vec![AdminAuditLog::ObjectKind, AdminAuditLog::ObjectId],
                false,
            ),
            index(
                "ix_admin_audit_log_action",
                AdminAuditLog::Table,
                vec![AdminAuditLog::Action],
                false,
            ),
        ] {
            manager.create_index(statement).await?;
        }
        for column in [
            ColumnDef::new(AppTokens::Description)
                .string_len(500)
                .null()
                .to_owned(),
            ColumnDef::new(AppTokens::CreatedBy)
                .string_len(200)
                .null()
                .to_owned(),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(AppTokens::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [AppTokens::Description, AppTokens::CreatedBy] {
            manager
                .alter_table(
                    Table::alter()
                        .table(AppTokens::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .drop_table(
                Table::drop()
                    .table(AdminAuditLog::Table)
                    .if_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(
                Table::drop()
                    .table(AdminSignInFailures::Table)
                    .if_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(
                Table::drop()
                    .table(AdminLoginLinks::Table)
                    .if_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(
                Table::drop()
                    .table(AdminSessions::Table)
                    .if_exists()
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden, Clone)]
enum Administrators {
    Table,
    Id,
}

#[derive(DeriveIden, Clone)]
enum AdminSessions {
    Table,
    Id,
    SessionHash,
    AdministratorId,
    CreatedAt,
    ExpiresAt,
    Address,
}

#[derive(DeriveIden, Clone)]
enum AdminLoginLinks {
    Table,
    Id,
    LinkHash,
    AdministratorId,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}

#[derive(DeriveIden, Clone)]
enum AdminSignInFailures {
    Table,
    Id,
    Name,
    Address,
    FailedAt,
}

#[derive(DeriveIden, Clone)]
enum AdminAuditLog {
    Table,
    Id,
    At,
    AdministratorId,
    Actor,
    Action,
    ObjectKind,
    ObjectId,
    Before,
    After,
    Address,
}

#[derive(DeriveIden, Clone)]
enum AppTokens {
    Table,
    Description,
    CreatedBy,
}
