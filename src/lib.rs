//! masterpay: master-account balances and payment order completion (API v2).
//!
//! # Layout
//!
//! - [`cli`]: the `masterpay` command line, one module per command; every
//!   command calls [`service`] exactly as the API does.
//! - [`app`]: assembles the poem routes (v2 API, health, OpenAPI, Swagger UI)
//!   and runs the server with graceful shutdown.
//! - [`api`]: HTTP only: endpoints, the bearer security scheme, error bodies.
//! - [`service`]: business rules and transactions over sea-orm; no HTTP types.
//! - [`money`]: exact money (integer cents inside, two-digit strings outside).
//! - [`db`]: connecting (SQLite, PostgreSQL, MariaDB/MySQL), migrating, and
//!   the request path's reads (inline on SQLite, `db::Reader`).
//! - [`config`]: runtime settings (flags > environment > TOML file > defaults).
//! - [`middleware`], [`metrics`], [`telemetry`]: request ids, access logs,
//!   Prometheus metrics, request timeout, log set-up.
//!
//! The schema lives in the `entity` and `migration` crates.

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod db;
pub mod metrics;
pub mod middleware;
pub mod money;
pub mod service;
pub mod telemetry;
