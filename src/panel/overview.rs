//! The overview: what an operator checks first. Today's orders and the
//! money completed today and this week, by project; what needs a look
//! (orders pending for more than a day, completions refused, refused
//! sign-ins, tokens about to expire); the latest changes, the tokens
//! nobody uses, the last audit. The figures are the service's
//! (`service::overview`), read from the tables at each request.

use std::collections::HashMap;

use chrono::Duration;
use entity::{
    app_token,
    payment_order::{self, OrderStatus},
    project,
};

use super::prelude::*;
use crate::{
    money::signed_cents,
    service::{
        admin_audit::{self, AuditFilter},
        ledger_check, now, orders,
        overview::{self, Figures},
        projects, tokens,
    },
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
pub async fn show(admin: SignedIn) -> Answer {
    let db = &admin.state.db;
    let now = now();
    let figures = overview::figures(db, now).await?;
    let all = projects::list(db).await?;
    let mut counts: HashMap<i64, Today> = HashMap::new();
    for (project_id, status, count) in orders::counts_created_since(db, figures.today).await? {
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
        (orders_today(&all, &counts, &figures.today.format("%Y-%m-%d").to_string()))
        (money_completed(&all, &figures))
        (attention(&all, &figures))
        (latest_actions(&actions))
        (unused_tokens(&all, &unused))
        section {
            h2 { "Last audit" }
            @match &last_audit {
                None => p { "No audit has been run yet. " a href="/ledger/audit" { "Run one" } },
                Some((entry, run)) => p {
                    (c::when(&entry.at)) " by " (c::actor_cell(entry)) ": "
                    @if run.is_clean() {
                        (c::badge("clean", "ok"))
                    } @else {
                        (c::badge(&run.verdict(), "off"))
                    }
                    " " a href="/ledger/audit" { "Details" }
                },
            }
        }
    };
    Ok(page::ok(page::frame(&admin, "Overview", body)))
}

fn orders_today(all: &[project::Model], counts: &HashMap<i64, Today>, day: &str) -> Markup {
    let today = |p: &project::Model| counts.get(&p.id).copied().unwrap_or_default();
    html! {
        section {
            h2 { "Orders created today (" (day) ", UTC)" }
            (c::list(all, &[
                Column("Project", "", &|p| html! { a href={ "/projects/" (p.id) } { (p.name) } }),
                Column("State", "", &|p| c::state_badge(p.active)),
                Column("Pending", "num", &|p| html! { (today(p).pending) }),
                Column("Completed", "num", &|p| html! { (today(p).completed) }),
                Column("Cancelled", "num", &|p| html! { (today(p).cancelled) }),
            ], html! { "No project yet. " a href="/projects" { "Create one" } }))
        }
    }
}

/// The money of the orders completed today and this week, by project.
fn money_completed(all: &[project::Model], figures: &Figures) -> Markup {
    let money = |sums: &[(i64, i64)], id: i64| {
        let cents = sums
            .iter()
            .find(|(p, _)| *p == id)
            .map_or(0, |(_, cents)| *cents);
        signed_cents(cents)
    };
    html! {
        section {
            h2 { "Money completed (UTC days; the week from Monday "
                (figures.week.format("%Y-%m-%d")) ")" }
            (c::list(all, &[
                Column("Project", "", &|p| html! { a href={ "/projects/" (p.id) } { (p.name) } }),
                Column("Today", "num", &|p| html! {
                    span id={ "completed-today-" (p.id) } { (money(&figures.completed_today, p.id)) }
                }),
                Column("This week", "num", &|p| html! {
                    span id={ "completed-week-" (p.id) } { (money(&figures.completed_this_week, p.id)) }
                }),
            ], "No project yet."))
        }
    }
}

/// What needs a look: each figure with, for orders, the first few.
fn attention(all: &[project::Model], figures: &Figures) -> Markup {
    let hours = overview::RECENT.num_hours();
    let (stale, oldest) = &figures.stale_pending;
    let (refused, latest) = &figures.refused_completions;
    html! {
        section {
            h2 { "Needs a look" }
            div.table-wrap { table {
                tbody {
                    tr { th { "Orders pending for more than " (hours) " hours" } td.num id="stale-pending" { (stale) } }
                    tr { th { "Completions refused as final in the last " (hours) " hours" } td.num id="refused-completions" { (refused) } }
                    tr { th { "Refused sign-ins in the last " (hours) " hours" } td.num id="refused-sign-ins" { (figures.refused_sign_ins) } }
                    tr { th { "Tokens expiring within " (overview::EXPIRING.num_days()) " days" } td.num id="expiring-tokens" { (figures.tokens_expiring) } }
                }
            } }
            (order_list("The oldest pending", all, oldest, |o| html! { (c::when(&o.created_at)) }))
            (order_list("The latest refused", all, latest, |o| html! {
                (c::when_or(o.refused_at.as_ref(), "")) ": " (o.refusal.as_deref().unwrap_or(""))
            }))
        }
    }
}

/// A few orders, each with what `detail` says of it; nothing when none.
fn order_list(
    title: &str,
    all: &[project::Model],
    listed: &[payment_order::Model],
    detail: impl Fn(&payment_order::Model) -> Markup,
) -> Markup {
    html! {
        @if !listed.is_empty() {
            h3 { (title) }
            ul {
                @for o in listed {
                    li {
                        a href=(c::order_path(o.project_id, &o.order_id)) { (o.order_id) }
                        " (" (c::project_name(all, o.project_id)) ", " (signed_cents(o.amount_cents)) "): " (detail(o))
                    }
                }
            }
        }
    }
}

fn latest_actions(actions: &[entity::admin_audit_entry::Model]) -> Markup {
    html! {
        section {
            h2 { "Latest changes" }
            (c::list(actions, &[
                Column("When", "when", &|entry| html! { (c::when(&entry.at)) }),
                Column("Who", "", &c::actor_cell),
                Column("Action", "", &|entry| html! { code { (entry.action) } }),
                Column("Object", "", &c::object_cell),
            ], "No change yet."))
            p { a href="/audit-log" { "The whole audit log" } }
        }
    }
}

fn unused_tokens(all: &[project::Model], unused: &[app_token::Model]) -> Markup {
    html! {
        section {
            h2 { "Tokens never used or unused for " (UNUSED_DAYS) " days" }
            p.muted { "Active tokens only: a key nobody uses is worth disabling." }
            (c::list(unused, &[
                Column("Name", "", &|token| html! { a href={ "/tokens/" (token.id) } { (token.name) } }),
                Column("Project", "", &|token| html! {
                    a href={ "/projects/" (token.project_id) "/tokens" } { (c::project_name(all, token.project_id)) }
                }),
                Column("Created", "when", &|token| html! { (c::when(&token.created_at)) }),
                Column("Last used", "when", &|token| html! { (c::when_or(token.last_used_at.as_ref(), "never")) }),
            ], html! { "None: every active token was used in the last " (UNUSED_DAYS) " days." }))
            @if unused.len() as u64 >= UNUSED_TOKENS {
                p.muted { "The first " (UNUSED_TOKENS) " of them." }
            }
        }
    }
}
