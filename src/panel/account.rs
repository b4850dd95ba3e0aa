//! The signed-in administrator's own account: their sessions (every
//! browser they are signed in with, which they can all sign out at once),
//! and a new password (after a sign-in link, the way back from a lost one).

use entity::admin_session;

use super::{prelude::*, session::signed_out};
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
                (c::when(&admin.session.expires_at)) " (sessions last 8 hours)." }
            section {
                h2 { "Your sessions" }
                (c::list(sessions, &[
                    Column("Signed in", "when", &|s| html! {
                        (c::when(&s.created_at)) @if s.by_link { " " span.muted { "(link)" } }
                    }),
                    Column("Last seen", "when", &|s| html! { (c::when_or(s.last_seen_at.as_ref(), "not yet")) }),
                    Column("From", "", &|s| html! { (s.address.as_deref().unwrap_or("unknown")) }),
                    Column("", "", &|s| html! {
                        @if s.session_hash == admin.cookie_hash { (c::badge("this session", "ok")) }
                    }),
                ], "No session."))
                @let confirm = "Sign out every browser, this one included?";
                (c::post_form(admin, "/account/sign-out-everywhere", Some(confirm), html! {
                    button.danger type="submit" { "Sign out everywhere" }
                }))
            }
            (c::form_section(admin, ("New password", "/account/password"), html! {
                @if admin.session.may_skip_current_password() {
                    p.muted { "Signed in with a sign-in link: set a new password without the current one (for 15 minutes after the sign-in)." }
                } @else {
                    (c::text_field("Current password", "current_password", "", errors, FieldAttrs::password("current-password")))
                }
                (c::text_field("New password (at least 12 characters)", "password", "", errors, FieldAttrs::password("new-password")))
                (c::text_field("The new password again", "password_again", "", errors, FieldAttrs::password("new-password")))
                button type="submit" { "Change password" }
            }))
        },
    )
}

#[handler]
async fn show(admin: SignedIn) -> Answer {
    let sessions =
        admin_sessions::sessions_of(&admin.state.db, admin.session.administrator.id).await?;
    Ok(page::ok(account_page(
        &admin,
        &sessions,
        &FieldErrors::default(),
    )))
}

#[handler]
async fn sign_out_everywhere(admin: SignedIn, req: &poem::Request, _form: PostForm) -> Answer {
    let id = admin.session.administrator.id;
    let ended = admin_sessions::sign_out_everywhere(&admin.state.db, &admin.actor(), id).await?;
    let message = match ended {
        1 => "Signed out everywhere: 1 session ended.".to_owned(),
        n => format!("Signed out everywhere: {n} sessions ended."),
    };
    Ok(signed_out(req, &admin.state, &message))
}

/// The new-password form, read as typed: spaces at either end are part of
/// a password.
#[derive(Default, Deserialize)]
#[serde(default)]
struct PasswordForm {
    current_password: String,
    password: String,
    password_again: String,
}

#[handler]
async fn change_password(admin: SignedIn, PostForm(form): PostForm<PasswordForm>) -> Answer {
    let mut errors = FieldErrors::default();
    if !admin.session.may_skip_current_password()
        && admins::verify(&admin.state.db, admin.name(), &form.current_password)
            .await?
            .is_none()
    {
        errors.add("current_password", "this is not your current password");
    }
    if form.password != form.password_again {
        errors.add("password_again", "the two passwords differ");
    }
    let password = match Password::new(form.password) {
        Ok(password) => Some(password),
        Err(AdminError::Invalid(field, message)) => {
            errors.add(field, message);
            None
        }
        Err(err) => return Err(err.into()),
    };
    let Some(password) = password.filter(|_| errors.is_empty()) else {
        let sessions =
            admin_sessions::sessions_of(&admin.state.db, admin.session.administrator.id).await?;
        return Ok(page::invalid(account_page(&admin, &sessions, &errors)));
    };
    admins::set_password(
        &admin.state.db,
        &admin.actor(),
        admin.session.administrator.id,
        password,
        Some(&admin.cookie_hash),
    )
    .await?;
    let message = "Your password was changed; your other sessions were ended.";
    admin.done("/account", message)
}
