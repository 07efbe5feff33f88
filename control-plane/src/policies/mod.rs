//! Policies as the control plane keeps them, in four parts along their seams:
//! - [`catalog`]: compiled modules cached by version, the active version per scope, vetting of
//!   uploads and evaluation off the async workers, each in its lane;
//! - [`store`]: policies and their versions in PostgreSQL, the views the API reads;
//! - [`lifecycle`]: activate (parameters checked by the policy itself), deactivate, roll back,
//!   delete, shadow, limits, each audited in the change's transaction;
//! - [`failures`]: failed evaluations, suspension after a run of them, and what policies logged.
//!
//! The sandbox itself (wasmtime and its limits) lives in `airtime-policy-host`.

pub mod catalog;
pub mod failures;
pub mod lifecycle;
pub mod store;

pub use catalog::{Lane, LoadedPolicy, PolicyCatalog, Selected, VetError};
pub use failures::{
    FailureView, LogView, ShadowResultView, failures, logs, record_failure, record_logs, record_successes,
    shadow_results,
};
pub use lifecycle::{activate, deactivate, delete, rollback, set_limits, start_shadow, stop_shadow};
pub use store::{
    PolicyView, VersionView, check_name, check_tenant_room, get, list, owner, same_bytes, sha256_hex, store_upload,
};

/// The built-in policy every scope falls back to when its own policy fails.
pub const FALLBACK_POLICY: &str = "priority-best-fit";

/// The built-in policy the platform scope starts with (the fallback when it is not built).
pub const DEFAULT_POLICY: &str = "slo-first";
