//! Airtime's scheduling core (`ARCHITECTURE.md`, "One scheduling core"): what one cycle decides,
//! given the fleet and the queue.
//!
//! - [`fleet`]: the in-memory fleet-and-queue model ([`FleetView`](fleet::FleetView)) and a
//!   tenant's part of it ([`TenantView`](fleet::TenantView)).
//! - [`snapshot`]: the model as the policy ABI's snapshot, and a policy's decisions as proposals.
//! - [`check`]: the host's check of every decision — the SDK's structural rules plus scope, quota
//!   and the preemption settings, one implementation.
//! - [`services`]: elastic inference services' demand turned into replicas (the autoscaler).
//! - [`shortfall`]: what a pending workload is short of, in words, against the fleet now.
//! - [`cycle`]: the two policy levels evaluated (through the [`Evaluator`](cycle::Evaluator)
//!   trait), composed and checked into what to apply.
//!
//! It depends on the SDK and the wire types only: never on a database, a web framework or an async
//! runtime (the tidy test checks). The control plane is one adapter (PostgreSQL in, one transaction
//! out), the simulator another (virtual time in and out).

pub mod check;
pub mod cycle;
pub mod fleet;
pub mod services;
pub mod shortfall;
pub mod snapshot;

pub use airtime_protocol::settings::PrioritySettings;
