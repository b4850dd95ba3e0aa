//! The administrators: who may sign in to the panel. Invite one, disable,
//! enable.
//!
//! An invitation creates the administrator with a single-use sign-in link,
//! shown once: in the answer to the invitation (`no-store`, as every panel
//! answer), never in a cookie or a URL; the script then puts `/admins` in
//! the browser's history, so that a reload does not invite again. Signed
//! in by the link, the new administrator sets their own password on their
//! account page without a current one. The service refuses disabling
//! yourself or the last active administrator; its refusal is shown in the
//! row whose form asked.

use chrono::{DateTime, Utc};
use entity::administrator;
use poem::{Request, http::header};

use super::prelude::*;
use crate::service::{
    AdminError,
    admin_sessions::{self, LOGIN_LINK_LIFETIME},
    admins,
};

pub fn routes(route: Route) -> Route {
    route
        .at("/admins", poem::get(list).post(invite))
        .at("/admins/:id/active", post(set_active))
}

/// What the page shows besides the list.
#[derive(Default)]
struct Shown<'a> {
    /// The invitation just made: the name, the link and its end.
    invited: Option<(String, String, DateTime<Utc>)>,
    /// The invitation form's name and errors.
    name: &'a str,
    errors: FieldErrors,
    /// The administrator whose enable or disable was refused, and why.
    refused: Option<(i64, String)>,
}

fn admins_page(admin: &SignedIn, all: &[administrator::Model], shown: &Shown<'_>) -> Markup {
    let me = admin.session.administrator.id;
    page::frame(
        admin,
        "Administrators",
        html! {
            @if let Some((name, link, until)) = &shown.invited {
                (c::reveal("/admins", (html! { "Sign-in link for " (name) }, "invite-link", link), html! {
                    "It signs " (name) " in once, until " (c::when(until))
                    " (" (LOGIN_LINK_LIFETIME.num_minutes()) " minutes); then they set their password on their account page. Send it to them now: it is not shown again. "
                    code { "masterpay admin login-link --name NAME" } " makes another."
                }))
            }
            (c::list(all, &[
                Column("Name", "", &|a| html! { (a.name) @if a.id == me { " " (c::badge("you", "")) } }),
                Column("State", "", &|a| c::state_badge(a.active)),
                Column("Created", "when", &|a| html! { (c::when(&a.created_at)) }),
                Column("Last sign-in", "when", &|a| html! { (c::when_or(a.last_signed_in_at.as_ref(), "never")) }),
                Column("", "", &|a| html! {
                    @if a.id != me {
                        @let confirm = a.active.then(|| format!("Disable {}? Their sessions end at once.", a.name));
                        (c::post_form(admin, &format!("/admins/{}/active", a.id), confirm.as_deref(), html! {
                            input type="hidden" name="active" value=(!a.active);
                            @if a.active {
                                button.danger type="submit" { "Disable" }
                            } @else {
                                button.secondary type="submit" { "Enable" }
                            }
                        }))
                    }
                    @if let Some((_, message)) = shown.refused.as_ref().filter(|(id, _)| *id == a.id) {
                        p.field-error id="active-error" { (message) }
                    }
                }),
            ], "No administrator."))
            section {
                h2 { "Invite an administrator" }
                (c::post_form(admin, "/admins", None, html! {
                    (c::text_field("Name", "name", shown.name, &shown.errors, FieldAttrs::TEXT))
                    button type="submit" { "Invite" }
                }))
                p.muted { "They get a sign-in link valid " (LOGIN_LINK_LIFETIME.num_minutes()) " minutes, shown here once." }
            }
        },
    )
}

#[handler]
async fn list(admin: SignedIn) -> Answer {
    let all = admins::list(&admin.state.db).await?;
    Ok(page::ok(admins_page(&admin, &all, &Shown::default())))
}

/// The panel's address as this browser reached it, for the link.
fn panel_address(req: &Request, state: &PanelState) -> String {
    let scheme = if state.cookie_secure { "https" } else { "http" };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    host.map_or_else(String::new, |host| format!("{scheme}://{host}"))
}

#[handler]
async fn invite(
    admin: SignedIn,
    req: &Request,
    PostForm(NameForm { name }): PostForm<NameForm>,
) -> Answer {
    let (invited, errors) = match admins::invite(&admin.state.db, &admin.actor(), &name).await {
        Ok((invited, secret, until)) => {
            let link = admin_sessions::link_url(&panel_address(req, &admin.state), &secret);
            (Some((invited.name, link, until)), FieldErrors::default())
        }
        Err(err) => (None, FieldErrors::refused(err)?),
    };
    let all = admins::list(&admin.state.db).await?;
    let shown = Shown {
        name: if invited.is_some() { "" } else { &name },
        errors,
        invited,
        refused: None,
    };
    Ok(if let Some((name, _, _)) = &shown.invited {
        let admin = admin.told(format!("Administrator {name} invited."));
        page::ok(admins_page(&admin, &all, &shown))
    } else {
        page::invalid(admins_page(&admin, &all, &shown))
    })
}

#[handler]
async fn set_active(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(toggle): PostForm<Toggle>,
) -> Answer {
    let target = admins::get(&admin.state.db, id).await?;
    match admins::set_active(&admin.state.db, &admin.actor(), &target.name, toggle.active).await {
        Ok(_) => admin.done(
            "/admins",
            &format!("Administrator {} {}.", target.name, toggle.done()),
        ),
        Err(AdminError::Invalid(_, message) | AdminError::Conflict(_, message)) => {
            let shown = Shown {
                refused: Some((id, message)),
                ..Shown::default()
            };
            let all = admins::list(&admin.state.db).await?;
            Ok(page::invalid(admins_page(&admin, &all, &shown)))
        }
        Err(err) => Err(err.into()),
    }
}
