//! Airtime node agent: registers a server with the control plane, reports its telemetry, and runs
//! and stops the workloads assigned to it.
//!
//! Code map:
//! - [`config`]: flags and `AIRTIME_…` variables, parsed without touching the environment in tests;
//! - [`protocol`]: the messages of `docs/agent-protocol.md`;
//! - [`client`]: one typed method per protocol call, no retries;
//! - [`credential`]: the node's credential, from a one-time enrolment token, kept in `--state-dir`;
//! - [`telemetry`]: host CPU/memory (`sysinfo`), real GPUs (NVML) and simulated GPUs behind one
//!   trait, shared as the node's `--gpu-sharing` mode says, with per-workload share samples;
//! - [`runner`]: workload processes — spawn with their GPUs' environment, SIGTERM/SIGKILL, exit
//!   reports — with no HTTP, and the MPS control daemon;
//! - [`logs`]: workloads' output, chunked, bounded and shipped to the control plane;
//! - [`procfs`]: a process's parent and group, read from `/proc`;
//! - [`containers`]: the node's container engine (Podman or Docker): detection, `run`, stop and
//!   remove by name, and the containers an earlier agent left, found by label;
//! - [`isolation`]: what keeps a tenant's workload on its side of the node: environments as
//!   data (env files), the engine client's fixed environment, mount sources resolved without
//!   symbolic links, process workloads' own user and directory, the kinds of work the node takes;
//! - [`tether`]: the agent binary's `__tether` mode, which each workload runs under so its work
//!   dies with the agent (parent-death signal, then SIGTERM and SIGKILL after the grace period);
//! - [`agent`]: the loops (register, heartbeat, long-poll, reconcile, deliver events).
//!
//! Invariants: only `client` speaks HTTP; only `runner` (and the engine commands of `containers`
//! it runs) creates or signals processes in the agent (the `tether`, a process of its own, signals
//! only its workload's group); the reconciler never awaits the network, so stops and starts do not
//! wait on the control plane.

#![forbid(unsafe_code)]

pub mod agent;
mod backoff;
pub mod client;
pub mod config;
pub mod containers;
pub mod credential;
pub mod isolation;
pub mod logs;
pub mod procfs;
pub mod protocol;
pub mod runner;
pub mod serving;
pub mod telemetry;
pub mod tether;

pub use agent::run;
pub use config::Config;
