//! masterpay: master-account balances and payment order completion (API v2).
//!
//! # Layout
//!
//! Each layer imports only the ones below it:
//!
//! - [`cli`]: the `masterpay` command line, one module per command; every
//!   command calls [`service`] exactly as the API does.
//! - [`app`]: assembles the poem routes (v2 API, health, OpenAPI, Swagger UI),
//!   the administration panel's and the metrics', and runs their listeners
//!   and the webhook [`relay`] with graceful shutdown.
//! - [`relay`]: sends the recorded webhook events to integrators'
//!   endpoints (outgoing HTTP only), by the rules of [`service`].
//! - [`panel`]: the administration panel's HTML pages, on a listener of
//!   their own; beside [`api`], never importing it.
//! - [`api`]: HTTP only: endpoints, the bearer security scheme, error
//!   bodies, request-wide middleware.
//! - [`state`]: what every request handler may reach.
//! - [`service`]: the rules (authentication chain, balance lookup,
//!   completion, administration); no HTTP types.
//! - [`store`]: the request path's storage seam, the `Store` trait with one
//!   implementation per backend, and connecting and migrating.
//! - [`domain`]: the contract's formats (order id, payment system, e-mail,
//!   idempotency key, the user as a caller names one), one type each, which
//!   the API, the command line and the panel all parse the same way.
//! - [`events`]: the outgoing events' types and bodies, which the store
//!   and `service` both build.
//! - [`domain`], [`money`] (the amount), [`config`], [`metrics`],
//!   [`telemetry`]: leaves.
//!
//! The schema lives in the `entity` and `migration` crates.

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod events;
pub mod metrics;
pub mod money;
pub mod panel;
pub mod relay;
pub mod service;
pub mod state;
pub mod store;
pub mod telemetry;
