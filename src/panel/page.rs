//! What every answer shares: the frame (header, navigation with the current
//! page marked, sign-out, what the last change did, the summary of a
//! refused form), the HTML answers and redirects, and the panel's
//! stylesheet and script.

use maud::{DOCTYPE, Markup, PreEscaped, html};
use poem::{
    Response, handler,
    http::{StatusCode, header},
};

use super::session::SignedIn;

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

/// The navigation's links, each with the paths of the pages it leads to
/// (its link is marked on them).
const NAVIGATION: [(&str, &str, &[&str]); 6] = [
    ("/", "Overview", &[]),
    (
        "/projects",
        "Projects",
        &[
            "/projects/",
            "/tokens/",
            "/users/",
            "/webhooks/",
            "/events/",
        ],
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
    let header = html! {
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
    };
    document(
        title,
        Some(header),
        html! { (flash(admin.flash.as_deref())) (body) },
    )
}

/// A page without the navigation (sign-in, errors).
pub fn bare_markup(title: &str, body: Markup) -> Markup {
    document(title, None, body)
}

/// A whole page: its `header` (none: a bare page), then `title` and the
/// `body` under the summary of its refused form.
fn document(title: &str, header: Option<Markup>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · masterpay" }
                link rel="stylesheet" href="/assets/panel.css";
                script src="/assets/panel.js" defer {}
            }
            body class=[header.is_none().then_some("bare")] {
                @if let Some(header) = header { header { (header) } }
                main {
                    h1 { (title) }
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

/// How `FieldErrors::show` opens a field's error message.
const FIELD_ERROR: &str = r#"<p class="field-error" id=""#;

/// The top of a page whose form was refused: its field errors, each a link
/// to its field (or, for an error of the whole form, to the message). They
/// are read from the page's own markup, where `FieldErrors::show` put
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

/// Where the browser goes (after a change, `SignedIn::done`).
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

/// A page as asked for (200), or with what was refused in it (422).
pub fn ok_unless(refused: bool, markup: Markup) -> Response {
    if refused { invalid(markup) } else { ok(markup) }
}
