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
//! - On MariaDB/MySQL, whose default collation ignores case, the key and
//!   `order_id` compare byte for byte (`ascii_bin`; both are ASCII by their
//!   format): `Order:abc12345` and `Order:ABC12345` are two orders, and two
//!   keys differing only in case are two keys, as on the other backends.
//!
//! SQLite adds one column per `ALTER TABLE`, so each column is its own
//! statement on every backend.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

/// MariaDB/MySQL column types that compare byte for byte.
const BYTEWISE_KEY: &str = "VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin";
const BYTEWISE_ORDER_ID: &str = "VARCHAR(20) CHARACTER SET ascii COLLATE ascii_bin";

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
        let mut idempotency_key = ColumnDef::new(PaymentOrders::IdempotencyKey);
        match db {
            DbBackend::MySql => idempotency_key.custom(Alias::new(BYTEWISE_KEY)),
            _ => idempotency_key.string_len(255),
        };
        for column in [
            cancelled_at.null().to_owned(),
            idempotency_key.null().to_owned(),
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
        if db == DbBackend::MySql {
            manager
                .alter_table(
                    Table::alter()
                        .table(PaymentOrders::Table)
                        .modify_column(
                            ColumnDef::new(PaymentOrders::OrderId)
                                .custom(Alias::new(BYTEWISE_ORDER_ID))
                                .not_null(),
                        )
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
        if manager.get_database_backend() == DbBackend::MySql {
            manager
                .alter_table(
                    Table::alter()
                        .table(PaymentOrders::Table)
                        .modify_column(
                            ColumnDef::new(PaymentOrders::OrderId)
                                .string_len(20)
                                .not_null(),
                        )
                        .to_owned(),
                )
                .await?;
        }
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
    OrderId,
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
