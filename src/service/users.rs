//! Users of a project, identified by id or by e-mail (unique per project).

use entity::user;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait,
    DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect,
};
use serde_json::json;

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change},
    keyset::{Keyset, Listed},
    now, projects,
};
use crate::domain::Email;
pub use crate::domain::UserRef;

/// The id of the user of `project_id` that `who` names (by id, by e-mail,
/// or by both naming the same user); `None` when there is none.
pub async fn resolve<C: ConnectionTrait>(
    db: &C,
    project_id: i64,
    who: &UserRef,
) -> Result<Option<i64>, DbErr> {
    let mut named = Condition::all();
    if let Some(id) = who.user_id() {
        named = named.add(user::Column::Id.eq(id));
    }
    if let Some(email) = who.email() {
        named = named.add(user::Column::Email.eq(email.as_str()));
    }
    user::Entity::find()
        .select_only()
        .column(user::Column::Id)
        .filter(user::Column::ProjectId.eq(project_id))
        .filter(named)
        .into_tuple::<i64>()
        .one(db)
        .await
}

pub async fn create(
    db: &DatabaseConnection,
    actor: &Actor,
    project_id: i64,
    email: &Email,
) -> Result<user::Model, AdminError> {
    projects::get(db, project_id).await?;
    let duplicate = || format!("a user with e-mail {email} already exists in project {project_id}");
    let txn = AuditedChange::begin(db, actor).await?;
    let exists = user::Entity::find()
        .filter(user::Column::ProjectId.eq(project_id))
        .filter(user::Column::Email.eq(email.as_str()))
        .one(&*txn)
        .await?;
    if exists.is_some() {
        return Err(AdminError::Conflict("email", duplicate()));
    }
    let model = user::ActiveModel {
        project_id: Set(project_id),
        email: Set(email.to_string()),
        created_at: Set(now()),
        ..Default::default()
    }
    .insert(&*txn)
    .await
    .map_err(|err| AdminError::conflict_on_unique(err, "email", duplicate))?;
    let change = Change::new("user.create", "user", model.id)
        .after(json!({"project_id": model.project_id, "email": model.email}));
    txn.commit(change).await?;
    Ok(model)
}

pub async fn get(db: &DatabaseConnection, user_id: i64) -> Result<user::Model, AdminError> {
    super::find_row(db, user::Entity, "user", user_id, false).await
}

/// The page `page` of the users of `project_id` that `text` names, newest
/// first; every user when `text` is blank. Otherwise the first page starts
/// with the user whose id or e-mail (compared as stored, lower-cased) it
/// is, and the pages hold those whose e-mail contains it, other than that
/// user.
pub async fn search(
    db: &DatabaseConnection,
    project_id: i64,
    text: &str,
    page: Keyset,
) -> Result<Listed<user::Model>, DbErr> {
    use sea_orm::{
        QueryOrder,
        sea_query::{Expr, ExprTrait},
    };
    let text = Email::folded(text.trim());
    let in_project = user::Entity::find().filter(user::Column::ProjectId.eq(project_id));
    if text.is_empty() {
        let rows = page.select(in_project, user::Column::Id).all(db).await?;
        return Ok(page.cut(rows, |user| user.id));
    }
    let mut exact = Condition::any().add(user::Column::Email.eq(text.as_str()));
    if let Ok(id) = text.parse::<i64>() {
        exact = exact.add(user::Column::Id.eq(id));
    }
    let pattern = super::keyset::containing(&text);
    let partial = in_project
        .clone()
        .filter(Expr::col((user::Entity, user::Column::Email)).like(pattern))
        .filter(exact.clone().not());
    let rows = page.select(partial, user::Column::Id).all(db).await?;
    let mut found = page.cut(rows, |user| user.id);
    if page.before.is_none() {
        let mut named = in_project
            .filter(exact)
            .order_by_desc(user::Column::Id)
            .all(db)
            .await?;
        named.append(&mut found.rows);
        found.rows = named;
    }
    Ok(found)
}
