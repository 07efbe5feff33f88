//! Write Airtime scheduling policies in Rust, compile them to `wasm32-unknown-unknown`, and test them
//! natively. This crate is also the one definition of the host/guest ABI (`docs/policy-abi.md`):
//! the control plane encodes snapshots with [`abi::encode_snapshot`] and decodes decisions with
//! [`abi::decode_decisions`], the guest does the reverse, and both use the types in [`abi`].
//!
//! It depends on nothing (the optional `serde` feature adds `serde` derives for host tools) and on
//! no async runtime.
//!
//! # A policy, start to finish
//!
//! A policy is a type implementing [`Policy`](guest::Policy): it reads the [`Snapshot`](abi::Snapshot)
//! (nodes, GPUs, tenants, pending and running workloads) and returns [`Decision`](abi::Decision)s:
//! place, preempt, or keep pending, each with a reason the tenant reads.
//! [`export_policy!`] makes the crate a module the control plane runs; [`testing`] runs it natively.
//!
//! ```
//! use airtime_policy_sdk::prelude::*;
//!
//! /// Places each pending workload, highest priority first, on the first ready node with enough
//! /// free GPUs that fit it.
//! pub struct FirstFit;
//!
//! impl Policy for FirstFit {
//!     fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
//!         // Typed parameters from the policy's JSON configuration, with a default.
//!         let limit: u32 = ctx.param_or("max_placements", u32::MAX)?;
//!         let mut plan = Plan::new(snapshot);
//!         let mut placed = 0;
//!         for (index, workload) in snapshot.pending_by_priority() {
//!             let need = workload.gpu_need();
//!             let choice = snapshot.ready_nodes().find_map(|(node, _)| {
//!                 // The host reserves CPU and memory for every placement, GPU or not.
//!                 if plan.cpu_free(node) < workload.cpu_millis || plan.memory_free(node) < workload.memory_mb {
//!                     return None;
//!                 }
//!                 let gpus: Vec<u32> = plan
//!                     .free_gpus(node)
//!                     .filter(|(_, gpu)| need.fits(gpu))
//!                     .map(|(i, _)| i)
//!                     .take(need.count as usize)
//!                     .collect();
//!                 (gpus.len() == need.count as usize && need.count > 0).then_some((node, gpus))
//!             });
//!             match choice {
//!                 Some((node, gpus)) if placed < limit => {
//!                     let reason = format!("first fit on {}", snapshot.nodes[node as usize].name);
//!                     plan.place(index, node, gpus, reason)?;
//!                     placed += 1;
//!                 }
//!                 Some(_) => plan.keep_pending(index, "placement limit reached")?,
//!                 None => plan.keep_pending(index, format!("no ready node has {}", need.describe("free")))?,
//!             }
//!         }
//!         ctx.info(format_args!("placed {placed} workloads"));
//!         Ok(plan.into_decisions())
//!     }
//! }
//!
//! // In the policy crate (crate-type = ["cdylib", "rlib"]): the exports, on wasm32 only.
//! airtime_policy_sdk::export_policy!(FirstFit);
//!
//! // And its tests, natively, through the real ABI:
//! use airtime_policy_sdk::testing::SnapshotFixture;
//!
//! let outcome = SnapshotFixture::new()
//!     .node("small", 2, "A100", 40960)
//!     .node("big", 8, "H100", 81920)
//!     .pending_with("train", 4, 61440, |w| w.priority = 10)
//!     .pending("infer", 1, 20480)
//!     .pending("huge", 16, 1024)
//!     .evaluate(&FirstFit)
//!     .expect("the policy runs and the host accepts its decisions");
//!
//! assert_eq!(outcome.placement("train"), Some(("big", vec![0, 1, 2, 3])));
//! assert_eq!(outcome.placed_on("infer"), Some("small"));
//! assert_eq!(outcome.reason("huge"), Some("no ready node has 16 free GPUs with ≥ 1024 MiB"));
//! assert_eq!(outcome.logs[0].message, "placed 2 workloads");
//! ```
//!
//! Build the module with `cargo build --release --target wasm32-unknown-unknown -p my-policy` and run
//! it against a snapshot with `airtime-policy run target/wasm32-unknown-unknown/release/my_policy.wasm
//! --snapshot snapshot.json`. `sdk/README.md` walks through it from the template.
//!
//! # Map
//! - [`abi`]: records, encoding, decoding, [`AbiError`](abi::AbiError).
//! - [`guest`]: [`Policy`](guest::Policy), [`Context`](guest::Context), [`Failure`](guest::Failure),
//!   [`export_policy!`].
//! - [`plan`]: [`Plan`](plan::Plan), which keeps a cycle from taking a GPU twice.
//! - [`actions`]: the steps every policy repeats — order the queue, allocate (best fit or least
//!   fragmenting), reserve for the head of the queue, preempt for a class or reclaim a guarantee —
//!   composable, so a policy is a short pipeline of them.
//! - [`frag`]: fragmentation (Weng et al.'s measure) and [`FragPlacer`](frag::FragPlacer).
//! - [`fit`]: the placement toolkit, indexes that keep best-fit searches fast (free GPUs per node,
//!   host room, each node's GPUs tightest first, a per-need memo).
//! - [`params`]: the policy's JSON parameters, read without `serde`.
//! - [`check`]: the ABI's rules for decisions against their snapshot (hosts and tests use it).
//! - [`testing`]: [`SnapshotFixture`](testing::SnapshotFixture) and [`Outcome`](testing::Outcome).
//! - [`text`]: how guest text is cleaned and bounded before a host keeps it.
//! - [`owned`]: snapshots that own their strings; the JSON form with `serde`.
//! - Helpers on the records (free GPUs of a node, [`Gpu::fits`](abi::Gpu::fits), pending workloads
//!   by priority, the night window) are methods of [`Snapshot`](abi::Snapshot) and its records.

pub mod abi;
pub mod actions;
pub mod check;
pub mod fit;
pub mod frag;
pub mod gang;
pub mod guest;
pub mod owned;
pub mod params;
pub mod plan;
pub mod testing;
pub mod text;
mod view;

pub use view::{GpuNeed, gpus_in_words, model_allowed, same_model};

/// What a policy crate needs in scope.
pub mod prelude {
    pub use crate::abi::{
        Action, Decision, Gpu, LoadMetric, Node, NodeState, ReplicaVariant, Service, Settings, Sharing, Snapshot,
        Tenant, WHOLE_GPU_MILLI, Workload, WorkloadClass, WorkloadState,
    };
    pub use crate::frag::Workmix;
    pub use crate::guest::{Context, Failure, LogLevel, Policy};
    pub use crate::plan::Plan;
    pub use crate::view::{GpuNeed, gpus_in_words};
}
