//! Game servers of a project. Ids start at 1; server_id 0 is the general account.

use entity::server;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr,
    EntityTrait, QueryFilter, QuerySelect,
};
use serde_json::json;

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change},
    now, projects, validate,
};

pub async fn create(
    db: &DatabaseConnection,
    actor: &Actor,
    project_id: i64,
    name: &str,
) -> Result<server::Model, AdminError> {
    let name = validate::check_name("server", name).map_err(AdminError::invalid("name"))?;
    projects::get(db, project_id).await?;
    let txn = AuditedChange::begin(db, actor).await?;
    let model = server::ActiveModel {
        project_id: Set(project_id),
        name: Set(name),
        created_at: Set(now()),
        ..Default::default()
    }
    .insert(&*txn)
    .await?;
    let change = Change::new("server.create", "server", model.id)
        .after(json!({"project_id": model.project_id, "name": model.name}));
    txn.commit(change).await?;
    Ok(model)
}

/// A server of `project_id`, or `NotFound`.
pub async fn get_in_project(
    db: &DatabaseConnection,
    project_id: i64,
    server_id: i64,
) -> Result<server::Model, AdminError> {
    server::Entity::find_by_id(server_id)
        .filter(server::Column::ProjectId.eq(project_id))
        .one(db)
        .await?
        .ok_or(AdminError::NotFound("server", server_id))
}

/// Whether `server_id` names a server of `project_id`; 0 (the general
/// account) always does.
pub async fn is_in_project<C: ConnectionTrait>(
    db: &C,
    project_id: i64,
    server_id: i64,
) -> Result<bool, DbErr> {
    if server_id == entity::balance::GENERAL_ACCOUNT {
        return Ok(true);
    }
    Ok(server::Entity::find_by_id(server_id)
        .select_only()
        .column(server::Column::Id)
        .filter(server::Column::ProjectId.eq(project_id))
        .into_tuple::<i64>()
        .one(db)
        .await?
        .is_some())
}

/// The servers of `project_id`, oldest first.
pub async fn list(db: &DatabaseConnection, project_id: i64) -> Result<Vec<server::Model>, DbErr> {
    use sea_orm::QueryOrder;
    server::Entity::find()
        .filter(server::Column::ProjectId.eq(project_id))
        .order_by_asc(server::Column::Id)
        .all(db)
        .await
}
