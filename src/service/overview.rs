//! The overview's figures, read from the tables at each request, so every
//! instance shows the same ones: money completed per project today and
//! this week, pending orders older than a day, completions refused as
//! final in the last day, refused sign-ins in the last day, tokens that
//! expire within a week.
//!
//! Days are UTC days, weeks ISO weeks (from Monday 00:00 UTC). Money is
//! summed in the database as integer cents. Each figure is one query, two
//! where a few orders are listed besides the count. `payment_orders` has
//! no index on its status or completion time, on purpose: a completion
//! then changes no indexed column, which keeps it a heap-only update on
//! PostgreSQL. Those figures read the table instead; the overview is
//! opened by a person now and then, not on every API request.

use chrono::{DateTime, Datelike, Days, Duration, NaiveTime, Utc};
use entity::{
    admin_sign_in_failure,
    payment_order::{self, OrderStatus},
};
use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, Order, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Select, sea_query::Expr,
};

use crate::store::database;

/// How far back "recent" reaches: pending too long, refused lately.
pub const RECENT: Duration = Duration::hours(24);
/// How far ahead a token's expiry counts as soon.
pub const EXPIRING: Duration = Duration::days(7);
/// Orders listed under a count.
const LISTED: u64 = 5;

/// The overview's figures at one moment.
#[derive(Debug)]
pub struct Figures {
    /// The start of today (UTC).
    pub today: DateTime<Utc>,
    /// The start of this ISO week: Monday 00:00 UTC.
    pub week: DateTime<Utc>,
    /// Cents of the orders completed since `today`, by project id.
    pub completed_today: Vec<(i64, i64)>,
    /// Cents of the orders completed since `week`, by project id.
    pub completed_this_week: Vec<(i64, i64)>,
    /// Pending orders created more than [`RECENT`] ago: how many, and the
    /// oldest few.
    pub stale_pending: (u64, Vec<payment_order::Model>),
    /// Orders whose completion was refused as final within [`RECENT`]:
    /// how many, and the latest few.
    pub refused_completions: (u64, Vec<payment_order::Model>),
    /// Sign-ins refused within [`RECENT`].
    pub refused_sign_ins: u64,
    /// Active tokens that expire within [`EXPIRING`].
    pub tokens_expiring: u64,
}

/// The figures as of `now`.
pub async fn figures(db: &DatabaseConnection, now: DateTime<Utc>) -> Result<Figures, DbErr> {
    use payment_order::Column;
    let today = now.date_naive().and_time(NaiveTime::MIN).and_utc();
    let monday = u64::from(now.weekday().num_days_from_monday());
    let week = today - Days::new(monday);
    let since = now - RECENT;
    let stale = payment_order::Entity::find()
        .filter(Column::Status.eq(OrderStatus::Pending))
        .filter(Column::CreatedAt.lt(since));
    let refused = payment_order::Entity::find().filter(Column::RefusedAt.gte(since));
    Ok(Figures {
        today,
        week,
        completed_today: completed_since(db, today).await?,
        completed_this_week: completed_since(db, week).await?,
        stale_pending: counted(db, stale, (Column::Id, Order::Asc)).await?,
        refused_completions: counted(db, refused, (Column::RefusedAt, Order::Desc)).await?,
        refused_sign_ins: admin_sign_in_failure::Entity::find()
            .filter(admin_sign_in_failure::Column::FailedAt.gte(since))
            .count(db)
            .await?,
        tokens_expiring: tokens_expiring(db, now, EXPIRING).await?,
    })
}

/// Cents of the orders completed at or after `since`, by project id.
async fn completed_since(
    db: &DatabaseConnection,
    since: DateTime<Utc>,
) -> Result<Vec<(i64, i64)>, DbErr> {
    use payment_order::Column;
    payment_order::Entity::find()
        .select_only()
        .column(Column::ProjectId)
        .column_as(
            Expr::cust(database::as_bigint(db, "SUM(amount_cents)")),
            "cents",
        )
        .filter(Column::Status.eq(OrderStatus::Completed))
        .filter(Column::CompletedAt.gte(since))
        .group_by(Column::ProjectId)
        .into_tuple()
        .all(db)
        .await
}

/// How many orders `query` finds, and the first [`LISTED`] in `order`.
async fn counted(
    db: &DatabaseConnection,
    query: Select<payment_order::Entity>,
    (column, order): (payment_order::Column, Order),
) -> Result<(u64, Vec<payment_order::Model>), DbErr> {
    let count = query.clone().count(db).await?;
    let listed = query.order_by(column, order).limit(LISTED).all(db).await?;
    Ok((count, listed))
}

/// How many active tokens expire after `now` and within `within` of it.
async fn tokens_expiring(
    db: &DatabaseConnection,
    now: DateTime<Utc>,
    within: Duration,
) -> Result<u64, DbErr> {
    use entity::app_token::Column;
    entity::app_token::Entity::find()
        .filter(Column::Active.eq(true))
        .filter(Column::ExpiresAt.gt(now))
        .filter(Column::ExpiresAt.lte(now + within))
        .count(db)
        .await
}
