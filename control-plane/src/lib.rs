//! Airtime control plane: keeps the fleet, tenants, workloads and history in PostgreSQL, runs the
//! scheduling loop that asks Wasm policies where work goes, and serves the REST API and dashboard.
//!
//! `app(state)` builds the router; `serve(config)` runs everything. The binary only parses the
//! configuration and calls `serve`.

#![forbid(unsafe_code)]

pub mod api;
pub mod archive;
pub mod auth;
pub mod budgets;
pub mod config;
pub mod db;
pub mod decisions;
pub mod domain;
pub mod error;
pub mod fleet;
pub mod invitations;
pub mod live;
pub mod metrics;
pub mod model;
pub mod policies;
pub mod scheduler;
pub mod server;
pub mod services;
pub mod settings;
pub mod signals;
pub mod state;
pub mod tenancy;
pub mod time_range;
pub mod usage;
pub mod users;
pub mod web;
pub mod what_if;
pub mod workloads;

pub use config::Config;
pub use server::{app, serve};
pub use state::AppState;
