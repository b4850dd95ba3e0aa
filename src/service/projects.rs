//! Projects: create, rename, list, enable and disable.

use entity::project;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
};
use serde_json::{Value, json};

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change, toggle_action},
    keyset::{Keyset, Listed},
    now, validate,
};

/// A project as the audit log shows it.
fn audited(p: &project::Model) -> Value {
    json!({"name": p.name, "active": p.active})
}

pub async fn create(
    db: &DatabaseConnection,
    actor: &Actor,
    name: &str,
) -> Result<project::Model, AdminError> {
    let name = validate::check_name("project", name).map_err(AdminError::invalid("name"))?;
    let txn = AuditedChange::begin(db, actor).await?;
    let model = project::ActiveModel {
        name: Set(name),
        active: Set(true),
        created_at: Set(now()),
        ..Default::default()
    }
    .insert(&*txn)
    .await?;
    let change = Change::new("project.create", "project", model.id).after(audited(&model));
    txn.commit(change).await?;
    Ok(model)
}

pub async fn list(db: &DatabaseConnection) -> Result<Vec<project::Model>, AdminError> {
    Ok(project::Entity::find()
        .order_by_asc(project::Column::Id)
        .all(db)
        .await?)
}

/// The page `page` of the projects whose name contains `search` (every
/// project when it is blank), newest first.
pub async fn page(
    db: &DatabaseConnection,
    search: &str,
    page: Keyset,
) -> Result<Listed<project::Model>, AdminError> {
    let mut all = project::Entity::find();
    if !search.is_empty() {
        all = all.filter(super::keyset::any_contains(
            &[project::Column::Name],
            search,
        ));
    }
    let rows = page.select(all, project::Column::Id).all(db).await?;
    Ok(page.cut(rows, |p| p.id))
}

pub async fn get(db: &DatabaseConnection, id: i64) -> Result<project::Model, AdminError> {
    super::find_row(db, project::Entity, "project", id, false).await
}

/// Renames a project.
pub async fn rename(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    name: &str,
) -> Result<project::Model, AdminError> {
    let name = validate::check_name("project", name).map_err(AdminError::invalid("name"))?;
    update(db, actor, id, "project.rename", |model| {
        model.name = Set(name)
    })
    .await
}

/// Enables or disables a project. A disabled project's tokens get
/// 404 PROJECT_NOT_FOUND from the next request on.
pub async fn set_active(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    active: bool,
) -> Result<project::Model, AdminError> {
    let action = toggle_action("project", active);
    update(db, actor, id, &action, |model| model.active = Set(active)).await
}

/// Changes the project `id` under its lock with `change`; logged as
/// `action`, with the project before and after.
async fn update(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    action: &str,
    change: impl FnOnce(&mut project::ActiveModel),
) -> Result<project::Model, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let before = super::find_row(&*txn, project::Entity, "project", id, true).await?;
    let mut model: project::ActiveModel = before.clone().into();
    change(&mut model);
    let after = model.update(&*txn).await?;
    let change = Change::new(action, "project", id)
        .before(audited(&before))
        .after(audited(&after));
    txn.commit(change).await?;
    Ok(after)
}
