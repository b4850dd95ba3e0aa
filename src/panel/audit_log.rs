//! The admin audit log: every change made through the panel or the command
//! line, newest first, filtered, and exported as CSV with the same filters.

use entity::admin_audit_entry;
use maud::{Markup, html};
use poem::{Route, get, handler};

use super::{
    Answer,
    components::{self as c, FieldAttrs, Listing},
    csv_export,
    form::{FieldErrors, Params, parse_day_range},
    page,
    session::SignedIn,
};
use crate::service::{
    admin_audit::{self, AuditFilter},
    keyset::Listed,
};

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

/// Whether `text` is an action (`token.create`) or an object kind.
fn is_action(text: &str) -> bool {
    match text.split_once('.') {
        Some((kind, verb)) => is_word(kind) && is_word(verb),
        None => is_word(text),
    }
}

/// A filter's text of at most [`MAX_FILTER_LEN`] characters, of which
/// `is` holds, else `rule`.
fn checked(is: fn(&str) -> bool, rule: &'static str) -> impl Fn(&str) -> Result<String, String> {
    move |text| match text.chars().count() {
        n if n > MAX_FILTER_LEN => Err(format!("must be at most {MAX_FILTER_LEN} characters")),
        _ if !is(text) => Err(rule.to_owned()),
        _ => Ok(text.to_owned()),
    }
}

/// The filter the query string asks for, or what is wrong with it.
fn parse_filter(params: &Params) -> Result<AuditFilter, FieldErrors> {
    let mut errors = FieldErrors::default();
    let text = checked(|_| true, "");
    let action = checked(
        is_action,
        "an action such as token.create, or an object kind such as token",
    );
    let kind = checked(is_word, "an object kind such as token, project or order");
    let filter = AuditFilter {
        actor: params.parsed("actor", &mut errors, &text),
        action: params.parsed("action", &mut errors, action),
        object_kind: params.parsed("object_kind", &mut errors, kind),
        object_id: params.parsed("object_id", &mut errors, &text),
        ..AuditFilter::default()
    };
    let (from, until) = parse_day_range(params, &mut errors);
    errors.or(AuditFilter {
        from,
        until,
        ..filter
    })
}

fn list_page(
    admin: &SignedIn,
    params: &Params,
    errors: &FieldErrors,
    entries: &Listed<admin_audit_entry::Model>,
) -> Markup {
    let field = |label: &str, name: &str, placeholder: &'static str| {
        let attrs = FieldAttrs::OPTIONAL.placeholder(placeholder);
        c::text_field(label, name, params.get(name), errors, attrs)
    };
    page::frame(
        admin,
        "Audit log",
        html! {
            p.muted {
                "Every change made through the panel or the command line, written with the change itself. Secrets are never recorded."
            }
            (c::filter_bar("/audit-log", params, errors, html! {
                (field("Who", "actor", "name, or command line"))
                (field("Action", "action", "token or token.create"))
                (field("Object kind", "object_kind", "token"))
                (field("Object id", "object_id", "42"))
            }))
            @if errors.is_empty() {
                (c::export_link("/audit-log.csv", params, &FILTERS))
                (c::entries_count(params, entries, PAGE_SIZE))
                (c::audit_table(&entries.rows, Listing::AnyObject, "No entry matches."))
                (c::paging("/audit-log", params, &FILTERS, entries.older))
            }
        },
    )
}

#[handler]
async fn list(admin: SignedIn, params: Params) -> Answer {
    let page = params.page(PAGE_SIZE)?;
    Ok(match parse_filter(&params) {
        Ok(filter) => {
            let entries = admin_audit::page(&admin.state.db, &filter, page).await?;
            page::ok(list_page(
                &admin,
                &params,
                &FieldErrors::default(),
                &entries,
            ))
        }
        Err(errors) => page::invalid(list_page(&admin, &params, &errors, &Listed::default())),
    })
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
async fn export(admin: SignedIn, params: Params) -> Answer {
    let filter = match parse_filter(&params) {
        Ok(filter) => filter,
        Err(errors) => return Ok(csv_export::refused(&errors, &FILTERS)),
    };
    let db = admin.state.db.clone();
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

    #[test]
    fn bad_filters_are_named() {
        let params = |pairs: &[(&str, &str)]| Params::from_pairs(pairs);
        let filter = parse_filter(&params(&[("action", "token"), ("from", "2026-11-01")])).unwrap();
        assert_eq!(filter.action.as_deref(), Some("token"));
        assert!(filter.from.is_some() && filter.until.is_none());
        let errors = parse_filter(&params(&[
            ("action", "token%"),
            ("object_kind", "a b"),
            ("from", "2026-13-01"),
            ("to", "yesterday"),
        ]))
        .unwrap_err();
        for name in ["action", "object_kind", "from", "to"] {
            assert!(errors.of(name).is_some(), "{name}");
        }
    }
}
