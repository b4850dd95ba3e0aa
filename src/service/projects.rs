//! Projects: create, list, enable and disable.

use entity::project;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, DatabaseConnection, EntityTrait, QueryOrder};

use super::{AdminError, now, validate};

pub async fn create(db: &DatabaseConnection, name: &str) -> Result<project::Model, AdminError> {
    let name = validate::check_name("project", name).map_err(AdminError::Invalid)?;
    let model = project::ActiveModel {
        name: Set(name),
        active: Set(true),
        created_at: Set(now()),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(model)
}

pub async fn list(db: &DatabaseConnection) -> Result<Vec<project::Model>, AdminError> {
    Ok(project::Entity::find()
        .order_by_asc(project::Column::Id)
        .all(db)
        .await?)
}

pub async fn get(db: &DatabaseConnection, id: i64) -> Result<project::Model, AdminError> {
    project::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or(AdminError::NotFound("project", id))
}

/// Enables or disables a project. A disabled project's tokens get
/// 404 PROJECT_NOT_FOUND from the next request on.
pub async fn set_active(
    db: &DatabaseConnection,
    id: i64,
    active: bool,
) -> Result<project::Model, AdminError> {
    let model = get(db, id).await?;
    let mut model: project::ActiveModel = model.into();
    model.active = Set(active);
    Ok(model.update(db).await?)
}
