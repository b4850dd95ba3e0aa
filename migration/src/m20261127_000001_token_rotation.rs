//! Token values as operators handle them: a non-secret identifier of each
//! value, rotation with a grace period, an optional expiry.
//!
//! - `app_tokens.last4`: the last 4 characters of the current value, so that
//!   a deployed value can be matched to its row (`NULL` for values issued
//!   before it was kept).
//! - `app_tokens.expires_at`: when the token stops working (`NULL`: never).
//! - `app_tokens.previous_hash`, `previous_last4`, `previous_last_used_at`,
//!   `previous_until`: the value a reissue replaced, which keeps working
//!   until `previous_until` (the grace period). A token has at most two
//!   values; the next reissue, or ending the grace, clears these. The hash
//!   is unique like `token_hash`, and indexed for the token read.
//!
//! SQLite adds one column per `ALTER TABLE`, so each column is its own
//! statement on every backend.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261127_000001_token_rotation"
    }
}

const PREVIOUS_HASH_INDEX: &str = "ux_app_tokens_previous_hash";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let instant = |column: AppTokens| {
            let mut def = ColumnDef::new(column);
            match backend {
                DbBackend::MySql => def.custom(Alias::new("DATETIME(6)")),
                _ => def.timestamp_with_time_zone(),
            };
            def.null().to_owned()
        };
        let text =
            |column: AppTokens, len: u32| ColumnDef::new(column).string_len(len).null().to_owned();
        for column in [
            text(AppTokens::Last4, 4),
            instant(AppTokens::ExpiresAt),
            text(AppTokens::PreviousHash, 64),
            text(AppTokens::PreviousLast4, 4),
            instant(AppTokens::PreviousLastUsedAt),
            instant(AppTokens::PreviousUntil),
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
        manager
            .create_index(
                Index::create()
                    .name(PREVIOUS_HASH_INDEX)
                    .table(AppTokens::Table)
                    .col(AppTokens::PreviousHash)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(PREVIOUS_HASH_INDEX)
                    .table(AppTokens::Table)
                    .to_owned(),
            )
            .await?;
        for column in [
            AppTokens::PreviousUntil,
            AppTokens::PreviousLastUsedAt,
            AppTokens::PreviousLast4,
            AppTokens::PreviousHash,
            AppTokens::ExpiresAt,
            AppTokens::Last4,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(AppTokens::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum AppTokens {
    Table,
    Last4,
    ExpiresAt,
    PreviousHash,
    PreviousLast4,
    PreviousLastUsedAt,
    PreviousUntil,
}
