//! The overview: what an operator checks first. Today's orders of every
//! project, the latest changes, the tokens nobody uses, the last audit.

use std::collections::HashMap;

use chrono::{Duration, NaiveTime};
use entity::{app_token, payment_order::OrderStatus, project};
use maud::{Markup, html};
use poem::{Response, handler, web::Data};

use super::{PanelError, PanelState, audit_log, page, session::SignedIn};
use crate::service::{
    admin_audit::{self, AuditFilter},
    ledger_check, now, orders, projects, tokens,
};

/// Admin actions shown.
const LATEST_ACTIONS: u64 = 10;
/// A token not used for this many days is listed.
const UNUSED_DAYS: i64 = 30;
/// Unused tokens shown at most.
const UNUSED_TOKENS: u64 = 50;

/// Today's orders of one project, by status.
#[derive(Debug, Default, Clone, Copy)]
struct Today {
    pending: i64,
    completed: i64,
    cancelled: i64,
}

#[handler]
pub async fn show(admin: SignedIn, state: Data<&PanelState>) -> Result<Response, PanelError> {
    let db = &state.db;
    let now = now();
    let today = now.date_naive().and_time(NaiveTime::MIN).and_utc();
    let all = projects::list(db).await?;
    let mut counts: HashMap<i64, Today> = HashMap::new();
    for (project_id, status, count) in orders::counts_created_since(db, today).await? {
        let day = counts.entry(project_id).or_default();
        match status {
            OrderStatus::Pending => day.pending += count,
            OrderStatus::Completed => day.completed += count,
            OrderStatus::Cancelled => day.cancelled += count,
        }
    }
    let actions = admin_audit::list(db, &AuditFilter::default(), LATEST_ACTIONS).await?;
    let unused = tokens::unused_since(db, now - Duration::days(UNUSED_DAYS), UNUSED_TOKENS).await?;
    let last_audit = ledger_check::latest_run(db).await?;
    let body = html! {
        (orders_today(&all, &counts, &today.format("%Y-%m-%d").to_string()))
        (latest_actions(&actions))
        (unused_tokens(&all, &unused))
        section {
            h2 { "Last audit" }
            @match &last_audit {
                None => p { "No audit has been run yet. " a href="/ledger/audit" { "Run one" } },
                Some((entry, run)) => p {
                    (page::when(&entry.at)) " by " (audit_log::actor_cell(entry)) ": "
                    @if run.is_clean() {
                        (page::badge("clean", "ok"))
                    } @else {
                        (page::badge(&run.verdict(), "off"))
                    }
                    " " a href="/ledger/audit" { "Details" }
                },
            }
        }
    };
    Ok(page::ok(page::frame(&admin, "Overview", body)))
}

fn orders_today(all: &[project::Model], counts: &HashMap<i64, Today>, day: &str) -> Markup {
    html! {
        section {
            h2 { "Orders created today (" (day) ", UTC)" }
            div.table-wrap { table {
                thead { tr {
                    th { "Project" } th { "State" } th.num { "Pending" } th.num { "Completed" }
                    th.num { "Cancelled" }
                } }
                tbody {
                    @for p in all {
                        @let today = counts.get(&p.id).copied().unwrap_or_default();
                        tr {
                            td { a href={ "/projects/" (p.id) } { (p.name) } }
                            td { (page::state_badge(p.active)) }
                            td.num { (today.pending) }
                            td.num { (today.completed) }
                            td.num { (today.cancelled) }
                        }
                    }
                    @if all.is_empty() {
                        tr { td colspan="5" .muted { "No project yet. " a href="/projects" { "Create one" } } }
                    }
                }
            } }
        }
    }
}

fn latest_actions(actions: &[entity::admin_audit_entry::Model]) -> Markup {
    html! {
        section {
            h2 { "Latest changes" }
            div.table-wrap { table {
                thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Object" } } }
                tbody {
                    @for entry in actions {
                        tr {
                            td.when { (page::when(&entry.at)) }
                            td { (audit_log::actor_cell(entry)) }
                            td { code { (entry.action) } }
                            td { (audit_log::object_cell(entry)) }
                        }
                    }
                    @if actions.is_empty() {
                        tr { td colspan="4" .muted { "No change yet." } }
                    }
                }
            } }
            p { a href="/audit-log" { "The whole audit log" } }
        }
    }
}

fn unused_tokens(all: &[project::Model], unused: &[app_token::Model]) -> Markup {
    let names: HashMap<i64, &str> = all.iter().map(|p| (p.id, p.name.as_str())).collect();
    html! {
        section {
            h2 { "Tokens never used or unused for " (UNUSED_DAYS) " days" }
            p.muted { "Active tokens only: a key nobody uses is worth disabling." }
            div.table-wrap { table {
                thead { tr { th { "Name" } th { "Project" } th { "Created" } th { "Last used" } } }
                tbody {
                    @for token in unused {
                        tr {
                            td { a href={ "/tokens/" (token.id) } { (token.name) } }
                            td {
                                a href={ "/projects/" (token.project_id) "/tokens" } {
                                    (names.get(&token.project_id).copied().unwrap_or("?"))
                                }
                            }
                            td.when { (page::when(&token.created_at)) }
                            td.when { (page::when_or(token.last_used_at.as_ref(), "never")) }
                        }
                    }
                    @if unused.is_empty() {
                        tr { td colspan="4" .muted { "None: every active token was used in the last " (UNUSED_DAYS) " days." } }
                    }
                }
            } }
            @if unused.len() as u64 >= UNUSED_TOKENS {
                p.muted { "The first " (UNUSED_TOKENS) " of them." }
            }
        }
    }
}
