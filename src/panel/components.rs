//! The markup pages share: the one format of a moment, badges, form fields
//! with their errors next to them, selects, a list's filter bar, search
//! box, export link and paging, tables of rows by columns, detail tables,
//! posting forms, the sections that disable, enable or delete an object,
//! the one-time reveal of a secret, and the tables of operation-log and
//! admin-audit entries.

use chrono::{DateTime, Utc};
use entity::{
    admin_audit_entry, balance::GENERAL_ACCOUNT, operation_log::BalanceType,
    operation_log::LogKind, payment_order::OrderStatus, project, server,
};
use maud::{Markup, Render, html};
use sea_orm::{ActiveEnum, DatabaseConnection, DbErr};
use serde::Serialize;
use serde_json::Value;

use super::{
    form::{FieldErrors, PageQuery},
    page,
    session::SignedIn,
};
use crate::{
    money::signed_cents,
    service::{
        admin_audit::{self, AuditFilter},
        count,
        keyset::Listed,
        ledger::Entry,
    },
};

/// The one format of a moment: `2026-11-25 21:07:45 UTC`.
pub fn when(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub fn when_or(at: Option<&DateTime<Utc>>, none: &str) -> String {
    at.map_or_else(|| none.to_owned(), when)
}

/// `value`, or `none` in grey when there is none.
pub fn or_none(value: Option<impl Render>, none: &str) -> Markup {
    html! { @match value { Some(value) => (value), None => span.muted { (none) } } }
}

/// A small badge (a permission, a state).
pub fn badge(text: &str, kind: &str) -> Markup {
    html! { span class={ "badge " (kind) } { (text) } }
}

/// An active/disabled badge.
pub fn state_badge(active: bool) -> Markup {
    if active {
        badge("active", "ok")
    } else {
        badge("disabled", "off")
    }
}

/// An order's status as a badge: pending (warn), completed (ok), cancelled
/// (off).
pub fn status_badge(status: OrderStatus) -> Markup {
    let kind = match status {
        OrderStatus::Pending => "warn",
        OrderStatus::Completed => "ok",
        OrderStatus::Cancelled => "off",
    };
    badge(&status.to_value(), kind)
}

/// What kind of balance change an operation-log entry is.
pub fn kind_label(kind: LogKind) -> &'static str {
    match kind {
        LogKind::OrderCredit => "order credit",
        LogKind::BalanceSet => "balance set",
    }
}

/// Where an order's page is.
pub fn order_path(project_id: i64, order_id: &str) -> String {
    format!("/orders/{project_id}/{order_id}")
}

/// The name of project `id` of `all`; `?` when it is not one of them.
pub fn project_name(all: &[project::Model], id: i64) -> &str {
    all.iter()
        .find(|p| p.id == id)
        .map_or("?", |p| p.name.as_str())
}

/// The name of account `server_id` of a project with `servers`.
pub fn account_name(server_id: i64, servers: &[server::Model]) -> String {
    if server_id == GENERAL_ACCOUNT {
        return "General account".to_owned();
    }
    match servers.iter().find(|s| s.id == server_id) {
        Some(s) => format!("{} (server {})", s.name, s.id),
        None => format!("Server {server_id}"),
    }
}

#[derive(Debug, Clone, Copy)]
pub struct FieldAttrs {
    pub kind: &'static str,
    pub required: bool,
    pub placeholder: Option<&'static str>,
    pub autocomplete: Option<&'static str>,
}

impl FieldAttrs {
    pub const TEXT: FieldAttrs = FieldAttrs {
        kind: "text",
        required: true,
        placeholder: None,
        autocomplete: None,
    };
    pub const OPTIONAL: FieldAttrs = FieldAttrs {
        required: false,
        ..FieldAttrs::TEXT
    };
    /// A day (`YYYY-MM-DD`, see `form::parse_day`).
    pub const DATE: FieldAttrs = FieldAttrs {
        kind: "date",
        ..FieldAttrs::OPTIONAL
    };

    /// A password field, its browser's `autocomplete` hint.
    pub const fn password(autocomplete: &'static str) -> FieldAttrs {
        FieldAttrs {
            kind: "password",
            autocomplete: Some(autocomplete),
            ..FieldAttrs::TEXT
        }
    }

    pub const fn placeholder(self, placeholder: &'static str) -> FieldAttrs {
        FieldAttrs {
            placeholder: Some(placeholder),
            ..self
        }
    }
}

/// A labelled input with its value and error.
pub fn text_field(
    label: impl Render,
    name: &str,
    value: &str,
    errors: &FieldErrors,
    attrs: FieldAttrs,
) -> Markup {
    html! {
        label.field {
            span { (label) }
            input type=(attrs.kind) name=(name) value=(value)
                required[attrs.required] placeholder=[attrs.placeholder]
                autocomplete=[attrs.autocomplete]
                id=[errors.id(name)] aria-invalid=[errors.invalid(name)]
                aria-describedby=[errors.described_by(name)];
            (errors.show(name))
        }
    }
}

/// The first option of a select.
#[derive(Debug, Clone, Copy)]
pub enum Blank<'a> {
    /// None: one of the choices is always chosen.
    None,
    /// Any value: a filter left blank.
    Any(&'a str),
    /// A choice the form requires, asked for until it is made.
    Choose(&'a str),
}

/// A labelled select of `choices` (value, text), `selected` chosen, with
/// its error.
pub fn select_field(
    (label, name): (&str, &str),
    errors: &FieldErrors,
    blank: Blank<'_>,
    choices: impl IntoIterator<Item = (String, String)>,
    selected: &str,
) -> Markup {
    let required = matches!(blank, Blank::Choose(_));
    html! {
        label.field {
            span { (label) }
            select name=(name) required[required] id=[errors.id(name)]
                aria-invalid=[errors.invalid(name)] aria-describedby=[errors.described_by(name)] {
                @match blank {
                    Blank::None => {}
                    Blank::Any(text) => option value="" { (text) },
                    Blank::Choose(text) => option value="" disabled selected[selected.is_empty()] { (text) },
                }
                @for (value, text) in choices {
                    option value=(value) selected[selected == value] { (text) }
                }
            }
            (errors.show(name))
        }
    }
}

/// The project select of a filter or form (`project`).
pub fn project_field(
    projects: &[project::Model],
    selected: &str,
    blank: Blank<'_>,
    errors: &FieldErrors,
) -> Markup {
    let choices = projects
        .iter()
        .map(|p| (p.id.to_string(), format!("{} ({})", p.name, p.id)));
    select_field(("Project", "project"), errors, blank, choices, selected)
}

/// A list's filter form at `action`: its `fields`, the `days` `from` and
/// `to` when it has them, and the buttons.
pub fn filter_bar(
    action: &str,
    days: Option<(&str, &str)>,
    errors: &FieldErrors,
    fields: Markup,
) -> Markup {
    html! {
        form.filters method="get" action=(action) {
            (fields)
            @if let Some((from, to)) = days {
                (text_field("From (UTC day)", "from", from, errors, FieldAttrs::DATE))
                (text_field("To (UTC day, included)", "to", to, errors, FieldAttrs::DATE))
            }
            div.actions {
                button type="submit" { "Filter" }
                a.button.secondary href=(action) { "Clear" }
            }
        }
    }
}

/// The search box of the list at `action`: its text `q` (the query
/// parameter `q`), and a way back to the whole list.
pub fn search_form(action: &str, label: &str, placeholder: &str, q: &str) -> Markup {
    html! {
        form.filters method="get" action=(action) {
            label.field {
                span { (label) }
                input type="search" name="q" value=(q) placeholder=(placeholder);
            }
            button type="submit" { "Search" }
            @if !q.is_empty() {
                a.button.secondary href=(action) { "Clear" }
            }
        }
    }
}

/// The link to the CSV export at `path` of what the filters of `query`
/// keep.
pub fn export_link(path: &str, query: &PageQuery<impl Serialize>) -> Markup {
    html! {
        div.actions {
            a.button.secondary href={ (path) (query.keep()) } download { "Export CSV" }
        }
    }
}

/// How many entries a page of `size` shows: their number when it is the
/// only page, else how the pages go.
pub fn entries_count<T, Q>(query: &PageQuery<Q>, listed: &Listed<T>, size: u64) -> Markup {
    html! {
        p.muted {
            @if listed.older.is_none() && !query.paged() {
                (count(listed.rows.len() as u64, "entry", "entries")) "."
            } @else {
                "Newest first, " (size) " entries a page."
            }
        }
    }
}

/// The links under a list of `path`: back to the newest page from an older
/// one, and on to the `older` page when there is one; both keep the
/// filters of `query`.
pub fn paging(path: &str, query: &PageQuery<impl Serialize>, older: Option<i64>) -> Markup {
    let filters = query.keep();
    let older = older.map(|before| {
        let and = if filters.is_empty() { '?' } else { '&' };
        format!("{path}{filters}{and}before={before}")
    });
    html! {
        @if query.paged() || older.is_some() {
            nav.paging {
                @if query.paged() { a href={ (path) (filters) } { "← newest" } }
                @if let Some(href) = older { a href=(href) { "older →" } }
            }
        }
    }
}

/// A column of a [`list`]: its header, the class of its cells (`num`
/// aligns numbers, `when` keeps a moment on one line, or none) and what
/// each cell shows of a row.
pub struct Column<'a, T>(pub &'a str, pub &'a str, pub &'a dyn Fn(&T) -> Markup);

/// `rows` as a table of `columns`, scrolled sideways on its own when it is
/// wider than the page; `empty` in the one row when there is none.
pub fn list<T>(rows: &[T], columns: &[Column<'_, T>], empty: impl Render) -> Markup {
    let class = |class: &str| Some(class.to_owned()).filter(|class| !class.is_empty());
    html! {
        div.table-wrap { table {
            thead { tr { @for Column(head, kind, _) in columns { th class=[class(kind)] { (head) } } } }
            tbody {
                @for row in rows {
                    tr { @for Column(_, kind, cell) in columns { td class=[class(kind)] { (cell(row)) } } }
                }
                @if rows.is_empty() { tr { td colspan=(columns.len()) .muted { (empty) } } }
            }
        } }
    }
}

/// An object's details, a row per (label, value).
pub fn details<'a>(rows: impl IntoIterator<Item = (&'a str, Markup)>) -> Markup {
    html! {
        div.table-wrap { table { tbody {
            @for (label, value) in rows { tr { th { (label) } td { (value) } } }
        } } }
    }
}

/// A form posting its `fields` (and buttons) to `action` with the CSRF
/// field, once `confirm` (when there is one) is answered yes.
pub fn post_form(admin: &SignedIn, action: &str, confirm: Option<&str>, fields: Markup) -> Markup {
    html! {
        form method="post" action=(action) data-confirm=[confirm] {
            (page::csrf(admin))
            (fields)
        }
    }
}

/// A section of a page, under its `title` (none when blank), that is one
/// [`post_form`] to `action`.
pub fn form_section(admin: &SignedIn, (title, action): (&str, &str), fields: Markup) -> Markup {
    html! {
        section {
            @if !title.is_empty() { h2 { (title) } }
            (post_form(admin, action, None, fields))
        }
    }
}

/// The section of an object's page that disables it while it is active,
/// saying what `disabling` does and asking `confirm` first, or enables it,
/// saying what `enabling` does; its form posts `active` to `action`.
pub fn toggle_section(
    admin: &SignedIn,
    (action, what): (&str, &str),
    active: bool,
    (disabling, enabling): (&str, &str),
    confirm: &str,
) -> Markup {
    let (title, says) = if active {
        ("Disable", disabling)
    } else {
        ("Enable", enabling)
    };
    html! {
        section {
            h2 { (title) }
            p { (says) }
            (post_form(admin, action, active.then_some(confirm), html! {
                input type="hidden" name="active" value=(!active);
                button class=[active.then_some("danger")] type="submit" { (title) " " (what) }
            }))
        }
    }
}

/// A fieldset of checkboxes under `legend`, each sending `name` with its
/// value, checked when `checked` holds it, and `field`'s error: `first`,
/// then one per (value, text) of `choices`.
pub fn checkboxes(
    (legend, field, name): (&str, &str, &str),
    errors: &FieldErrors,
    first: Markup,
    choices: impl IntoIterator<Item = (String, Markup)>,
    checked: &[String],
) -> Markup {
    html! {
        fieldset id=[errors.id(field)] aria-invalid=[errors.invalid(field)] aria-describedby=[errors.described_by(field)] {
            legend { (legend) }
            (first)
            @for (value, text) in choices {
                label {
                    input type="checkbox" name=(name) value=(value) checked[checked.contains(&value)];
                    " " (text)
                }
            }
            (errors.show(field))
        }
    }
}

/// The section that deletes `what`, known by `name` (a token's name, an
/// endpoint's URL), once that is typed (`confirm_name`, sent back as
/// `typed` with its error); `warning` says what deleting does.
pub fn delete_section(
    admin: &SignedIn,
    (action, what, name): (&str, &str, &str),
    warning: &str,
    typed: &str,
    errors: &FieldErrors,
) -> Markup {
    let label = html! { "Type " code { (name) } " to confirm" };
    html! {
        section {
            h2 { "Delete" }
            p { (warning) }
            (post_form(admin, action, None, html! {
                (text_field(label, "confirm_name", typed, errors, FieldAttrs { autocomplete: Some("off"), ..FieldAttrs::TEXT }))
                button.danger type="submit" { "Delete " (what) }
            }))
        }
    }
}

/// A secret shown this once (`id`, with a copy button), the page's address
/// put in the browser's history as `address` so that a reload does not
/// send the form again; `warning` says what to do with it.
pub fn reveal(address: &str, (title, id, secret): (Markup, &str, &str), warning: Markup) -> Markup {
    html! {
        section.reveal data-address=(address) {
            h2 { (title) }
            p.secret id=(id) { (secret) }
            div.actions {
                button.secondary type="button" data-copy=(id) { "Copy" }
            }
            p.warning { (warning) }
        }
    }
}

// ---------------------------------------------------------------------------
// Entries of the operation log and of the admin audit log.

/// Operation-log entries as a table (a user's history, an order's credit).
pub fn operations_table(entries: &[Entry], project_id: i64, servers: &[server::Model]) -> Markup {
    let balance = |e: &Entry| match e.balance_type {
        BalanceType::Main => "main",
        BalanceType::Bonus => "bonus",
    };
    html! {
        (list(entries, &[
            Column("When", "", &|e| html! { (when(&e.created_at)) }),
            Column("Kind", "", &|e| html! { (kind_label(e.kind)) }),
            Column("Account", "", &|e| html! { (account_name(e.server_id, servers)) }),
            Column("Balance", "", &|e| html! { (balance(e)) }),
            Column("Change", "num", &|e| html! { (signed_cents(e.amount_cents)) }),
            Column("Before", "num", &|e| html! { (e.balance_before) }),
            Column("After", "num", &|e| html! { (e.balance_after) }),
            Column("Order", "", &|e| html! {
                @if let Some(order_id) = &e.order_id { a href=(order_path(project_id, order_id)) { (order_id) } }
            }),
        ], "No operation yet."))
    }
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
            plain.then(|| order_path(project, id))
        }
        _ => None,
    }
}

/// An entry's object: its kind and id, linked to its page when it has one.
pub fn object_cell(entry: &admin_audit_entry::Model) -> Markup {
    html! {
        span.muted { (entry.object_kind) " " }
        @match object_href(entry) {
            Some(href) => a href=(href) { (entry.object_id) },
            None => (entry.object_id),
        }
    }
}

/// Who made a change: an administrator's name, or the command line.
pub fn actor_cell(entry: &admin_audit_entry::Model) -> Markup {
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
    let pretty = |json: &str| {
        serde_json::from_str::<Value>(json)
            .ok()
            .and_then(|value| serde_json::to_string_pretty(&value).ok())
            .unwrap_or_else(|| json.to_owned())
    };
    or_none(json.map(|json| html! { pre { (pretty(json)) } }), "—")
}

/// Entries of an object's page's [`audit_table`] shown at most.
const HISTORY_LIMIT: u64 = 100;

/// The admin-audit entries of object `id` of `kind`, the newest first.
pub async fn history(
    db: &DatabaseConnection,
    kind: &str,
    id: String,
) -> Result<Vec<admin_audit_entry::Model>, DbErr> {
    let filter = AuditFilter {
        object_kind: Some(kind.to_owned()),
        object_id: Some(id),
        ..AuditFilter::default()
    };
    admin_audit::list(db, &filter, HISTORY_LIMIT).await
}

/// Which entries an [`audit_table`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Of any object: each row names its object, linked to its page.
    AnyObject,
    /// Of the one object whose page shows the table.
    OneObject,
}

/// Admin-audit entries as a table: when, who, from which address, the
/// action, the object (unless the table is one object's) and its state
/// before and after; `empty` in the one row when there is no entry.
pub fn audit_table(entries: &[admin_audit_entry::Model], listing: Listing, empty: &str) -> Markup {
    let mut columns: Vec<Column<admin_audit_entry::Model>> = vec![
        Column("When", "when", &|e| html! { (when(&e.at)) }),
        Column("Who", "", &actor_cell),
        Column(
            "From",
            "",
            &|e| html! { (e.address.as_deref().unwrap_or("—")) },
        ),
        Column("Action", "", &|e| html! { code { (e.action) } }),
    ];
    if listing == Listing::AnyObject {
        columns.push(Column("Object", "", &object_cell));
    }
    columns.push(Column("Before", "json", &|e| {
        json_cell(e.before.as_deref())
    }));
    columns.push(Column("After", "json", &|e| json_cell(e.after.as_deref())));
    list(entries, &columns, empty)
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
}
