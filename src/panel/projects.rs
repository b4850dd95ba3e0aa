//! Projects: list, create, rename, disable and enable.

use entity::project;
use maud::{Markup, html};
use poem::{
    Response, Route, get, handler, post,
    web::{Data, Path},
};

use super::{
    PanelError, PanelState,
    page::{self, FieldAttrs, FieldErrors, Params},
    session::{PostForm, SignedIn},
};
use crate::service::{
    AdminError,
    keyset::{Keyset, Listed},
    projects,
};

pub fn routes(route: Route) -> Route {
    route
        .at("/projects", get(list).post(create))
        .at("/projects/:id", get(show))
        .at("/projects/:id/rename", post(rename))
        .at("/projects/:id/active", post(set_active))
}

/// Projects a page lists at most, newest first.
const PAGE_SIZE: u64 = 100;

fn list_page(
    admin: &SignedIn,
    params: &Params,
    all: &Listed<project::Model>,
    name: &str,
    errors: &FieldErrors,
) -> Markup {
    page::frame(
        admin,
        "Projects",
        html! {
            (page::search_form("/projects", "Name contains", "shop", params.get("q")))
            div.table-wrap { table {
                thead { tr { th.num { "Id" } th { "Name" } th { "State" } th { "Created" } } }
                tbody {
                    @for p in &all.rows {
                        tr {
                            td.num { (p.id) }
                            td { a href={ "/projects/" (p.id) } { (p.name) } }
                            td { (page::state_badge(p.active)) }
                            td { (page::when(&p.created_at)) }
                        }
                    }
                    @if all.rows.is_empty() { tr { td colspan="4" .muted {
                        @if params.get("q").is_empty() { "No project yet." } @else { "No project matches." }
                    } } }
                }
            } }
            (page::paging("/projects", params, &["q"], all.older))
            section {
                h2 { "New project" }
                form method="post" action="/projects" {
                    (page::csrf(admin))
                    (page::text_field("Name", "name", name, errors, FieldAttrs::TEXT))
                    button type="submit" { "Create project" }
                }
            }
        },
    )
}

#[handler]
async fn list(
    admin: SignedIn,
    params: Params,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let all = projects::page(&state.db, params.get("q"), params.page(PAGE_SIZE)?).await?;
    Ok(page::ok(list_page(
        &admin,
        &params,
        &all,
        "",
        &FieldErrors::default(),
    )))
}

#[handler]
async fn create(
    admin: SignedIn,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    match projects::create(&state.db, &admin.actor(), form.get("name")).await {
        Ok(p) => Ok(page::done(
            &admin,
            &format!("/projects/{}", p.id),
            &format!("Project {} created.", p.id),
        )),
        Err(AdminError::Invalid(field, message) | AdminError::Conflict(field, message)) => {
            let mut errors = FieldErrors::default();
            errors.add(field, message);
            let all = projects::page(&state.db, "", Keyset::first(PAGE_SIZE)).await?;
            Ok(page::invalid(list_page(
                &admin,
                &Params::default(),
                &all,
                form.get("name"),
                &errors,
            )))
        }
        Err(err) => Err(err.into()),
    }
}

fn project_page(admin: &SignedIn, p: &project::Model, name: &str, errors: &FieldErrors) -> Markup {
    page::frame(
        admin,
        &format!("Project {}", p.name),
        html! {
            p { "Project " (p.id) " · " (page::state_badge(p.active)) " · created " (page::when(&p.created_at)) }
            div.actions {
                a.button href={ "/projects/" (p.id) "/tokens" } { "Tokens" }
                a.button href={ "/projects/" (p.id) "/users" } { "Users and servers" }
                a.button.secondary href={ "/orders?project=" (p.id) } { "Orders" }
                a.button.secondary href={ "/ledger?project=" (p.id) } { "Ledger" }
            }
            section {
                h2 { "Rename" }
                form method="post" action={ "/projects/" (p.id) "/rename" } {
                    (page::csrf(admin))
                    (page::text_field("Name", "name", name, errors, FieldAttrs::TEXT))
                    button type="submit" { "Rename" }
                }
            }
            section {
                @if p.active {
                    h2 { "Disable" }
                    p { "While the project is disabled, every request made with any of its tokens is answered 404 PROJECT_NOT_FOUND, from the next request on; its tokens keep their settings and work again once it is enabled." }
                    form method="post" action={ "/projects/" (p.id) "/active" } data-confirm={ "Disable project " (p.name) "? Its tokens stop working at once." } {
                        (page::csrf(admin))
                        input type="hidden" name="active" value="false";
                        button.danger type="submit" { "Disable project" }
                    }
                } @else {
                    h2 { "Enable" }
                    p { "The project is disabled: its tokens get 404 PROJECT_NOT_FOUND. Enabling it makes its active tokens work again from the next request." }
                    form method="post" action={ "/projects/" (p.id) "/active" } {
                        (page::csrf(admin))
                        input type="hidden" name="active" value="true";
                        button type="submit" { "Enable project" }
                    }
                }
            }
        },
    )
}

#[handler]
async fn show(
    admin: SignedIn,
    Path(id): Path<i64>,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let p = projects::get(&state.db, id).await?;
    Ok(page::ok(project_page(
        &admin,
        &p,
        &p.name,
        &FieldErrors::default(),
    )))
}

#[handler]
async fn rename(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    match projects::rename(&state.db, &admin.actor(), id, form.get("name")).await {
        Ok(_) => Ok(page::done(
            &admin,
            &format!("/projects/{id}"),
            &format!("Project {id} renamed."),
        )),
        Err(AdminError::Invalid(field, message) | AdminError::Conflict(field, message)) => {
            let p = projects::get(&state.db, id).await?;
            let mut errors = FieldErrors::default();
            errors.add(field, message);
            Ok(page::invalid(project_page(
                &admin,
                &p,
                form.get("name"),
                &errors,
            )))
        }
        Err(err) => Err(err.into()),
    }
}

#[handler]
async fn set_active(
    admin: SignedIn,
    Path(id): Path<i64>,
    form: PostForm,
    state: Data<&PanelState>,
) -> Result<Response, PanelError> {
    let active = form.active()?;
    projects::set_active(&state.db, &admin.actor(), id, active).await?;
    let message = format!(
        "Project {id} {}.",
        if active { "enabled" } else { "disabled" }
    );
    Ok(page::done(&admin, &format!("/projects/{id}"), &message))
}
