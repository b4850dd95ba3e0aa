//! Outgoing events: signed webhooks to integrators' endpoints, recorded in
//! a transactional outbox and delivered at least once.
//!
//! - `webhook_endpoints`: where a project's events go. `event_types` is a
//!   comma-separated list of the types it receives (`NULL`: every type).
//!   `secret` is sealed at rest (`sealed:v1:...`, or `plain:whsec_...` when
//!   no sealing key is configured); while a secret rotates,
//!   `previous_secret` signs too, until `previous_secret_until`.
//!   `failing_since` is the first failed attempt of the current run of
//!   failures (a success clears it); `disabled_reason` says why an endpoint
//!   stopped receiving (`answered 410`, `disabled by an administrator`).
//! - `webhook_events`: one row per change, written in the transaction (or
//!   the statement) of the change and only when an enabled endpoint of the
//!   project is subscribed to its type. `webhook_id` (`msg_` + 32 hex) is
//!   the `webhook-id` header, the same on every attempt; `payload` is the
//!   exact body sent, built when the change commits.
//! - `webhook_deliveries`: one row per event and endpoint, `pending` until
//!   it `succeeded` or `failed` (the schedule ran out or the endpoint was
//!   disabled). A relay instance claims due rows by `(status,
//!   next_attempt_at)` and holds them until `leased_until`.
//! - `webhook_attempts`: every attempt of a delivery, with what answered
//!   (at most 1 KiB of it) and what was scheduled after it.
//!
//! Deleting an endpoint deletes its deliveries and their attempts; its
//! events stay, as the project's history.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261129_000001_webhooks"
    }
}

/// A point in time with microseconds (`DATETIME(6)` on MariaDB/MySQL, as in
/// the initial schema); nullable unless made `not_null()`.
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

fn big<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).big_integer().not_null().to_owned()
}

fn text<T: IntoIden>(col: T, len: u32) -> ColumnDef {
    ColumnDef::new(col).string_len(len).not_null().to_owned()
}

fn fk(
    name: &str,
    from: (impl IntoIden, impl IntoIden),
    to: (impl IntoIden, impl IntoIden),
    on_delete: ForeignKeyAction,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(from.0, from.1)
        .to(to.0, to.1)
        .on_delete(on_delete)
        .to_owned()
}

fn index(name: &str, table: impl IntoIden, cols: &[&'static str]) -> IndexCreateStatement {
    let mut stmt = Index::create();
    stmt.name(name).table(table);
    for col in cols {
        stmt.col(Alias::new(*col));
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
                    .table(WebhookEndpoints::Table)
                    .if_not_exists()
                    .col(id(WebhookEndpoints::Id))
                    .col(big(WebhookEndpoints::ProjectId))
                    .col(text(WebhookEndpoints::Url, 2048))
                    .col(
                        text(WebhookEndpoints::Description, 500)
                            .default("")
                            .to_owned(),
                    )
                    .col(ColumnDef::new(WebhookEndpoints::EventTypes).text().null())
                    .col(ColumnDef::new(WebhookEndpoints::Secret).text().not_null())
                    .col(
                        ColumnDef::new(WebhookEndpoints::PreviousSecret)
                            .text()
                            .null(),
                    )
                    .col(instant(WebhookEndpoints::PreviousSecretUntil, db).null())
                    .col(
                        ColumnDef::new(WebhookEndpoints::Enabled)
                            .boolean()
                            .not_null()
                            .default(true),
                    )
                    .col(
                        ColumnDef::new(WebhookEndpoints::DisabledReason)
                            .string_len(200)
                            .null(),
                    )
                    .col(instant(WebhookEndpoints::FailingSince, db).null())
                    .col(instant(WebhookEndpoints::CreatedAt, db).not_null())
                    .col(instant(WebhookEndpoints::UpdatedAt, db).not_null())
                    .foreign_key(&mut fk(
                        "fk_webhook_endpoints_project",
                        (WebhookEndpoints::Table, WebhookEndpoints::ProjectId),
                        (Projects::Table, Projects::Id),
                        ForeignKeyAction::Restrict,
                    ))
                    .to_owned(),
            )
            .await?;
        // The recording's question, "does this project have an enabled
        // endpoint?", reads this index alone.
        manager
            .create_index(index(
                "ix_webhook_endpoints_project",
                WebhookEndpoints::Table,
                &["project_id", "enabled"],
            ))
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(WebhookEvents::Table)
                    .if_not_exists()
                    .col(id(WebhookEvents::Id))
                    .col(text(WebhookEvents::WebhookId, 40))
                    .col(big(WebhookEvents::ProjectId))
                    .col(text(WebhookEvents::EventType, 32))
                    .col(ColumnDef::new(WebhookEvents::OrderId).string_len(20).null())
                    .col(ColumnDef::new(WebhookEvents::Payload).text().not_null())
                    .col(instant(WebhookEvents::CreatedAt, db).not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                index(
                    "ux_webhook_events_webhook_id",
                    WebhookEvents::Table,
                    &["webhook_id"],
                )
                .unique()
                .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "ix_webhook_events_project",
                WebhookEvents::Table,
                &["project_id", "id"],
            ))
            .await?;
        manager
            .create_index(index(
                "ix_webhook_events_order",
                WebhookEvents::Table,
                &["order_id"],
            ))
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .if_not_exists()
                    .col(id(WebhookDeliveries::Id))
                    .col(big(WebhookDeliveries::EventId))
                    .col(big(WebhookDeliveries::EndpointId))
                    .col(text(WebhookDeliveries::Status, 16))
                    .col(
                        ColumnDef::new(WebhookDeliveries::Attempts)
                            .integer()
                            .not_null()
                            .default(0),
                    )
                    .col(instant(WebhookDeliveries::NextAttemptAt, db).null())
                    .col(instant(WebhookDeliveries::LeasedUntil, db).null())
                    .col(
                        ColumnDef::new(WebhookDeliveries::LeaseOwner)
                            .string_len(64)
                            .null(),
                    )
                    .col(instant(WebhookDeliveries::LastAttemptAt, db).null())
                    .col(instant(WebhookDeliveries::CreatedAt, db).not_null())
                    .foreign_key(&mut fk(
                        "fk_webhook_deliveries_event",
                        (WebhookDeliveries::Table, WebhookDeliveries::EventId),
                        (WebhookEvents::Table, WebhookEvents::Id),
                        ForeignKeyAction::Cascade,
                    ))
                    .foreign_key(&mut fk(
                        "fk_webhook_deliveries_endpoint",
                        (WebhookDeliveries::Table, WebhookDeliveries::EndpointId),
                        (WebhookEndpoints::Table, WebhookEndpoints::Id),
                        ForeignKeyAction::Cascade,
                    ))
                    .to_owned(),
            )
            .await?;
        for statement in [
            // The relay's claim: due pending deliveries, oldest first.
            index(
                "ix_webhook_deliveries_due",
                WebhookDeliveries::Table,
                &["status", "next_attempt_at"],
            ),
            index(
                "ix_webhook_deliveries_endpoint",
                WebhookDeliveries::Table,
                &["endpoint_id", "status"],
            ),
            index(
                "ix_webhook_deliveries_event",
                WebhookDeliveries::Table,
                &["event_id"],
            ),
        ] {
            manager.create_index(statement).await?;
        }

        manager
            .create_table(
                Table::create()
                    .table(WebhookAttempts::Table)
                    .if_not_exists()
                    .col(id(WebhookAttempts::Id))
                    .col(big(WebhookAttempts::DeliveryId))
                    .col(instant(WebhookAttempts::AttemptedAt, db).not_null())
                    .col(
                        ColumnDef::new(WebhookAttempts::DurationMs)
                            .integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WebhookAttempts::ResponseStatus)
                            .integer()
                            .null(),
                    )
                    .col(text(WebhookAttempts::Outcome, 16))
                    .col(
                        ColumnDef::new(WebhookAttempts::ResponseExcerpt)
                            .text()
                            .not_null(),
                    )
                    .col(instant(WebhookAttempts::NextAttemptAt, db).null())
                    .foreign_key(&mut fk(
                        "fk_webhook_attempts_delivery",
                        (WebhookAttempts::Table, WebhookAttempts::DeliveryId),
                        (WebhookDeliveries::Table, WebhookDeliveries::Id),
                        ForeignKeyAction::Cascade,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "ix_webhook_attempts_delivery",
                WebhookAttempts::Table,
                &["delivery_id"],
            ))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            WebhookAttempts::Table.into_iden(),
            WebhookDeliveries::Table.into_iden(),
            WebhookEvents::Table.into_iden(),
            WebhookEndpoints::Table.into_iden(),
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
}

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    Id,
    ProjectId,
    Url,
    Description,
    EventTypes,
    Secret,
    PreviousSecret,
    PreviousSecretUntil,
    Enabled,
    DisabledReason,
    FailingSince,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookEvents {
    Table,
    Id,
    WebhookId,
    ProjectId,
    EventType,
    OrderId,
    Payload,
    CreatedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    EventId,
    EndpointId,
    Status,
    Attempts,
    NextAttemptAt,
    LeasedUntil,
    LeaseOwner,
    LastAttemptAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum WebhookAttempts {
    Table,
    Id,
    DeliveryId,
    AttemptedAt,
    DurationMs,
    ResponseStatus,
    Outcome,
    ResponseExcerpt,
    NextAttemptAt,
}
