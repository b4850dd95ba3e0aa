//! `masterpay project create|list|disable|enable`.

use clap::Subcommand;
use entity::project;
use sea_orm::DatabaseConnection;
use serde_json::json;

use super::{CliResult, Output, output::state};
use crate::service::{admin_audit::Actor, projects};

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project.
    Create {
        #[arg(long)]
        name: String,
    },
    /// List all projects.
    List,
    /// Disable a project: its tokens get 404 PROJECT_NOT_FOUND.
    Disable { id: i64 },
    /// Enable a project.
    Enable { id: i64 },
}

fn to_json(p: &project::Model) -> serde_json::Value {
    json!({"id": p.id, "name": p.name, "active": p.active, "created_at": p.created_at})
}

pub async fn run(cmd: ProjectCommand, db: &DatabaseConnection, out: Output) -> CliResult {
    match cmd {
        ProjectCommand::Create { name } => {
            let p = projects::create(db, &Actor::CommandLine, &name).await?;
            out.emit(to_json(&p), || {
                format!("created project {} ({})", p.id, p.name)
            });
        }
        ProjectCommand::List => {
            let all = projects::list(db).await?;
            let line = |p: &project::Model| format!("{}\t{}\t{}", p.id, state(p.active), p.name);
            out.list("projects", &all, to_json, line, "no projects");
        }
        ProjectCommand::Disable { id } | ProjectCommand::Enable { id } => {
            let active = matches!(cmd, ProjectCommand::Enable { .. });
            let p = projects::set_active(db, &Actor::CommandLine, id, active).await?;
            let done = if active { "enabled" } else { "disabled" };
            out.emit(to_json(&p), || format!("project {} {done}", p.id));
        }
    }
    Ok(())
}
