//! Swagger UI at `/docs/`, served from assets vendored into the binary by
//! utoipa-swagger-ui (no network at build or run time), pointed at our own
//! `/openapi.json`. The Authorize button takes the bearer token.

use std::sync::Arc;

use poem::{
    Response, handler,
    http::{StatusCode, header},
    web::{Data, Path, Redirect},
};
use utoipa_swagger_ui::Config;

use super::error::ApiError;

/// Shared Swagger UI configuration.
pub fn swagger_config() -> Arc<Config<'static>> {
    Arc::new(
        Config::new(["/openapi.json"])
            .try_it_out_enabled(true)
            .persist_authorization(false)
            .display_operation_id(true),
    )
}

#[handler]
pub fn docs_redirect() -> Redirect {
    Redirect::permanent("/docs/")
}

#[handler]
pub fn docs_index(config: Data<&Arc<Config<'static>>>) -> Response {
    serve_file("", config.0)
}

#[handler]
pub fn docs_file(Path(tail): Path<String>, config: Data<&Arc<Config<'static>>>) -> Response {
    serve_file(&tail, config.0)
}

fn serve_file(tail: &str, config: &Arc<Config<'static>>) -> Response {
    match utoipa_swagger_ui::serve(tail, config.clone()) {
        Ok(Some(file)) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, file.content_type)
            .body(file.bytes.to_vec()),
        Ok(None) => ApiError::not_found().to_response(),
        Err(err) => {
            tracing::error!(error = %err, "swagger ui");
            ApiError::internal().to_response()
        }
    }
}
