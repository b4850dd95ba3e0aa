//! The admin audit log: every change made through the panel or the command
//! line, newest first, filtered, and exported as CSV with the same filters.

use entity::admin_audit_entry;

use super::{csv_export, form::parse_day_range, prelude::*};
use crate::service::admin_audit::{self, AuditFilter};

pub fn routes(route: Route) -> Route {
    route
        .at("/audit-log", get(list))
        .at("/audit-log.csv", get(export))
}

/// Entries a page shows at most.
const PAGE_SIZE: u64 = 200;
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

/// The filters, as the form and the query string name them.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct Filters {
    actor: String,
    action: String,
    object_kind: String,
    object_id: String,
    from: String,
    to: String,
}

impl Filters {
    /// The filter the query string asks for, or what is wrong with it.
    fn read(&self) -> Result<AuditFilter, FieldErrors> {
        let mut errors = FieldErrors::default();
        let text = checked(|_| true, "");
        let action = checked(
            is_action,
            "an action such as token.create, or an object kind such as token",
        );
        let kind = checked(is_word, "an object kind such as token, project or order");
        let filter = AuditFilter {
            actor: errors.check("actor", &self.actor, &text),
            action: errors.check("action", &self.action, action),
            object_kind: errors.check("object_kind", &self.object_kind, kind),
            object_id: errors.check("object_id", &self.object_id, &text),
            ..AuditFilter::default()
        };
        let (from, until) = parse_day_range((&self.from, &self.to), &mut errors);
        errors.or(AuditFilter {
            from,
            until,
            ..filter
        })
    }
}

fn list_page(
    admin: &SignedIn,
    query: &PageQuery<Filters>,
    errors: &FieldErrors,
    entries: &Listed<admin_audit_entry::Model>,
) -> Markup {
    let f = &query.filters;
    let field = |label: &str, name: &str, value: &str, placeholder: &'static str| {
        let attrs = FieldAttrs::OPTIONAL.placeholder(placeholder);
        c::text_field(label, name, value, errors, attrs)
    };
    page::frame(
        admin,
        "Audit log",
        html! {
            p.muted {
                "Every change made through the panel or the command line, written with the change itself. Secrets are never recorded."
            }
            (c::filter_bar("/audit-log", Some((&f.from, &f.to)), errors, html! {
                (field("Who", "actor", &f.actor, "name, or command line"))
                (field("Action", "action", &f.action, "token or token.create"))
                (field("Object kind", "object_kind", &f.object_kind, "token"))
                (field("Object id", "object_id", &f.object_id, "42"))
            }))
            @if errors.is_empty() {
                (c::export_link("/audit-log.csv", query))
                (c::entries_count(query, entries, PAGE_SIZE))
                (c::audit_table(&entries.rows, Listing::AnyObject, "No entry matches."))
                (c::paging("/audit-log", query, entries.older))
            }
        },
    )
}

#[handler]
async fn list(admin: SignedIn, query: PageQuery<Filters>) -> Answer {
    let filter = query.filters.read();
    let db = &admin.state.db;
    let entries = query.rows(PAGE_SIZE, &filter, |f, page| admin_audit::page(db, f, page));
    let entries = entries.await?;
    let markup = list_page(&admin, &query, FieldErrors::of_read(&filter), &entries);
    Ok(page::ok_unless(filter.is_err(), markup))
}

/// The columns of the export, one row per entry.
const CSV_COLUMNS: csv_export::Columns<admin_audit_entry::Model> = &[
    ("id", |e| e.id.to_string()),
    ("at", |e| csv_export::moment(e.at)),
    ("actor", |e| e.actor.clone()),
    ("address", |e| e.address.clone().unwrap_or_default()),
    ("action", |e| e.action.clone()),
    ("object_kind", |e| e.object_kind.clone()),
    ("object_id", |e| e.object_id.clone()),
    ("before", |e| e.before.clone().unwrap_or_default()),
    ("after", |e| e.after.clone().unwrap_or_default()),
];

#[handler]
async fn export(admin: SignedIn, query: PageQuery<Filters>) -> Answer {
    Ok(csv_export::attachment(
        ("masterpay-audit-log.csv", CSV_COLUMNS),
        (&admin.state.db, query.filters.read()),
        |db, filter, page| async move { admin_audit::page(&db, &filter, page).await },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_filters_are_named() {
        let read = |query: &str| serde_html_form::from_str::<Filters>(query).unwrap().read();
        let filter = read("action=token&from=2026-11-01").unwrap();
        assert_eq!(filter.action.as_deref(), Some("token"));
        assert!(filter.from.is_some() && filter.until.is_none());
        let errors =
            read("action=token%25&object_kind=a+b&from=2026-13-01&to=yesterday").unwrap_err();
        for name in ["action", "object_kind", "from", "to"] {
            assert!(errors.of(name).is_some(), "{name}");
        }
    }
}
