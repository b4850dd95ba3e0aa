//! The signed-in administrator's own account: their session, and a new
//! password (after a sign-in link, the way back from a lost one).

use maud::{Markup, html};
use poem::{Response, Route, get, handler, post, web::Data};

use super::{
    PanelError, PanelState,
    page::{self, FieldErrors},
    session::{PostForm, SignedIn},
};
use crate::service::{
    AdminError,
    admins::{self, Password},
};

pub fn routes(route: Route) -> Route {
    route
        .at("/account", get(show))
        .at("/account/password", post(change_password))
}

fn account_page(admin: &SignedIn, changed: bool, errors: &FieldErrors) -> Markup {
    page::frame(
        admin,
        "Your account",
        html! {
            @if changed {
                p.notice { "Your password was changed; your other sessions were ended." }
            }
            p { "Signed in as " strong { (admin.name()) } " until "
                (page::when(&admin.session.expires_at)) " (sessions last 8 hours)." }
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
                                aria-invalid=[errors.of("current_password").map(|_| "true")];
                            (errors.show("current_password"))
                        }
                    }
                    label.field {
                        span { "New password (at least 12 characters)" }
                        input type="password" name="password" required autocomplete="new-password"
                            aria-invalid=[errors.of("password").map(|_| "true")];
                        (errors.show("password"))
                    }
                    label.field {
                        span { "The new password again" }
                        input type="password" name="password_again" required autocomplete="new-password"
                            aria-invalid=[errors.of("password_again").map(|_| "true")];
                        (errors.show("password_again"))
                    }
                    button type="submit" { "Change password" }
                }
            }
        },
    )
}

#[handler]
async fn show(admin: SignedIn, req: &poem::Request) -> Response {
    let changed = req.uri().query() == Some("changed");
    page::ok(account_page(&admin, changed, &FieldErrors::default()))
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
        return Ok(page::invalid(account_page(&admin, false, &errors)));
    };
    admins::set_password(
        &state.db,
        &admin.actor(),
        admin.session.administrator.id,
        password,
        Some(&admin.cookie_hash),
    )
    .await?;
    Ok(page::redirect("/account?changed"))
}
