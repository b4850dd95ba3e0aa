//! The admin audit log: every change made through the panel or the command
//! line, newest first, filtered, and exported as CSV with the same filters.

use entity::admin_audit_entry;
use maud::{Markup, html};
use poem::{Response, Route, get, handler, web::Data};
use serde_json::Value;

use super::{
    PanelError, PanelState, csv_export,
    page::{self, FieldAttrs, FieldErrors, Params},
    session::SignedIn,
};
use crate::service::admin_audit::{self, AuditFilter};
use crate::service::{count, keyset::Listed};

pub fn routes(route: Route) -> Route {
    route
        .at("/audit-log", get(list))
        .at("/audit-log.csv", get(export))
}

/// Entries a page shows at most.
const PAGE_SIZE: u64 = 200;
/// The filters, as the form and the query string name them.
const FILTERS: [&str; 6] = ["actor", "action", "object_kind", "object_id", "from", "to"];
/// Longest actor or object id a filter takes.
const MAX_FILTER_LEN: usize = 200;

/// Whether `text` is a word of lower-case letters, digits and `_`.
fn is_word(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The filter the query string asks for, and what is wrong with it.
fn parse_filter(params: &Params) -> (AuditFilter, FieldErrors) {
    let mut errors = FieldErrors::default();
    let text = |name: &'static str, errors: &mut FieldErrors| {
        let value = params.get(name);
        if value.chars().count() > MAX_FILTER_LEN {
            errors.add(name, format!("must be at most {MAX_FILTER_LEN} characters"));
            None
        } else {
            (!value.is_empty()).then(|| value.to_owned())
        }
    };
    let actor = text("actor", &mut errors);
    let object_id = text("object_id", &mut errors);
    let action = text("action", &mut errors).filter(|action| {
        let ok = match action.split_once('.') {
            Some((kind, verb)) => is_word(kind) && is_word(verb),
            None => is_word(action),
        };
        if !ok {
            errors.add(
                "action",
                "an action such as token.create, or an object kind such as token",
            );
        }
        ok
    });
    let object_kind = text("object_kind", &mut errors).filter(|kind| {
        let ok = is_word(kind);
        if !ok {
            errors.add(
                "object_kind",
                "an object kind such as token, project or order",
            );
        }
        ok
    });
    let (from, until) = page::parse_day_range(params.get("from"), params.get("to"), &mut errors);
    let filter = AuditFilter {
        actor,
        action,
        object_kind,
        object_id,
        from,
        until,
    };
    (filter, errors)
}

/// The project id in an entry's `after` or `before` JSON.
fn project_of(entry: &admin_audit_entry::Model) -> Option<i64> {
    [&entry.after, &entry.before]
        .into_iter()
        .flatten()
        .filter_map(|json| serde_json::from_str::<Value>(json).ok())
        .find_map(|value| value.get("project_id").and_then(Value::as_i64))
}

/// The page of an entry's object, when it has one.
fn object_href(entry: &admin_audit_entry::Model) -> Option<String> {
    let id = entry.object_id.as_str();
    let number = || id.parse::<i64>().ok().filter(|n| *n > 0);
    match entry.object_kind.as_str() {
        "project" => number().map(|n| format!("/projects/{n}")),
        "token" => number().map(|n| format!("/tokens/{n}")),
        "user" => number().map(|n| format!("/users/{n}")),
        // A balance's id is `user:server`; its user's page shows it.
        "balance" => id
            .split_once(':')
            .and_then(|(user, _)| user.parse::<i64>().ok())
            .map(|user| format!("/users/{user}")),
        "order" => {
            let plain =
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b':');
            let project = project_of(entry)?;
            plain.then(|| format!("/orders/{project}/{id}"))
        }
        _ => None,
    }
}

/// An entry's object: its kind and id, linked to its page when it has one.
pub(super) fn object_cell(entry: &admin_audit_entry::Model) -> Markup {
    html! {
        span.muted { (entry.object_kind) " " }
        @match object_href(entry) {
            Some(href) => a href=(href) { (entry.object_id) },
            None => (entry.object_id),
        }
    }
}

/// Who made a change: an administrator's name, or the command line.
pub(super) fn actor_cell(entry: &admin_audit_entry::Model) -> Markup {
    html! {
        @if entry.administrator_id.is_none() && entry.actor == admin_audit::COMMAND_LINE {
            span.muted { (entry.actor) }
        } @else {
            (entry.actor)
        }
    }
}

/// Stored JSON, indented; as stored when it is not JSON.
fn json_cell(json: Option<&str>) -> Markup {
    html! {
        @if let Some(json) = json {
            @let text = serde_json::from_str::<Value>(json)
                .ok()
                .and_then(|value| serde_json::to_string_pretty(&value).ok())
                .unwrap_or_else(|| json.to_owned());
            pre { (text) }
        } @else {
            span.muted { "—" }
        }
    }
}

/// Which entries an [`entries_table`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Listing {
    /// Of any object: each row names its object, linked to its page.
    AnyObject,
    /// Of the one object whose page shows the table.
    OneObject,
}

/// Admin-audit entries as a table: when, who, from which address, the
/// action, the object (unless the table is one object's) and its state
/// before and after; `empty` in the one row when there is no entry.
pub(super) fn entries_table(
    entries: &[admin_audit_entry::Model],
    listing: Listing,
    empty: &str,
) -> Markup {
    let objects = listing == Listing::AnyObject;
    let columns = if objects { 7 } else { 6 };
    html! {
        div.table-wrap { table {
            thead { tr {
                th { "When" } th { "Who" } th { "From" } th { "Action" }
                @if objects { th { "Object" } }
                th { "Before" } th { "After" }
            } }
            tbody {
                @for entry in entries {
                    tr {
                        td.when { (page::when(&entry.at)) }
                        td { (actor_cell(entry)) }
                        td { (entry.address.as_deref().unwrap_or("—")) }
                        td { code { (entry.action) } }
                        @if objects { td { (object_cell(entry)) } }
                        td.json { (json_cell(entry.before.as_deref())) }
                        td.json { (json_cell(entry.after.as_deref())) }
                    }
                }
                @if entries.is_empty() {
                    tr { td colspan=(columns) .muted { (empty) } }
                }
            }
        } }
    }
}

fn filter_form(params: &Params, errors: &FieldErrors) -> Markup {
    let field = |label: &str, name: &str, placeholder: &'static str| {
        page::text_field(
            label,
            name,
            params.get(name),
            errors,
            FieldAttrs {
                placeholder: Some(placeholder),
                ..FieldAttrs::OPTIONAL
            },
        )
    };
    html! {
        form.filters method="get" action="/audit-log" {
            (field("Who", "actor", "name, or command line"))
            (field("Action", "action", "token or token.create"))
            (field("Object kind", "object_kind", "token"))
            (field("Object id", "object_id", "42"))
            (page::text_field("From (UTC day)", "from", params.get("from"), errors, FieldAttrs::DATE))
            (page::text_field("To (UTC day, included)", "to", params.get("to"), errors, FieldAttrs::DATE))
            div.actions {
                button type="submit" { "Filter" }
                a.button.secondary href="/audit-log" { "Clear" }
            }
        }
    }
}

fn list_page(
    admin: &SignedIn,
    params: &Params,
    errors: &FieldErrors,
    entries: &Listed<admin_audit_entry::Model>,
) -> Markup {
    let shown = entries.rows.len() as u64;
    page::frame(
        admin,
        "Audit log",
        html! {
            p.muted {
                "Every change made through the panel or the command line, written with the change itself. Secrets are never recorded."
            }
            (filter_form(params, errors))
            @if errors.is_empty() {
                div.actions {
                    a.button.secondary href={ "/audit-log.csv" (params.query(&FILTERS)) } download {
                        "Export CSV"
                    }
                }
                p.muted {
                    @if entries.older.is_none() && params.get("before").is_empty() {
                        (count(shown, "entry", "entries")) "."
                    } @else {
                        "Newest first, " (PAGE_SIZE) " entries a page."
                    }
                }
                (entries_table(&entries.rows, Listing::AnyObject, "No entry matches."))
                (page::paging("/audit-log", params, &FILTERS, entries.older))
            }
        },
    )
}

#[handler]
async fn list(
    admin: SignedIn,
    params: Params,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let page = params.page(PAGE_SIZE)?;
    let (filter, errors) = parse_filter(&params);
    if !errors.is_empty() {
        let none = Listed::default();
        return Ok(page::invalid(list_page(&admin, &params, &errors, &none)));
    }
    let entries = admin_audit::page(&state.db, &filter, page).await?;
    Ok(page::ok(list_page(&admin, &params, &errors, &entries)))
}

/// The columns of the export, one row per entry.
const CSV_HEADER: &[&str] = &[
    "id",
    "at",
    "actor",
    "address",
    "action",
    "object_kind",
    "object_id",
    "before",
    "after",
];

fn csv_row(entry: admin_audit_entry::Model) -> Vec<String> {
    vec![
        entry.id.to_string(),
        entry
            .at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        entry.actor,
        entry.address.unwrap_or_default(),
        entry.action,
        entry.object_kind,
        entry.object_id,
        entry.before.unwrap_or_default(),
        entry.after.unwrap_or_default(),
    ]
}

#[handler]
async fn export(
    _admin: SignedIn,
    params: Params,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let (filter, errors) = parse_filter(&params);
    if !errors.is_empty() {
        return Ok(csv_export::refused(&errors, &FILTERS));
    }
    let db = state.db.clone();
    Ok(csv_export::attachment(
        "masterpay-audit-log.csv",
        CSV_HEADER,
        move |page| {
            let (db, filter) = (db.clone(), filter.clone());
            async move {
                admin_audit::page(&db, &filter, page)
                    .await?
                    .try_map(|entry| Ok::<_, sea_orm::DbErr>(csv_row(entry)))
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, id: &str, after: Option<&str>) -> admin_audit_entry::Model {
        admin_audit_entry::Model {
            id: 1,
            at: chrono::Utc::now(),
            administrator_id: None,
            actor: admin_audit::COMMAND_LINE.to_owned(),
            action: format!("{kind}.create"),
            object_kind: kind.to_owned(),
            object_id: id.to_owned(),
            before: None,
            after: after.map(str::to_owned),
            address: None,
        }
    }

    #[test]
    fn objects_link_to_their_pages() {
        assert_eq!(
            object_href(&entry("token", "7", None)).as_deref(),
            Some("/tokens/7")
        );
        assert_eq!(
            object_href(&entry("project", "2", None)).as_deref(),
            Some("/projects/2")
        );
        assert_eq!(object_href(&entry("user", "x", None)), None);
        assert_eq!(
            object_href(&entry("balance", "5:0", None)).as_deref(),
            Some("/users/5")
        );
        assert_eq!(
            object_href(&entry(
                "order",
                "Order:Ab12Cd34",
                Some(r#"{"project_id":3}"#)
            ))
            .as_deref(),
            Some("/orders/3/Order:Ab12Cd34")
        );
        assert_eq!(object_href(&entry("order", "Order:Ab12Cd34", None)), None);
        assert_eq!(object_href(&entry("server", "4", None)), None);
    }

    #[test]
    fn bad_filters_are_named() {
        let params = |pairs: &[(&str, &str)]| Params::from_pairs(pairs);
        let (filter, errors) =
            parse_filter(&params(&[("action", "token"), ("from", "2026-11-01")]));
        assert!(errors.is_empty());
        assert_eq!(filter.action.as_deref(), Some("token"));
        assert!(filter.from.is_some() && filter.until.is_none());
        let (_, errors) = parse_filter(&params(&[
            ("action", "token%"),
            ("object_kind", "a b"),
            ("from", "2026-13-01"),
            ("to", "yesterday"),
        ]));
        for name in ["action", "object_kind", "from", "to"] {
            assert!(errors.of(name).is_some(), "{name}");
        }
    }
}
