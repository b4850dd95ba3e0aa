//! The ledger: the operation log of every project, filtered, and the
//! ledger audit (`masterpay audit`), run from here and recorded in the
//! admin audit log.

use entity::{admin_audit_entry, operation_log::LogKind, project};
use sea_orm::ActiveEnum;

use super::{
    csv_export,
    form::{parse_day_range, parse_id},
    prelude::*,
};
use crate::{
    money::signed_cents,
    service::{
        ledger::{self, LedgerEntry, LedgerFilter},
        ledger_check::{self, RecordedAudit},
        projects,
    },
};

pub fn routes(route: Route) -> Route {
    route
        .at("/ledger", get(list))
        .at("/ledger.csv", get(export))
        .at("/ledger/audit", get(show_audit).post(run_audit))
}

/// Entries a page shows at most.
const PAGE_SIZE: u64 = 100;
/// The filters, as the form and the query string name them.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Filters {
    project: String,
    user: String,
    kind: String,
    from: String,
    to: String,
}

impl Filters {
    /// The filter the query string asks for, of one of `all`, or what is
    /// wrong with it.
    fn read(&self, all: &[project::Model]) -> Result<LedgerFilter, FieldErrors> {
        let mut errors = FieldErrors::default();
        let project_id = errors.check("project", &self.project, |text| {
            let known = text
                .parse()
                .ok()
                .filter(|id| all.iter().any(|p| p.id == *id));
            known.ok_or_else(|| "choose a project from the list".to_owned())
        });
        let user_id = errors.check("user", &self.user, |text| {
            parse_id(text).ok_or_else(|| "a user id is a whole number above 0".to_owned())
        });
        let kind = errors.check("kind", &self.kind, |text| {
            LogKind::try_from_value(&text.to_owned())
                .map_err(|_| "choose a kind from the list".to_owned())
        });
        let (from, until) = parse_day_range((&self.from, &self.to), &mut errors);
        errors.or(LedgerFilter {
            project_id,
            user_id,
            kind,
            from,
            until,
        })
    }
}

fn filter_form(f: &Filters, errors: &FieldErrors, all: &[project::Model]) -> Markup {
    let kinds = [LogKind::OrderCredit, LogKind::BalanceSet]
        .map(|kind| (kind.to_value(), c::kind_label(kind).to_owned()));
    c::filter_bar(
        "/ledger",
        Some((&f.from, &f.to)),
        errors,
        html! {
            (c::project_field(all, &f.project, Blank::Any("Every project"), errors))
            (c::text_field("User id", "user", &f.user, errors, FieldAttrs::OPTIONAL))
            (c::select_field(("Kind", "kind"), errors, Blank::Any("Every kind"), kinds, &f.kind))
        },
    )
}

fn run_form(admin: &SignedIn) -> Markup {
    let button = html! { button type="submit" { "Run audit" } };
    c::post_form(admin, "/ledger/audit", None, button)
}

fn list_page(
    admin: &SignedIn,
    query: &PageQuery<Filters>,
    errors: &FieldErrors,
    all: &[project::Model],
    entries: &Listed<LedgerEntry>,
) -> Markup {
    page::frame(
        admin,
        "Ledger",
        html! {
            div.actions {
                (run_form(admin))
                a.button.secondary href="/ledger/audit" { "Last audit" }
            }
            p.muted {
                "Every balance change: each completed order's credit and each balance set, with the balance before and after. The audit checks that every balance equals the sum of its changes and that every completed order was credited exactly once."
            }
            (filter_form(&query.filters, errors, all))
            @if errors.is_empty() {
                (c::export_link("/ledger.csv", query))
                (c::entries_count(query, entries, PAGE_SIZE))
                (c::list(&entries.rows, &[
                    Column("Id", "num", &|e| html! { (e.row.id) }),
                    Column("When", "when", &|e| html! { (c::when(&e.row.created_at)) }),
                    Column("Project", "", &|e| html! {
                        @if let Some(id) = e.project_id { a href={ "/projects/" (id) } { (c::project_name(all, id)) } }
                    }),
                    Column("User", "num", &|e| html! { a href={ "/users/" (e.row.user_id) } { (e.row.user_id) } }),
                    Column("Account", "", &|e| html! {
                        @if e.row.server_id == 0 { "general" } @else { "server " (e.row.server_id) }
                        " · " (e.row.balance_type.to_value())
                    }),
                    Column("Kind", "", &|e| html! { (c::kind_label(e.row.kind)) }),
                    Column("Change", "num", &|e| html! { (signed_cents(e.row.amount_cents)) }),
                    Column("Before", "num", &|e| html! { (signed_cents(e.row.balance_before_cents)) }),
                    Column("After", "num", &|e| html! { (signed_cents(e.row.balance_after_cents)) }),
                    Column("Order", "", &|e| html! {
                        @match (&e.order_id, e.project_id) {
                            (Some(order), Some(project)) => a href=(c::order_path(project, order)) { (order) },
                            (Some(order), None) => (order),
                            (None, _) => span.muted { "—" },
                        }
                    }),
                ], "No entry matches."))
                (c::paging("/ledger", query, entries.older))
            }
        },
    )
}

#[handler]
async fn list(admin: SignedIn, query: PageQuery<Filters>) -> Answer {
    let db = &admin.state.db;
    let all = projects::list(db).await?;
    let filter = query.filters.read(&all);
    let entries = query.rows(PAGE_SIZE, &filter, |f, page| ledger::ledger(db, f, page));
    let errors = FieldErrors::of_read(&filter);
    let markup = list_page(&admin, &query, errors, &all, &entries.await?);
    Ok(page::ok_unless(filter.is_err(), markup))
}

/// The columns of the export, one row per entry; amounts in exact decimal.
const CSV_COLUMNS: csv_export::Columns<LedgerEntry> = &[
    ("id", |e| e.row.id.to_string()),
    ("at", |e| csv_export::moment(e.row.created_at)),
    ("project_id", |e| {
        e.project_id.map(|id| id.to_string()).unwrap_or_default()
    }),
    ("user_id", |e| e.row.user_id.to_string()),
    ("server_id", |e| e.row.server_id.to_string()),
    ("balance_type", |e| e.row.balance_type.to_value()),
    ("kind", |e| e.row.kind.to_value()),
    ("change", |e| signed_cents(e.row.amount_cents)),
    ("balance_before", |e| {
        signed_cents(e.row.balance_before_cents)
    }),
    ("balance_after", |e| signed_cents(e.row.balance_after_cents)),
    ("order_id", |e| e.order_id.clone().unwrap_or_default()),
];

/// The entries the filters keep, every page of them, as CSV.
#[handler]
async fn export(admin: SignedIn, query: PageQuery<Filters>) -> Answer {
    let all = projects::list(&admin.state.db).await?;
    Ok(csv_export::attachment(
        ("masterpay-ledger.csv", CSV_COLUMNS),
        (&admin.state.db, query.filters.read(&all)),
        |db, filter, page| async move { ledger::ledger(&db, &filter, page).await },
    ))
}

#[handler]
async fn run_audit(admin: SignedIn, _form: PostForm) -> Answer {
    let days = admin.state.webhook_retention_days;
    ledger_check::run_recorded(&admin.state.db, &admin.actor(), days).await?;
    admin.done("/ledger/audit", "Ledger audit run.")
}

fn audit_page(
    admin: &SignedIn,
    latest: Option<&(admin_audit_entry::Model, RecordedAudit)>,
) -> Markup {
    page::frame(
        admin,
        "Ledger audit",
        html! {
            div.actions {
                (run_form(admin))
                a.button.secondary href="/ledger" { "Ledger" }
            }
            @match latest {
                None => p { "No audit has been run yet." },
                Some((entry, run)) => {
                    p {
                        "Run " (c::when(&entry.at)) " by " (c::actor_cell(entry)) "."
                    }
                    p class=(if run.is_clean() { "notice" } else { "warning" }) {
                        "Checked: " (run.counted()) ": "
                        strong { (run.verdict()) }
                    }
                    @if !run.findings.is_empty() {
                        @if (run.findings.len() as u64) < run.mismatches {
                            p.muted { "The first " (run.findings.len()) " of them:" }
                        }
                        ul.findings {
                            @for finding in &run.findings {
                                li { code { (finding) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

#[handler]
async fn show_audit(admin: SignedIn) -> Answer {
    let latest = ledger_check::latest_run(&admin.state.db).await?;
    Ok(page::ok(audit_page(&admin, latest.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn project(id: i64) -> project::Model {
        project::Model {
            id,
            name: format!("p{id}"),
            active: true,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn filters_are_checked_field_by_field() {
        let all = [project(1)];
        let read = |query: &str| {
            serde_html_form::from_str::<Filters>(query)
                .unwrap()
                .read(&all)
        };
        let filter = read("project=1&kind=balance_set&to=2026-11-25").unwrap();
        assert_eq!(filter.project_id, Some(1));
        assert_eq!(filter.kind, Some(LogKind::BalanceSet));
        assert_eq!(
            filter.until.map(|t| t.to_rfc3339()),
            Some("2026-11-26T00:00:00+00:00".to_owned())
        );
        let errors = read("project=2&user=-3&kind=gift&from=2026-11-25&to=2026-11-24").unwrap_err();
        for name in ["project", "user", "kind", "to"] {
            assert!(errors.of(name).is_some(), "{name}");
        }
        assert!(errors.of("from").is_none());
    }
}
