//! A completion refused as final, recorded with its order.
//!
//! - `payment_orders.refused_at` and `refusal`: when the last completion of a
//!   pending order was refused with an answer that no retry can change (its
//!   credit would take the balance past its ceiling), and why, in a sentence
//!   for the operator. The order stays pending; an operator completes it once
//!   the balance allows, and the columns then keep the history of the refusal.
//!
//! SQLite adds one column per `ALTER TABLE`, so each column is its own
//! statement on every backend.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261126_000001_completion_refusals"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut refused_at = ColumnDef::new(PaymentOrders::RefusedAt);
        match manager.get_database_backend() {
            DbBackend::MySql => refused_at.custom(Alias::new("DATETIME(6)")),
            _ => refused_at.timestamp_with_time_zone(),
        };
        for column in [
            refused_at.null().to_owned(),
            ColumnDef::new(PaymentOrders::Refusal)
                .string_len(255)
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
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [PaymentOrders::Refusal, PaymentOrders::RefusedAt] {
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
    RefusedAt,
    Refusal,
}
