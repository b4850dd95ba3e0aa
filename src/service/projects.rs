//! Projects: create, rename, list, enable and disable.

use entity::project;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DatabaseConnection, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{Value, json};

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change},
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
    project::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or(AdminError::NotFound("project", id))
}

/// The project `id`, locked until the end of the write transaction `txn`.
async fn get_for_update<C: ConnectionTrait>(
    txn: &C,
    id: i64,
) -> Result<project::Model, AdminError> {
    project::Entity::find_by_id(id)
        .lock_exclusive()
        .one(txn)
        .await?
        .ok_or(AdminError::NotFound("project", id))
}

/// Renames a project.
pub async fn rename(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    name: &str,
) -> Result<project::Model, AdminError> {
    let name = validate::check_name("project", name).map_err(AdminError::invalid("name"))?;
    let txn = AuditedChange::begin(db, actor).await?;
    let before = get_for_update(&*txn, id).await?;
    let mut model: project::ActiveModel = before.clone().into();
    model.name = Set(name);
    let after = model.update(&*txn).await?;
    let change = Change::new("project.rename", "project", id)
        .before(audited(&before))
        .after(audited(&after));
    txn.commit(change).await?;
    Ok(after)
}

/// Enables or disables a project. A disabled project's tokens get
/// 404 PROJECT_NOT_FOUND from the next request on.
pub async fn set_active(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    active: bool,
) -> Result<project::Model, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let before = get_for_update(&*txn, id).await?;
    let mut model: project::ActiveModel = before.clone().into();
    model.active = Set(active);
    let after = model.update(&*txn).await?;
    let action = if active {
        "project.enable"
    } else {
        "project.disable"
    };
    let change = Change::new(action, "project", id)
        .before(audited(&before))
        .after(audited(&after));
    txn.commit(change).await?;
    Ok(after)
}
