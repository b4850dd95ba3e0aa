//! What every page shares: the frame (header, navigation with the current
//! page marked, sign-out, what the last change did, the summary of a
//! refused form), the one format for dates and money, form fields with
//! their errors next to them, a list's filters and paging links, and the
//! panel's stylesheet and script.

use chrono::{DateTime, Utc};
use entity::operation_log::LogKind;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use poem::{
    Response, handler,
    http::{StatusCode, header},
};

use super::{PanelError, session::SignedIn};
use crate::service::keyset::Keyset;

const STYLESHEET: &str = include_str!("assets/panel.css");
const SCRIPT: &str = include_str!("assets/panel.js");

#[handler]
pub fn stylesheet() -> Response {
    asset(STYLESHEET, "text/css; charset=utf-8")
}

#[handler]
pub fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
}

fn head(title: &str) -> Markup {
    html! {
        meta charset="utf-8";
        meta name="viewport" content="width=device-width, initial-scale=1";
        title { (title) " · masterpay" }
        link rel="stylesheet" href="/assets/panel.css";
        script src="/assets/panel.js" defer {}
    }
}

/// The navigation's links, each with the paths of the pages it leads to
/// (its link is marked on them).
const NAVIGATION: [(&str, &str, &[&str]); 6] = [
    ("/", "Overview", &[]),
    (
        "/projects",
        "Projects",
        &["/projects/", "/tokens/", "/users/"],
    ),
    ("/orders", "Orders", &["/orders/"]),
    ("/ledger", "Ledger", &["/ledger/"]),
    ("/audit-log", "Audit log", &["/audit-log/"]),
    ("/admins", "Administrators", &["/admins/"]),
];

/// `aria-current` of a link to `href` on the page at `path`: `page` on its
/// own page, `true` on the pages under it.
fn current(path: &str, href: &str, under: &[&str]) -> Option<&'static str> {
    if path == href {
        Some("page")
    } else if under.iter().any(|prefix| path.starts_with(prefix)) {
        Some("true")
    } else {
        None
    }
}

/// A page of a signed-in administrator.
pub fn frame(admin: &SignedIn, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title)) }
            body {
                header {
                    a.brand href="/" { "masterpay" }
                    nav {
                        @for (href, label, under) in NAVIGATION {
                            a href=(href) aria-current=[current(&admin.path, href, under)] { (label) }
                        }
                    }
                    form.sign-out method="post" action="/sign-out" {
                        (csrf(admin))
                        a.who href="/account" aria-current=[current(&admin.path, "/account", &[])] { (admin.name()) }
                        button type="submit" { "Sign out" }
                    }
                }
                main {
                    h1 { (title) }
                    (flash(admin.flash.as_deref()))
                    (error_summary(&body))
                    (body)
                }
            }
        }
    }
}

/// What the last change did, said once at the top of the page.
pub fn flash(message: Option<&str>) -> Markup {
    html! {
        @if let Some(message) = message {
            p.notice role="status" { (message) }
        }
    }
}

/// How [`FieldErrors::show`] opens a field's error message.
const FIELD_ERROR: &str = r#"<p class="field-error" id=""#;

/// The top of a page whose form was refused: its field errors, each a link
/// to its field (or, for an error of the whole form, to the message). They
/// are read from the page's own markup, where [`FieldErrors::show`] put
/// them, so that every form gets the summary without handing its errors
/// over twice.
fn error_summary(body: &Markup) -> Markup {
    let html = body.0.as_str();
    let errors: Vec<(&str, &str)> = html
        .split(FIELD_ERROR)
        .skip(1)
        .filter_map(|rest| {
            let (id, rest) = rest.split_once('"')?;
            let message = rest.split_once('>')?.1.split_once("</p>")?.0;
            Some((id.strip_suffix("-error")?, message))
        })
        .collect();
    let plural = if errors.len() == 1 { "" } else { "s" };
    html! {
        @if !errors.is_empty() {
            div.error-summary role="alert" {
                h2 { "Nothing was changed: " (errors.len()) " problem" (plural) }
                ul {
                    @for (field, message) in &errors {
                        // The message is the page's markup, escaped already.
                        @if html.contains(&format!(r#" id="{field}""#)) {
                            li { a href={ "#" (field) } { (field_label(field)) ": " (PreEscaped(*message)) } }
                        } @else {
                            li { a href={ "#" (field) "-error" } { (PreEscaped(*message)) } }
                        }
                    }
                }
            }
        }
    }
}

/// A field's name as a reader says it: `confirm_name`, "Confirm name".
fn field_label(field: &str) -> String {
    let words = field.replace('_', " ");
    let mut chars = words.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// A page without the navigation (sign-in, errors).
pub fn bare(status: StatusCode, title: &str, text: &str) -> Response {
    let markup = bare_markup(
        title,
        html! {
            p { (text) }
            p { a href="/" { "Back to the panel" } }
        },
    );
    render(status, markup)
}

pub fn bare_markup(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title)) }
            body.bare {
                main {
                    h1 { (title) }
                    (error_summary(&body))
                    (body)
                }
            }
        }
    }
}

/// An HTML answer.
pub fn render(status: StatusCode, markup: Markup) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .body(markup.into_string())
}

pub fn ok(markup: Markup) -> Response {
    render(StatusCode::OK, markup)
}

/// A form sent back with errors: nothing was changed.
pub fn invalid(markup: Markup) -> Response {
    render(StatusCode::UNPROCESSABLE_ENTITY, markup)
}

/// POST-redirect-GET after a change: off to `to`, whose page says
/// `message`, what was done ("Token 12 disabled.").
pub fn done(admin: &SignedIn, to: &str, message: &str) -> Response {
    admin.tell(message);
    redirect(to)
}

/// Where the browser goes (after a change, [`done`]).
pub fn redirect(to: &str) -> Response {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, to)
        .finish()
}

/// The hidden CSRF field every form carries.
pub fn csrf(admin: &SignedIn) -> Markup {
    csrf_field(&admin.csrf)
}

pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// The one format of a moment: `2026-11-25 21:07:45 UTC`.
pub fn when(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub fn when_or(at: Option<&DateTime<Utc>>, none: &str) -> String {
    at.map_or_else(|| none.to_owned(), when)
}

/// Field errors of a form, by field name.
#[derive(Debug, Default)]
pub struct FieldErrors(Vec<(&'static str, String)>);

impl FieldErrors {
    pub fn add(&mut self, field: &'static str, message: impl Into<String>) {
        self.0.push((field, message.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn of(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| *name == field)
            .map(|(_, message)| message.as_str())
    }

    /// The message next to a field, when it has one (the page's summary
    /// lists it too, see [`error_summary`]).
    pub fn show(&self, field: &str) -> Markup {
        html! {
            @if let Some(message) = self.of(field) {
                p.field-error id={ (field) "-error" } { (message) }
            }
        }
    }

    /// The `id` of a field's input when it has an error: where the
    /// summary's link goes. Those of correct fields are left out, so that
    /// two forms of a page may have fields of the same name.
    pub fn id<'a>(&self, field: &'a str) -> Option<&'a str> {
        self.of(field).map(|_| field)
    }

    /// The `aria-invalid` of a field's input.
    pub fn invalid(&self, field: &str) -> Option<&'static str> {
        self.of(field).map(|_| "true")
    }

    /// The `aria-describedby` of a field's input: its error message.
    pub fn described_by(&self, field: &str) -> Option<String> {
        self.of(field).map(|_| format!("{field}-error"))
    }
}

/// A labelled text input with its value and error.
pub fn text_field(
    label: &str,
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
                id=[errors.id(name)] aria-invalid=[errors.invalid(name)]
                aria-describedby=[errors.described_by(name)];
            (errors.show(name))
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct FieldAttrs {
    pub kind: &'static str,
    pub required: bool,
    pub placeholder: Option<&'static str>,
}

impl FieldAttrs {
    pub const TEXT: FieldAttrs = FieldAttrs {
        kind: "text",
        required: true,
        placeholder: None,
    };
    pub const OPTIONAL: FieldAttrs = FieldAttrs {
        kind: "text",
        required: false,
        placeholder: None,
    };
    /// A day filter (`YYYY-MM-DD`, see [`parse_day`]).
    pub const DATE: FieldAttrs = FieldAttrs {
        kind: "date",
        required: false,
        placeholder: None,
    };
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

/// What kind of balance change an operation-log entry is.
pub fn kind_label(kind: LogKind) -> &'static str {
    match kind {
        LogKind::OrderCredit => "order credit",
        LogKind::BalanceSet => "balance set",
    }
}

/// A list page's filters: the query string's parameters, read trimmed.
/// Every value is text, so that a bad one gets its error next to its field
/// instead of a bare 400.
#[derive(Debug, Default)]
pub struct Params(Vec<(String, String)>);

impl Params {
    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Params {
        Params(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    /// The trimmed value of `name`; empty when it is missing.
    pub fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map_or("", |(_, value)| value.trim())
    }

    /// A query string (`?a=1&b=2`, or empty) carrying the non-blank values
    /// of `names`, for links that keep the filters.
    pub fn query(&self, names: &[&str]) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for name in names {
            let value = self.get(name);
            if !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        let query = query.finish();
        if query.is_empty() {
            query
        } else {
            format!("?{query}")
        }
    }

    /// The page of a list that `before` asks for (the newest when it is
    /// blank), of `size` rows. Only an "older" link sends `before`, so a
    /// value that is not a row id is a bad request, not a field's error.
    pub fn page(&self, size: u64) -> Result<Keyset, PanelError> {
        let before = match self.get("before") {
            "" => None,
            text => Some(text.parse::<i64>().ok().filter(|id| *id > 0).ok_or(
                PanelError::BadRequest("The page asked for is not a row id."),
            )?),
        };
        Ok(Keyset { before, size })
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

/// The links under a list of `path`: back to the newest page from an older
/// one, and on to the `older` page when there is one; both keep the
/// filters `keep` of `params`.
pub fn paging(path: &str, params: &Params, keep: &[&str], older: Option<i64>) -> Markup {
    let filters = params.query(keep);
    let paged = !params.get("before").is_empty();
    let older = older.map(|before| {
        let and = if filters.is_empty() { '?' } else { '&' };
        format!("{path}{filters}{and}before={before}")
    });
    html! {
        @if paged || older.is_some() {
            nav.paging {
                @if paged { a href={ (path) (filters) } { "← newest" } }
                @if let Some(href) = older { a href=(href) { "older →" } }
            }
        }
    }
}

impl<'a> poem::FromRequest<'a> for Params {
    async fn from_request(
        req: &'a poem::Request,
        _body: &mut poem::RequestBody,
    ) -> poem::Result<Self> {
        let pairs = req
            .uri()
            .query()
            .map(|query| {
                form_urlencoded::parse(query.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(Params(pairs))
    }
}

/// A day filter, `YYYY-MM-DD`, as the start of that day in UTC; blank is
/// none.
pub fn parse_day(text: &str) -> Result<Option<DateTime<Utc>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let shaped = text.len() == 10
        && text.bytes().enumerate().all(|(at, b)| match at {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    shaped
        .then(|| chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
        .map(|day| Some(day.and_time(chrono::NaiveTime::MIN).and_utc()))
        .ok_or_else(|| "not a date: write it as YYYY-MM-DD, such as 2026-11-25".to_owned())
}

/// The `from` and `to` day filters of a list, both days included, as the
/// moments `[from, until)`: from the start of `from`'s UTC day to the
/// start of the day after `to`. Errors go next to the fields `from` and
/// `to`.
pub fn parse_day_range(
    from: &str,
    to: &str,
    errors: &mut FieldErrors,
) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let start = parse_day(from).unwrap_or_else(|message| {
        errors.add("from", message);
        None
    });
    let last = parse_day(to).unwrap_or_else(|message| {
        errors.add("to", message);
        None
    });
    if let (Some(start), Some(last)) = (start, last)
        && last < start
    {
        errors.add("to", "must not be before the first day");
    }
    (start, last.map(|day| day + chrono::Days::new(1)))
}
