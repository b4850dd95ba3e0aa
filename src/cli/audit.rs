//! `masterpay audit`: checks the ledger invariant and exits non-zero on any
//! mismatch, printing each one. Every run is recorded in the administration
//! audit log, with its counts and mismatches. The events' check reads
//! `webhook_retention_days` (see `service::ledger_check`).

use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{CliResult, Output};
use crate::{
    config::Settings,
    service::{admin_audit::Actor, ledger_check},
};

pub async fn run(db: &DatabaseConnection, settings: &Settings, out: Output) -> CliResult {
    let days = settings.webhook_retention_days;
    let report = ledger_check::run_recorded(db, &Actor::CommandLine, days).await?;
    let recorded = ledger_check::RecordedAudit::of(&report);
    let findings: Vec<&str> = report.findings.iter().map(|f| f.0.as_str()).collect();
    out.emit(
        json!({
            "ok": report.is_clean(),
            "accounts": report.accounts,
            "completed_orders": report.completed_orders,
            "cancelled_orders": report.cancelled_orders,
            "log_rows": report.log_rows,
            "findings": findings,
        }),
        || {
            let mut text = format!("audited {}: {}", recorded.counted(), recorded.verdict());
            for finding in &findings {
                text.push_str("\n  ");
                text.push_str(finding);
            }
            text
        },
    );
    anyhow::ensure!(
        report.is_clean(),
        "ledger audit found {}",
        recorded.verdict()
    );
    Ok(())
}
