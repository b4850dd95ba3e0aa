//! Projects: list, create, rename, disable and enable.

use entity::project;

use super::prelude::*;
use crate::service::projects;

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
    query: &PageQuery<Search>,
    all: &Listed<project::Model>,
    name: &str,
    errors: &FieldErrors,
) -> Markup {
    page::frame(
        admin,
        "Projects",
        html! {
            (c::search_form("/projects", "Name contains", "shop", &query.filters.q))
            (c::list(&all.rows, &[
                Column("Id", "num", &|p| html! { (p.id) }),
                Column("Name", "", &|p| html! { a href={ "/projects/" (p.id) } { (p.name) } }),
                Column("State", "", &|p| c::state_badge(p.active)),
                Column("Created", "", &|p| html! { (c::when(&p.created_at)) }),
            ], if query.filters.q.is_empty() { "No project yet." } else { "No project matches." }))
            (c::paging("/projects", query, all.older))
            (c::form_section(admin, ("New project", "/projects"), html! {
                (c::text_field("Name", "name", name, errors, FieldAttrs::TEXT))
                button type="submit" { "Create project" }
            }))
        },
    )
}

#[handler]
async fn list(admin: SignedIn, query: PageQuery<Search>) -> Answer {
    let page = query.page(PAGE_SIZE)?;
    let all = projects::page(&admin.state.db, &query.filters.q, page).await?;
    let markup = list_page(&admin, &query, &all, "", &FieldErrors::default());
    Ok(page::ok(markup))
}

#[handler]
async fn create(admin: SignedIn, PostForm(form): PostForm<NameForm>) -> Answer {
    match projects::create(&admin.state.db, &admin.actor(), &form.name).await {
        Ok(p) => admin.done(
            &format!("/projects/{}", p.id),
            &format!("Project {} created.", p.id),
        ),
        Err(err) => {
            let errors = FieldErrors::refused(err)?;
            let all = projects::page(&admin.state.db, "", Keyset::first(PAGE_SIZE)).await?;
            let markup = list_page(&admin, &PageQuery::default(), &all, &form.name, &errors);
            Ok(page::invalid(markup))
        }
    }
}

fn project_page(admin: &SignedIn, p: &project::Model, name: &str, errors: &FieldErrors) -> Markup {
    page::frame(
        admin,
        &format!("Project {}", p.name),
        html! {
            p { "Project " (p.id) " · " (c::state_badge(p.active)) " · created " (c::when(&p.created_at)) }
            div.actions {
                a.button href={ "/projects/" (p.id) "/tokens" } { "Tokens" }
                a.button href={ "/projects/" (p.id) "/users" } { "Users and servers" }
                a.button href={ "/projects/" (p.id) "/webhooks" } { "Webhook endpoints" }
                a.button.secondary href={ "/projects/" (p.id) "/events" } { "Events" }
                a.button.secondary href={ "/orders?project=" (p.id) } { "Orders" }
                a.button.secondary href={ "/ledger?project=" (p.id) } { "Ledger" }
            }
            (c::form_section(admin, ("Rename", &format!("/projects/{}/rename", p.id)), html! {
                (c::text_field("Name", "name", name, errors, FieldAttrs::TEXT))
                button type="submit" { "Rename" }
            }))
            (c::toggle_section(
                admin,
                (&format!("/projects/{}/active", p.id), "project"),
                p.active,
                (
                    "While the project is disabled, every request made with any of its tokens is answered 404 PROJECT_NOT_FOUND, from the next request on; its tokens keep their settings and work again once it is enabled.",
                    "The project is disabled: its tokens get 404 PROJECT_NOT_FOUND. Enabling it makes its active tokens work again from the next request.",
                ),
                &format!("Disable project {}? Its tokens stop working at once.", p.name),
            ))
        },
    )
}

#[handler]
async fn show(admin: SignedIn, Path(id): Path<i64>) -> Answer {
    let p = projects::get(&admin.state.db, id).await?;
    let markup = project_page(&admin, &p, &p.name, &FieldErrors::default());
    Ok(page::ok(markup))
}

#[handler]
async fn rename(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(form): PostForm<NameForm>,
) -> Answer {
    match projects::rename(&admin.state.db, &admin.actor(), id, &form.name).await {
        Ok(_) => admin.done(
            &format!("/projects/{id}"),
            &format!("Project {id} renamed."),
        ),
        Err(err) => {
            let errors = FieldErrors::refused(err)?;
            let p = projects::get(&admin.state.db, id).await?;
            Ok(page::invalid(project_page(&admin, &p, &form.name, &errors)))
        }
    }
}

#[handler]
async fn set_active(
    admin: SignedIn,
    Path(id): Path<i64>,
    PostForm(toggle): PostForm<Toggle>,
) -> Answer {
    projects::set_active(&admin.state.db, &admin.actor(), id, toggle.active).await?;
    let message = format!("Project {id} {}.", toggle.done());
    admin.done(&format!("/projects/{id}"), &message)
}
