//! The schema: projects, users, servers, balances, payment orders,
//! application tokens with their permissions, and the operation log.
//!
//! Money is `BIGINT` minor units everywhere (see the `entity` crate docs).
//! The largest amount the service accepts is 10^17 - 1 cents, i.e. fifteen
//! integer digits; the balance columns carry the same ceiling as a CHECK, so a
//! credit that would pass it fails inside its transaction and rolls back.
//!
//! Shaped by what the request path reads and writes:
//!
//! - A balance row is keyed by its account, `(user_id, server_id)`, the key
//!   every statement finds it by. SQLite stores the rows in that key's B-tree
//!   (`WITHOUT ROWID`) and InnoDB clusters them by it, so a lookup or a
//!   credit reads one B-tree, not a unique index and then the row.
//! - A balance row carries its user's project, kept equal to it by the
//!   foreign key `(user_id, project_id)` → `users (id, project_id)`: a lookup
//!   of a project's user reads the balance row alone, and `users` only when
//!   there is none (to tell a user without a balance from no such user). A
//!   user never changes project, so the copy cannot go stale.
//! - An operation-log row references its account (`balances`), not its user.
//!   Every writer changes the balance row first and logs after it in the
//!   same transaction, so the key says all a key to `users` would, and its
//!   check (PostgreSQL locks the referenced row, InnoDB too) lands on the row
//!   just updated instead of dirtying a random user's page.
//! - On PostgreSQL `payment_orders` and `balances` keep 10 % of each page
//!   free (`fillfactor = 90`). A completion changes only unindexed columns,
//!   so with room in the page its updates are heap-only and touch no index.
//!   SQLite and MariaDB have no such setting (InnoDB updates rows in place).
//!
//! PostgreSQL runs the migration in one transaction. SQLite and MariaDB run
//! its statements one by one (MariaDB commits each DDL statement by itself);
//! tables are created `IF NOT EXISTS`, and so are indexes except on MariaDB,
//! where sea-query leaves it out because MySQL has no such clause.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

/// 999 999 999 999 999.99 in cents: the largest balance or amount stored.
pub const MAX_CENTS: i64 = 99_999_999_999_999_999;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261122_000001_create_schema"
    }
}

fn id<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col)
        .big_integer()
        .not_null()
        .auto_increment()
        .primary_key()
        .to_owned()
}

fn big<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).big_integer().not_null().to_owned()
}

fn text<T: IntoIden>(col: T, len: u32) -> ColumnDef {
    ColumnDef::new(col).string_len(len).not_null().to_owned()
}

/// A point in time with microseconds. MariaDB/MySQL get `DATETIME(6)`: their
/// `TIMESTAMP` drops the fraction, ends in 2038, and on older servers
/// silently updates itself on every row change.
fn instant<T: IntoIden>(col: T, backend: DbBackend) -> ColumnDef {
    let mut def = ColumnDef::new(col);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("DATETIME(6)")),
        _ => def.timestamp_with_time_zone(),
    };
    def.to_owned()
}

fn time<T: IntoIden>(col: T, backend: DbBackend) -> ColumnDef {
    instant(col, backend).not_null().to_owned()
}

/// A foreign key from `from` (a table and its columns) to `to`; a row that
/// is referenced cannot be deleted.
fn fk(
    name: &str,
    from: (impl IntoIden, impl IdenList),
    to: (impl IntoIden, impl IdenList),
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(from.0, from.1)
        .to(to.0, to.1)
        .on_delete(ForeignKeyAction::Restrict)
        .to_owned()
}

/// What PostgreSQL adds to the tables a completion updates: room in each
/// page for the new row versions (see the module docs).
const ROOM_FOR_UPDATES: &str = "WITH (fillfactor = 90)";

fn index(
    name: &str,
    table: impl IntoIden,
    cols: &[&'static str],
    unique: bool,
) -> IndexCreateStatement {
    let mut stmt = Index::create();
    stmt.name(name).table(table).if_not_exists();
    for col in cols {
        stmt.col(Alias::new(*col));
    }
    if unique {
        stmt.unique();
    }
    stmt.to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_database_backend();
        manager
            .create_table(
                Table::create()
                    .table(Projects::Table)
                    .if_not_exists()
                    .col(id(Projects::Id))
                    .col(text(Projects::Name, 200))
                    .col(
                        ColumnDef::new(Projects::Active)
                            .boolean()
                            .not_null()
                            .default(true),
                    )
                    .col(time(Projects::CreatedAt, db))
                    .to_owned(),
            )
            .await?;

        // `ux_users_id_project` is what the balances' composite foreign key
        // points to: a foreign key must reference a unique key on every
        // backend, and `id` alone is not the pair. PostgreSQL has it as a
        // constraint of the table, the others as an index.
        let mut users = Table::create();
        users
            .table(Users::Table)
            .if_not_exists()
            .col(id(Users::Id))
            .col(big(Users::ProjectId))
            .col(text(Users::Email, 254))
            .col(time(Users::CreatedAt, db))
            .foreign_key(&mut fk(
                "fk_users_project",
                (Users::Table, Users::ProjectId),
                (Projects::Table, Projects::Id),
            ));
        if db == DbBackend::Postgres {
            users.index(
                Index::create()
                    .name("ux_users_id_project")
                    .col(Users::Id)
                    .col(Users::ProjectId)
                    .unique(),
            );
        }
        manager.create_table(users).await?;
        manager
            .create_index(index(
                "ux_users_project_email",
                Users::Table,
                &["project_id", "email"],
                true,
            ))
            .await?;
        if db != DbBackend::Postgres {
            manager
                .create_index(index(
                    "ux_users_id_project",
                    Users::Table,
                    &["id", "project_id"],
                    true,
                ))
                .await?;
        }

        manager
            .create_table(
                Table::create()
                    .table(Servers::Table)
                    .if_not_exists()
                    .col(id(Servers::Id))
                    .col(big(Servers::ProjectId))
                    .col(text(Servers::Name, 200))
                    .col(time(Servers::CreatedAt, db))
                    .foreign_key(&mut fk(
                        "fk_servers_project",
                        (Servers::Table, Servers::ProjectId),
                        (Projects::Table, Projects::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "ix_servers_project",
                Servers::Table,
                &["project_id"],
                false,
            ))
            .await?;

        // Keyed by the account; no foreign key on `server_id`, whose 0 (the
        // general account) is not a row of `servers`.
        let mut balances = Table::create();
        balances
            .table(Balances::Table)
            .if_not_exists()
            .col(big(Balances::UserId))
            .col(
                big(Balances::ServerId)
                    .check(Expr::col(Balances::ServerId).gte(0))
                    .to_owned(),
            )
            .col(
                big(Balances::MainCents)
                    .default(0)
                    .check(Expr::col(Balances::MainCents).between(0, MAX_CENTS))
                    .to_owned(),
            )
            .col(
                big(Balances::BonusCents)
                    .default(0)
                    .check(Expr::col(Balances::BonusCents).between(0, MAX_CENTS))
                    .to_owned(),
            )
            .col(time(Balances::UpdatedAt, db))
            .col(big(Balances::ProjectId))
            .primary_key(
                Index::create()
                    .col(Balances::UserId)
                    .col(Balances::ServerId),
            )
            .foreign_key(&mut fk(
                "fk_balances_user_project",
                (Balances::Table, (Balances::UserId, Balances::ProjectId)),
                (Users::Table, (Users::Id, Users::ProjectId)),
            ));
        if db == DbBackend::Sqlite {
            balances.extra("WITHOUT ROWID");
        } else if db == DbBackend::Postgres {
            balances.extra(ROOM_FOR_UPDATES);
        }
        manager.create_table(balances).await?;

        let mut orders = Table::create();
        orders
            .table(PaymentOrders::Table)
            .if_not_exists()
            .col(id(PaymentOrders::Id))
            .col(text(PaymentOrders::OrderId, 20))
            .col(big(PaymentOrders::ProjectId))
            .col(big(PaymentOrders::UserId))
            .col(ColumnDef::new(PaymentOrders::ServerId).big_integer().null())
            .col(text(PaymentOrders::PaymentSystem, 32))
            .col(
                big(PaymentOrders::AmountCents)
                    .check(Expr::col(PaymentOrders::AmountCents).between(1, MAX_CENTS))
                    .to_owned(),
            )
            .col(text(PaymentOrders::Status, 16))
            .col(
                ColumnDef::new(PaymentOrders::PaymentId)
                    .string_len(255)
                    .null(),
            )
            .col(time(PaymentOrders::CreatedAt, db))
            .col(instant(PaymentOrders::CompletedAt, db).null().to_owned())
            .foreign_key(&mut fk(
                "fk_orders_project",
                (PaymentOrders::Table, PaymentOrders::ProjectId),
                (Projects::Table, Projects::Id),
            ))
            .foreign_key(&mut fk(
                "fk_orders_user",
                (PaymentOrders::Table, PaymentOrders::UserId),
                (Users::Table, Users::Id),
            ))
            .foreign_key(&mut fk(
                "fk_orders_server",
                (PaymentOrders::Table, PaymentOrders::ServerId),
                (Servers::Table, Servers::Id),
            ));
        if db == DbBackend::Postgres {
            orders.extra(ROOM_FOR_UPDATES);
        }
        manager.create_table(orders).await?;
        manager
            .create_index(index(
                "ux_orders_order_id",
                PaymentOrders::Table,
                &["order_id"],
                true,
            ))
            .await?;
        manager
            .create_index(index(
                "ix_orders_project",
                PaymentOrders::Table,
                &["project_id"],
                false,
            ))
            .await?;
        manager
            .create_index(index(
                "ix_orders_user",
                PaymentOrders::Table,
                &["user_id"],
                false,
            ))
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(AppTokens::Table)
                    .if_not_exists()
                    .col(id(AppTokens::Id))
                    .col(big(AppTokens::ProjectId))
                    .col(text(AppTokens::Name, 200))
                    .col(text(AppTokens::TokenHash, 64))
                    .col(
                        ColumnDef::new(AppTokens::Active)
                            .boolean()
                            .not_null()
                            .default(true),
                    )
                    .col(time(AppTokens::CreatedAt, db))
                    .col(instant(AppTokens::LastUsedAt, db).null().to_owned())
                    .foreign_key(&mut fk(
                        "fk_tokens_project",
                        (AppTokens::Table, AppTokens::ProjectId),
                        (Projects::Table, Projects::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "ux_tokens_hash",
                AppTokens::Table,
                &["token_hash"],
                true,
            ))
            .await?;
        manager
            .create_index(index(
                "ix_tokens_project",
                AppTokens::Table,
                &["project_id"],
                false,
            ))
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(TokenPermissions::Table)
                    .if_not_exists()
                    .col(id(TokenPermissions::Id))
                    .col(big(TokenPermissions::TokenId))
                    .col(text(TokenPermissions::Permission, 64))
                    .foreign_key(
                        &mut fk(
                            "fk_permissions_token",
                            (TokenPermissions::Table, TokenPermissions::TokenId),
                            (AppTokens::Table, AppTokens::Id),
                        )
                        .on_delete(ForeignKeyAction::Cascade)
                        .to_owned(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "ux_permissions_token_permission",
                TokenPermissions::Table,
                &["token_id", "permission"],
                true,
            ))
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(OperationLog::Table)
                    .if_not_exists()
                    .col(id(OperationLog::Id))
                    .col(text(OperationLog::Kind, 16))
                    .col(ColumnDef::new(OperationLog::OrderRef).big_integer().null())
                    .col(big(OperationLog::UserId))
                    .col(big(OperationLog::ServerId))
                    .col(text(OperationLog::BalanceType, 8))
                    .col(big(OperationLog::AmountCents))
                    .col(big(OperationLog::BalanceBeforeCents))
                    .col(big(OperationLog::BalanceAfterCents))
                    .col(time(OperationLog::CreatedAt, db))
                    .foreign_key(&mut fk(
                        "fk_log_order",
                        (OperationLog::Table, OperationLog::OrderRef),
                        (PaymentOrders::Table, PaymentOrders::Id),
                    ))
                    .foreign_key(&mut fk(
                        "fk_log_account",
                        (
                            OperationLog::Table,
                            (OperationLog::UserId, OperationLog::ServerId),
                        ),
                        (Balances::Table, (Balances::UserId, Balances::ServerId)),
                    ))
                    .to_owned(),
            )
            .await?;
        // NULLs are distinct in a unique index on all three backends, so
        // `balance_set` rows (no order) are unrestricted while each order
        // can be logged at most once.
        manager
            .create_index(index(
                "ux_log_order",
                OperationLog::Table,
                &["order_ref"],
                true,
            ))
            .await?;
        // One account's entries in order: `masterpay audit`'s sums per
        // account, queries of one account's history, and on MariaDB (where a
        // foreign key needs an index) the index of `fk_log_account`.
        manager
            .create_index(index(
                "ix_log_account",
                OperationLog::Table,
                &["user_id", "server_id", "balance_type", "id"],
                false,
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            OperationLog::Table.into_iden(),
            TokenPermissions::Table.into_iden(),
            AppTokens::Table.into_iden(),
            PaymentOrders::Table.into_iden(),
            Balances::Table.into_iden(),
            Servers::Table.into_iden(),
            Users::Table.into_iden(),
            Projects::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Projects {
    Table,
    Id,
    Name,
    Active,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
    ProjectId,
    Email,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Servers {
    Table,
    Id,
    ProjectId,
    Name,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Balances {
    Table,
    UserId,
    ServerId,
    MainCents,
    BonusCents,
    UpdatedAt,
    ProjectId,
}

#[derive(DeriveIden)]
enum PaymentOrders {
    Table,
    Id,
    OrderId,
    ProjectId,
    UserId,
    ServerId,
    PaymentSystem,
    AmountCents,
    Status,
    PaymentId,
    CreatedAt,
    CompletedAt,
}

#[derive(DeriveIden)]
enum AppTokens {
    Table,
    Id,
    ProjectId,
    Name,
    TokenHash,
    Active,
    CreatedAt,
    LastUsedAt,
}

#[derive(DeriveIden)]
enum TokenPermissions {
    Table,
    Id,
    TokenId,
    Permission,
}

#[derive(DeriveIden)]
enum OperationLog {
    Table,
    Id,
    Kind,
    OrderRef,
    UserId,
    ServerId,
    BalanceType,
    AmountCents,
    BalanceBeforeCents,
    BalanceAfterCents,
    CreatedAt,
}
