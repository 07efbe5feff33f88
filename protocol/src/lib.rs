//! The wire types, one definition each: the agent protocol (`docs/agent-protocol.md`: what node
//! agents send the control plane, and the checks each message passes before anything is written),
//! the domain's shared enums ([`workload`]) and the priority settings ([`settings`]). The control
//! plane's handlers and OpenAPI document, the node agent, the scheduling core and the fuzz targets
//! (`fuzz/fuzz_targets/agent_messages.rs`) all use these.
//!
//! Requests the control plane receives refuse unknown fields (`deny_unknown_fields`): a typo in an
//! agent's message is an error, never silently dropped data.

pub mod agent;
pub mod container;
pub mod model;
pub mod service;
pub mod serving;
pub mod settings;
pub mod sharing;
pub mod text;
pub mod workload;
