//! sea-orm entities of masterpay, one file per table.
//!
//! Money columns are `i64` minor units (cents), never `Decimal`: sea-orm reads
//! `Decimal` on SQLite through `f64` and loses digits past about 15 significant
//! figures. Conversion to `rust_decimal::Decimal` happens only at the edges
//! (`masterpay::money`). Every id is `i64` on every backend, because mixing
//! `i32` and `i64` binds for one column breaks PostgreSQL's prepared statements.
//!
//! Each `Relation` enum declares the foreign keys of its table as the
//! `migration` crate creates them (same names, same `ON DELETE`): a table
//! names the tables it references, never the other way round, so the
//! modules import each other in one direction only. Columns that hold one of
//! a few words (an order's status, a log row's kind and balance type) are
//! active enums.

pub mod admin_audit_entry;
pub mod admin_login_link;
pub mod admin_session;
pub mod admin_sign_in_failure;
pub mod administrator;
pub mod app_token;
pub mod balance;
pub mod operation_log;
pub mod payment_order;
pub mod project;
pub mod server;
pub mod token_permission;
pub mod user;
pub mod webhook_attempt;
pub mod webhook_delivery;
pub mod webhook_endpoint;
pub mod webhook_event;
