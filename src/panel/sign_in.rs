//! Signing in (by password, or by a single-use link) and out.

use maud::html;
use poem::{
    Request, Response, handler,
    http::{StatusCode, header},
    web::{Data, Path},
};

use serde::Deserialize;

use super::{
    Answer, PanelState,
    components::{self as c, FieldAttrs},
    form::{FieldErrors, PageQuery},
    page,
    session::{
        PostForm, Visitor, client_address, cookie_name, next_page, session_cookie, set_cookie,
        set_flash, sign_in_cookie_name, signed_out, take_flash,
    },
};
use crate::service::admin_sessions::{self, SESSION_LIFETIME, Secret, SignInError};

/// The answer with the visitor's cookie set when it is new.
fn with_visitor_cookie(
    req: &Request,
    response: Response,
    visitor: &Visitor,
    state: &PanelState,
) -> Response {
    if visitor.fresh {
        let name = sign_in_cookie_name(state.cookie_secure);
        let cookie = (name, visitor.cookie.expose());
        set_cookie(req.cookie(), cookie, state.cookie_secure, None);
    }
    response
}

/// Signed in: the new session's cookie replaces the browser's, whose
/// session (if it had one) ends; on to the page `next`, or the overview.
async fn signed_in(
    req: &Request,
    secret: &Secret,
    state: &PanelState,
    next: Option<&str>,
) -> Answer {
    if let Some(previous) = session_cookie(req, state) {
        admin_sessions::sign_out(&state.db, &previous).await?;
    }
    let cookie = (cookie_name(state.cookie_secure), secret.expose());
    let lifetime = Some(SESSION_LIFETIME.num_seconds());
    set_cookie(req.cookie(), cookie, state.cookie_secure, lifetime);
    set_flash(req.cookie(), state.cookie_secure, "Signed in.");
    Ok(page::redirect(next.unwrap_or("/")))
}

fn sign_in_page(
    status: StatusCode,
    csrf: &str,
    (name, next, flash): (&str, Option<&str>, Option<&str>),
    errors: &FieldErrors,
) -> Response {
    page::render(
        status,
        page::bare_markup(
            "Sign in",
            html! {
                (page::flash(flash))
                form method="post" action="/sign-in" {
                    (page::csrf_field(csrf))
                    @if let Some(next) = next { input type="hidden" name="next" value=(next); }
                    (errors.show("form"))
                    (c::text_field("Name", "name", name, errors, FieldAttrs::TEXT))
                    (c::text_field("Password", "password", "", errors, FieldAttrs::password("current-password")))
                    button type="submit" { "Sign in" }
                }
                p.muted { "Signed in already? A link from another site opens this page; "
                    a href="/" { "go to the overview" } "." }
                p.muted { "No password yet, or forgotten? Ask for a sign-in link: "
                    code { "masterpay admin login-link --name NAME" } }
            },
        ),
    )
}

#[handler]
pub async fn show(req: &Request, query: PageQuery<NextQuery>, state: Data<&PanelState>) -> Answer {
    let next = next_page(&query.filters.next);
    if let Some(cookie) = session_cookie(req, &state)
        && admin_sessions::session(&state.db, &cookie).await?.is_some()
    {
        return Ok(page::redirect(next.unwrap_or("/")));
    }
    let visitor = Visitor::of(req, &state);
    let flash = take_flash(req, state.cookie_secure);
    let response = sign_in_page(
        StatusCode::OK,
        &visitor.csrf(),
        ("", next, flash.as_deref()),
        &FieldErrors::default(),
    );
    Ok(with_visitor_cookie(req, response, &visitor, &state))
}

/// The sign-in page's query: the page to go on to (see [`next_page`]).
#[derive(Default, Deserialize)]
#[serde(default)]
pub struct NextQuery {
    next: String,
}

/// The sign-in form; the password as typed.
#[derive(Default, Deserialize)]
#[serde(default)]
pub struct SignInForm {
    name: String,
    password: String,
    /// The page to go on to (see [`next_page`]).
    next: String,
}

#[handler]
pub async fn submit(
    req: &Request,
    PostForm(form): PostForm<SignInForm>,
    state: Data<&PanelState>,
) -> Answer {
    let visitor = Visitor::of(req, &state);
    let name = form.name.as_str();
    let next = next_page(&form.next);
    let mut errors = FieldErrors::default();
    let mut retry_after = None;
    let status = match admin_sessions::sign_in(
        &state.db,
        name,
        &form.password,
        &client_address(req, &state),
    )
    .await
    {
        Ok((secret, _)) => {
            state.metrics.record_panel_sign_in("signed_in");
            return signed_in(req, &secret, &state, next).await;
        }
        Err(SignInError::Db(err)) => return Err(err.into()),
        Err(
            err @ SignInError::RateLimited {
                retry_after: seconds,
            },
        ) => {
            state.metrics.record_panel_sign_in("rate_limited");
            retry_after = Some(seconds);
            errors.add("form", format!("{err}. Sign-in is paused after {} failures in {} minutes, for the name and for the address.",
                admin_sessions::MAX_FAILURES, admin_sessions::FAILURE_WINDOW.num_minutes()));
            StatusCode::TOO_MANY_REQUESTS
        }
        Err(err @ SignInError::Refused) => {
            state.metrics.record_panel_sign_in("refused");
            errors.add("form", err.to_string());
            StatusCode::UNAUTHORIZED
        }
    };
    let mut response = sign_in_page(status, &visitor.csrf(), (name, next, None), &errors);
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
    }
    Ok(response)
}

fn link_gone() -> Response {
    page::bare(
        StatusCode::GONE,
        "This sign-in link cannot be used",
        "It was used already, it has expired (links last 15 minutes), or its administrator is disabled. Ask for a new one.",
    )
}

#[handler]
pub async fn link_form(
    req: &Request,
    Path(secret): Path<String>,
    state: Data<&PanelState>,
) -> Answer {
    let link = Secret::from_client(&secret);
    let Some(admin) = admin_sessions::login_link_administrator(&state.db, &link).await? else {
        return Ok(link_gone());
    };
    let visitor = Visitor::of(req, &state);
    let response = page::ok(page::bare_markup(
        "Sign in with a link",
        html! {
            p { "This link signs you in as " strong { (admin.name) } ", once." }
            form method="post" action="/sign-in/link" {
                (page::csrf_field(&visitor.csrf()))
                input type="hidden" name="link" value=(secret);
                button type="submit" { "Sign in as " (admin.name) }
            }
        },
    ));
    Ok(with_visitor_cookie(req, response, &visitor, &state))
}

/// The form a sign-in link's page posts: the link's secret.
#[derive(Default, Deserialize)]
#[serde(default)]
pub struct LinkForm {
    link: String,
}

#[handler]
pub async fn link_submit(
    req: &Request,
    PostForm(form): PostForm<LinkForm>,
    state: Data<&PanelState>,
) -> Answer {
    let link = Secret::from_client(&form.link);
    match admin_sessions::redeem_login_link(&state.db, &link, &client_address(req, &state)).await? {
        Some((secret, _)) => {
            state.metrics.record_panel_sign_in("link_used");
            signed_in(req, &secret, &state, None).await
        }
        None => {
            state.metrics.record_panel_sign_in("link_refused");
            Ok(link_gone())
        }
    }
}

#[handler]
pub async fn sign_out(req: &Request, _form: PostForm, state: Data<&PanelState>) -> Answer {
    if let Some(cookie) = session_cookie(req, &state) {
        admin_sessions::sign_out(&state.db, &cookie).await?;
    }
    Ok(signed_out(req, &state, "Signed out."))
}
