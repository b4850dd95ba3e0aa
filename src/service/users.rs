//! Users of a project, identified by id or by e-mail (unique per project).

use entity::user;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, DatabaseConnection, DbErr,
    EntityTrait, QueryFilter, QuerySelect,
};

use super::{AdminError, now, projects, validate};

/// How the caller names the user: by id, by e-mail, or both (then both must
/// name the same user of the project).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserRef {
    pub user_id: Option<i64>,
    /// Already validated as an e-mail address.
    pub email: Option<String>,
}

/// The id of the user of `project_id` that `who` names (by id, by e-mail,
/// or by both naming the same user); `None` when there is none.
pub async fn resolve(
    db: &DatabaseConnection,
    project_id: i64,
    who: &UserRef,
) -> Result<Option<i64>, DbErr> {
    let email = who.email.as_deref().map(validate::normalize_email);
    let mut named = Condition::all();
    match (who.user_id, &email) {
        (None, None) => return Ok(None),
        (Some(id), _) => named = named.add(user::Column::Id.eq(id)),
        (None, Some(_)) => {}
    }
    if let Some(email) = email {
        named = named.add(user::Column::Email.eq(email));
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
    project_id: i64,
    email: &str,
) -> Result<user::Model, AdminError> {
    if !validate::is_email(email) {
        return Err(AdminError::Invalid(format!(
            "{email:?} is not a valid e-mail address"
        )));
    }
    projects::get(db, project_id).await?;
    let email = validate::normalize_email(email);
    let exists = user::Entity::find()
        .filter(user::Column::ProjectId.eq(project_id))
        .filter(user::Column::Email.eq(&email))
        .one(db)
        .await?;
    let duplicate = || format!("a user with e-mail {email} already exists in project {project_id}");
    if exists.is_some() {
        return Err(AdminError::Conflict(duplicate()));
    }
    user::ActiveModel {
        project_id: Set(project_id),
        email: Set(email.clone()),
        created_at: Set(now()),
        ..Default::default()
    }
    .insert(db)
    .await
    .map_err(|err| AdminError::conflict_on_unique(err, duplicate))
}

/// A user of `project_id`, or `NotFound`.
pub async fn get_in_project(
    db: &DatabaseConnection,
    project_id: i64,
    user_id: i64,
) -> Result<user::Model, AdminError> {
    user::Entity::find_by_id(user_id)
        .filter(user::Column::ProjectId.eq(project_id))
        .one(db)
        .await?
        .ok_or(AdminError::NotFound("user", user_id))
}

pub async fn get(db: &DatabaseConnection, user_id: i64) -> Result<user::Model, AdminError> {
    user::Entity::find_by_id(user_id)
        .one(db)
        .await?
        .ok_or(AdminError::NotFound("user", user_id))
}
