//! The ledger audit behind `masterpay audit`.
//!
//! Every balance change is logged in the transaction that makes it (order
//! credits and `balance set`), and every account opens at zero, so:
//!
//! 1. for every user, server and balance type, the stored balance equals the
//!    sum of the logged changes (opening balance 0 + credits + adjustments);
//! 2. every completed order has exactly one `order_credit` log row, of its
//!    amount, user and server;
//! 3. no `order_credit` row exists without a completed order (a pending or
//!    cancelled order is never credited);
//! 4. an order's status and times agree: a pending order has neither
//!    `completed_at` nor `cancelled_at`, a completed one only
//!    `completed_at`, a cancelled one only `cancelled_at`.
//!
//! 5. every order completed (cancelled) while an enabled endpoint of its
//!    project received `order.completed` (`order.cancelled`) has that
//!    event. The tables keep an endpoint's current settings only, so an
//!    endpoint is judged subscribed from its last change (`updated_at`) on,
//!    when its settings were those it has; an order of before that change
//!    (an endpoint disabled and enabled again, its types edited) is not
//!    checked against it, nor one older than the retention window less an
//!    hour (retention may delete its event), nor one of a disabled or
//!    deleted endpoint.
//!
//! Sums are computed by the database (GROUP BY), so the audit streams nothing
//! large into memory.

use std::collections::BTreeMap;

use entity::admin_audit_entry;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement};
use serde::{Deserialize, Serialize};

use super::{
    admin_audit::{self, Actor, AuditFilter, AuditedChange, Change},
    webhook_events,
};
use crate::{
    events::{self, EventType},
    money::signed_cents,
    store::database,
};

/// One violated invariant, printable for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding(pub String);

/// What the audit looked at and what it found.
#[derive(Debug, Clone, Default)]
pub struct AuditReport {
    pub accounts: usize,
    pub completed_orders: i64,
    pub cancelled_orders: i64,
    pub log_rows: i64,
    pub findings: Vec<Finding>,
}

impl AuditReport {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

async fn rows(db: &DatabaseConnection, sql: &str) -> Result<Vec<sea_orm::QueryResult>, DbErr> {
    db.query_all_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
}

/// Runs every check; see the module docs. `retention_days` is
/// `webhook_retention_days`.
pub async fn run(db: &DatabaseConnection, retention_days: u32) -> Result<AuditReport, DbErr> {
    let mut report = AuditReport::default();

    // 1. Balances against the sums of their log rows, both directions.
    let mut expected: BTreeMap<(i64, i64, String), i64> = BTreeMap::new();
    let sum = database::as_bigint(db, "SUM(amount_cents)");
    for row in rows(
        db,
        &format!(
            "SELECT user_id, server_id, balance_type, {sum} \
             FROM operation_log GROUP BY user_id, server_id, balance_type"
        ),
    )
    .await?
    {
        let key = (
            row.try_get_by_index::<i64>(0)?,
            row.try_get_by_index::<i64>(1)?,
            row.try_get_by_index::<String>(2)?,
        );
        expected.insert(key, row.try_get_by_index::<i64>(3)?);
    }
    let mut seen = 0;
    for row in rows(
        db,
        "SELECT user_id, server_id, main_cents, bonus_cents FROM balances ORDER BY user_id, server_id",
    )
    .await?
    {
        seen += 1;
        let user = row.try_get_by_index::<i64>(0)?;
        let server = row.try_get_by_index::<i64>(1)?;
        for (kind, stored) in [
            ("main", row.try_get_by_index::<i64>(2)?),
            ("bonus", row.try_get_by_index::<i64>(3)?),
        ] {
            let logged = expected.remove(&(user, server, kind.to_owned())).unwrap_or(0);
            if logged != stored {
                report.findings.push(Finding(format!(
                    "user {user} server {server} {kind}: balance {} but the log sums to {}",
                    signed_cents(stored),
                    signed_cents(logged)
                )));
            }
        }
    }
    for ((user, server, kind), logged) in expected {
        if logged != 0 {
            report.findings.push(Finding(format!(
                "user {user} server {server} {kind}: no balance row but the log sums to {}",
                signed_cents(logged)
            )));
        }
    }
    report.accounts = seen;

    // 2. Completed orders without exactly one matching credit row.
    for row in rows(
        db,
        "SELECT o.order_id, COUNT(l.id) FROM payment_orders o \
         LEFT JOIN operation_log l ON l.order_ref = o.id AND l.kind = 'order_credit' \
         WHERE o.status = 'completed' GROUP BY o.id, o.order_id HAVING COUNT(l.id) <> 1",
    )
    .await?
    {
        let order = row.try_get_by_index::<String>(0)?;
        let count = row.try_get_by_index::<i64>(1)?;
        report.findings.push(Finding(format!(
            "order {order} is completed but has {count} log rows (expected 1)"
        )));
    }
    for row in rows(
        db,
        "SELECT o.order_id FROM payment_orders o \
         JOIN operation_log l ON l.order_ref = o.id AND l.kind = 'order_credit' \
         WHERE l.amount_cents <> o.amount_cents OR l.user_id <> o.user_id \
            OR l.server_id <> COALESCE(o.server_id, 0) OR l.balance_type <> 'main'",
    )
    .await?
    {
        let order = row.try_get_by_index::<String>(0)?;
        report.findings.push(Finding(format!(
            "order {order}: its log row does not match its amount, user or server"
        )));
    }

    // 3. Credit rows without a completed order.
    for row in rows(
        db,
        "SELECT l.id, o.order_id, o.status FROM operation_log l \
         LEFT JOIN payment_orders o ON o.id = l.order_ref \
         WHERE l.kind = 'order_credit' AND (o.id IS NULL OR o.status <> 'completed')",
    )
    .await?
    {
        let id = row.try_get_by_index::<i64>(0)?;
        let finding = match row.try_get_by_index::<Option<String>>(1)? {
            Some(order) => format!(
                "log row {id} credits order {order}, which is {}",
                row.try_get_by_index::<String>(2)?
            ),
            None => format!("log row {id} credits no order"),
        };
        report.findings.push(Finding(finding));
    }

    // 4. Statuses against their times.
    for row in rows(
        db,
        "SELECT order_id, status FROM payment_orders WHERE NOT ( \
            (status = 'pending' AND completed_at IS NULL AND cancelled_at IS NULL) \
         OR (status = 'completed' AND completed_at IS NOT NULL AND cancelled_at IS NULL) \
         OR (status = 'cancelled' AND cancelled_at IS NOT NULL AND completed_at IS NULL))",
    )
    .await?
    {
        let order = row.try_get_by_index::<String>(0)?;
        let status = row.try_get_by_index::<String>(1)?;
        report.findings.push(Finding(format!(
            "order {order} is {status} but its completion and cancellation times say otherwise"
        )));
    }

    // 5. Orders without the event their endpoints were to receive.
    missing_events(db, retention_days, &mut report).await?;

    for row in rows(
        db,
        "SELECT (SELECT COUNT(*) FROM payment_orders WHERE status = 'completed'), \
                (SELECT COUNT(*) FROM payment_orders WHERE status = 'cancelled'), \
                (SELECT COUNT(*) FROM operation_log)",
    )
    .await?
    {
        report.completed_orders = row.try_get_by_index(0)?;
        report.cancelled_orders = row.try_get_by_index(1)?;
        report.log_rows = row.try_get_by_index(2)?;
    }
    Ok(report)
}

/// Check 5: for each project and type, the orders since the earliest time
/// an enabled endpoint is known to have received the type.
async fn missing_events(
    db: &DatabaseConnection,
    retention_days: u32,
    report: &mut AuditReport,
) -> Result<(), DbErr> {
    use entity::webhook_endpoint::{Column, Entity};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let window = webhook_events::retention_cutoff(retention_days) + chrono::TimeDelta::hours(1);
    let mut since: BTreeMap<(i64, String), (chrono::DateTime<chrono::Utc>, EventType)> =
        BTreeMap::new();
    for endpoint in Entity::find()
        .filter(Column::Enabled.eq(true))
        .all(db)
        .await?
    {
        for event_type in [EventType::OrderCompleted, EventType::OrderCancelled] {
            if !events::subscribed(endpoint.event_types.as_deref(), event_type) {
                continue;
            }
            let from = endpoint.updated_at.max(window);
            let key = (endpoint.project_id, events::type_name(event_type));
            let earliest = since.entry(key).or_insert((from, event_type));
            earliest.0 = earliest.0.min(from);
        }
    }
    for ((project_id, name), (from, event_type)) in since {
        for order in webhook_events::orders_missing_event(db, project_id, event_type, from).await? {
            report.findings.push(Finding(format!(
                "order {order} of project {project_id} has no {name} event, though an enabled \
                 endpoint of its project received {name} then"
            )));
        }
    }
    Ok(())
}

/// How many mismatch lines the audit log keeps of one run; the count is
/// always whole.
pub const RECORDED_FINDINGS: usize = 100;

/// The action of a recorded run in the audit log.
const RUN_ACTION: &str = "audit.run";

/// What the audit log keeps of one run (the `after` of its `audit.run`
/// entry): the counts, the number of mismatches and the first
/// [`RECORDED_FINDINGS`] of their lines, as `masterpay audit` prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordedAudit {
    pub accounts: u64,
    pub completed_orders: i64,
    pub cancelled_orders: i64,
    pub log_rows: i64,
    pub mismatches: u64,
    pub findings: Vec<String>,
}

impl RecordedAudit {
    pub fn of(report: &AuditReport) -> RecordedAudit {
        RecordedAudit {
            accounts: report.accounts as u64,
            completed_orders: report.completed_orders,
            cancelled_orders: report.cancelled_orders,
            log_rows: report.log_rows,
            mismatches: report.findings.len() as u64,
            findings: report
                .findings
                .iter()
                .take(RECORDED_FINDINGS)
                .map(|f| f.0.clone())
                .collect(),
        }
    }

    pub fn is_clean(&self) -> bool {
        self.mismatches == 0
    }

    /// What the run checked: `2 balance accounts, 1 completed order, ...`.
    pub fn counted(&self) -> String {
        use super::count;
        let signed = |n: i64| u64::try_from(n).unwrap_or_default();
        [
            count(self.accounts, "balance account", "balance accounts"),
            count(
                signed(self.completed_orders),
                "completed order",
                "completed orders",
            ),
            count(
                signed(self.cancelled_orders),
                "cancelled order",
                "cancelled orders",
            ),
            count(signed(self.log_rows), "log row", "log rows"),
        ]
        .join(", ")
    }

    /// `ledger consistent`, or how many mismatches.
    pub fn verdict(&self) -> String {
        match self.mismatches {
            0 => "ledger consistent".to_owned(),
            n => super::count(n, "mismatch", "mismatches"),
        }
    }
}

/// [`run`] for `actor`, recorded in the audit log as one `audit.run` row
/// holding its [`RecordedAudit`]. The audit reads outside any transaction;
/// the row is written after it, mismatches or not.
pub async fn run_recorded(
    db: &DatabaseConnection,
    actor: &Actor,
    retention_days: u32,
) -> Result<AuditReport, DbErr> {
    let report = run(db, retention_days).await?;
    let summary = serde_json::to_value(RecordedAudit::of(&report))
        .map_err(|err| DbErr::Custom(format!("audit summary: {err}")))?;
    let txn = AuditedChange::begin(db, actor).await?;
    txn.commit(Change::new(RUN_ACTION, "audit", "ledger").after(summary))
        .await?;
    Ok(report)
}

/// The newest recorded run, with what it found (empty counts when its
/// entry holds no readable summary).
pub async fn latest_run(
    db: &DatabaseConnection,
) -> Result<Option<(admin_audit_entry::Model, RecordedAudit)>, DbErr> {
    let filter = AuditFilter {
        action: Some(RUN_ACTION.to_owned()),
        ..Default::default()
    };
    let Some(entry) = admin_audit::list(db, &filter, 1).await?.into_iter().next() else {
        return Ok(None);
    };
    let run = entry
        .after
        .as_deref()
        .and_then(|json| serde_json::from_str::<RecordedAudit>(json).ok())
        .unwrap_or_default();
    Ok(Some((entry, run)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_run_reads_back() {
        let report = AuditReport {
            accounts: 2,
            completed_orders: 1,
            log_rows: 3,
            findings: vec![Finding("a".into()), Finding("b".into())],
            ..Default::default()
        };
        let recorded = RecordedAudit::of(&report);
        let json = serde_json::to_value(&recorded).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "accounts": 2, "completed_orders": 1, "cancelled_orders": 0,
                "log_rows": 3, "mismatches": 2, "findings": ["a", "b"],
            })
        );
        let read: RecordedAudit = serde_json::from_value(json).unwrap();
        assert_eq!(read, recorded);
        assert!(!read.is_clean());
        assert_eq!(read.verdict(), "2 mismatches");
        assert_eq!(RecordedAudit::default().verdict(), "ledger consistent");
    }

    #[test]
    fn only_the_first_findings_are_kept() {
        let report = AuditReport {
            findings: (0..RECORDED_FINDINGS + 5)
                .map(|n| Finding(n.to_string()))
                .collect(),
            ..Default::default()
        };
        let recorded = RecordedAudit::of(&report);
        assert_eq!(recorded.findings.len(), RECORDED_FINDINGS);
        assert_eq!(recorded.mismatches, (RECORDED_FINDINGS + 5) as u64);
    }
}
