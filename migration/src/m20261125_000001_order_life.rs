//! The order's whole life over the API: cancellation and idempotent
//! creation.
//!
//! - `payment_orders.cancelled_at`: when a pending order was cancelled (the
//!   status says `cancelled`; both final, like `completed`).
//! - `payment_orders.idempotency_key` and `request_hash`: the key a client
//!   sent with the creation and the SHA-256 of the request it named. The
//!   unique index on `(project_id, idempotency_key)` is what makes one key
//!   create one order, however many instances receive it at once; NULLs are
//!   distinct on all three backends, so orders created without a key are
//!   unrestricted. A key lives as long as its order.
//! - `ix_log_user`: one user's operation history, newest first, by id
//!   (`GET /v2/master-account/operations` pages by id).
//!
//! SQLite adds one column per `ALTER TABLE`, so each column is its own
//! statement on every backend.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000001_order_life"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_database_backend();
        let mut cancelled_at = ColumnDef::new(PaymentOrders::CancelledAt);
        match db {
            DbBackend::MySql => cancelled_at.custom(Alias::new("DATETIME(6)")),
            _ => cancelled_at.timestamp_with_time_zone(),
        };
        for column in [
            cancelled_at.null().to_owned(),
            ColumnDef::new(PaymentOrders::IdempotencyKey)
                .string_len(255)
                .null()
                .to_owned(),
            ColumnDef::new(PaymentOrders::RequestHash)
                .string_len(64)
                .null()
                .to_owned(),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(PaymentOrders::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("ux_orders_idempotency_key")
                    .table(PaymentOrders::Table)
                    .col(PaymentOrders::ProjectId)
                    .col(PaymentOrders::IdempotencyKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_log_user")
                    .table(OperationLog::Table)
                    .col(OperationLog::UserId)
                    .col(OperationLog::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_log_user")
                    .table(OperationLog::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("ux_orders_idempotency_key")
                    .table(PaymentOrders::Table)
                    .to_owned(),
            )
            .await?;
        for column in [
            PaymentOrders::RequestHash,
            PaymentOrders::IdempotencyKey,
            PaymentOrders::CancelledAt,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(PaymentOrders::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum PaymentOrders {
    Table,
    ProjectId,
    CancelledAt,
    IdempotencyKey,
    RequestHash,
}

#[derive(DeriveIden)]
enum OperationLog {
    Table,
    Id,
    UserId,
}
