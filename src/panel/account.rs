//! The signed-in administrator's own account: their sessions (every
//! browser they are signed in with, which they can all sign out at once),
//! and a new password (after a sign-in link, the way back from a lost one).

use entity::admin_session;
use maud::{Markup, html};
use poem::{Response, Route, get, handler, post, web::Data};

use super::{
    PanelError, PanelState,
    page::{self, FieldErrors},
    session::{PostForm, SignedIn},
    sign_in::signed_out,
};
use crate::service::{
    AdminError, admin_sessions,
    admins::{self, Password},
};

pub fn routes(route: Route) -> Route {
    route
        .at("/account", get(show))
        .at("/account/password", post(change_password))
        .at("/account/sign-out-everywhere", post(sign_out_everywhere))
}

fn account_page(
    admin: &SignedIn,
    sessions: &[admin_session::Model],
    errors: &FieldErrors,
) -> Markup {
    page::frame(
        admin,
        "Your account",
        html! {
            p { "Signed in as " strong { (admin.name()) } " until "
                (page::when(&admin.session.expires_at)) " (sessions last 8 hours)." }
            section {
                h2 { "Your sessions" }
                div.table-wrap { table {
                    thead { tr { th { "Signed in" } th { "Last seen" } th { "From" } th {} } }
                    tbody {
                        @for s in sessions {
                            tr {
                                td.when { (page::when(&s.created_at)) @if s.by_link { " " span.muted { "(link)" } } }
                                td.when { (page::when_or(s.last_seen_at.as_ref(), "not yet")) }
                                td { (s.address.as_deref().unwrap_or("unknown")) }
                                td { @if s.session_hash == admin.cookie_hash { (page::badge("this session", "ok")) } }
                            }
                        }
                    }
                } }
                form method="post" action="/account/sign-out-everywhere"
                    data-confirm="Sign out every browser, this one included?" {
                    (page::csrf(admin))
                    button.danger type="submit" { "Sign out everywhere" }
                }
            }
            section {
                h2 { "New password" }
                form method="post" action="/account/password" {
                    (page::csrf(admin))
                    @if admin.session.may_skip_current_password() {
                        p.muted { "Signed in with a sign-in link: set a new password without the current one (for 15 minutes after the sign-in)." }
                    } @else {
                        label.field {
                            span { "Current password" }
                            input type="password" name="current_password" required autocomplete="current-password"
                                id=[errors.id("current_password")] aria-invalid=[errors.invalid("current_password")] aria-describedby=[errors.described_by("current_password")];
                            (errors.show("current_password"))
                        }
                    }
                    label.field {
                        span { "New password (at least 12 characters)" }
                        input type="password" name="password" required autocomplete="new-password"
                            id=[errors.id("password")] aria-invalid=[errors.invalid("password")] aria-describedby=[errors.described_by("password")];
                        (errors.show("password"))
                    }
                    label.field {
                        span { "The new password again" }
                        input type="password" name="password_again" required autocomplete="new-password"
                            id=[errors.id("password_again")] aria-invalid=[errors.invalid("password_again")] aria-describedby=[errors.described_by("password_again")];
                        (errors.show("password_again"))
                    }
                    button type="submit" { "Change password" }
                }
            }
        },
    )
}

#[handler]
async fn show(admin: SignedIn, state: Data<&PanelState>) -> Result<Response, PanelError> {
    let sessions = admin_sessions::sessions_of(&state.db, admin.session.administrator.id).await?;
    Ok(page::ok(account_page(
        &admin,
        &sessions,
        &FieldErrors::default(),
    )))
}

#[handler]
async fn sign_out_everywhere(
    admin: SignedIn,
    req: &poem::Request,
    _form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let id = admin.session.administrator.id;
    let ended = admin_sessions::sign_out_everywhere(&state.db, &admin.actor(), id).await?;
    let message = match ended {
        1 => "Signed out everywhere: 1 session ended.".to_owned(),
        n => format!("Signed out everywhere: {n} sessions ended."),
    };
    Ok(signed_out(req, &state, &message))
}

#[handler]
async fn change_password(
    admin: SignedIn,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let mut errors = FieldErrors::default();
    // Taken as typed: spaces at either end are part of a password.
    if !admin.session.may_skip_current_password()
        && admins::verify(&state.db, admin.name(), form.raw("current_password"))
            .await?
            .is_none()
    {
        errors.add("current_password", "this is not your current password");
    }
    let typed = form.raw("password");
    if typed != form.raw("password_again") {
        errors.add("password_again", "the two passwords differ");
    }
    let password = match Password::new(typed.to_owned()) {
        Ok(password) => Some(password),
        Err(AdminError::Invalid(field, message)) => {
            errors.add(field, message);
            None
        }
        Err(err) => return Err(err.into()),
    };
    let Some(password) = password.filter(|_| errors.is_empty()) else {
        let sessions =
            admin_sessions::sessions_of(&state.db, admin.session.administrator.id).await?;
        return Ok(page::invalid(account_page(&admin, &sessions, &errors)));
    };
    admins::set_password(
        &state.db,
        &admin.actor(),
        admin.session.administrator.id,
        password,
        Some(&admin.cookie_hash),
    )
    .await?;
    let message = "Your password was changed; your other sessions were ended.";
    Ok(page::done(&admin, "/account", message))
}
