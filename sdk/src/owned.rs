//! Snapshot records that own their strings: the JSON form of a snapshot (with the `serde` feature)
//! and the storage behind [`crate::testing::SnapshotFixture`].
//!
//! The borrowed [`Snapshot`] is what crosses the ABI; an [`OwnedSnapshot`] turns into one with
//! [`OwnedSnapshot::as_snapshot`] and is made from one with `From<&Snapshot>`. Host tools read and
//! write this form (`airtime-policy run --snapshot snapshot.json`); guests never need it.

/// The owned twins of the records, generated from their one declaration in `sdk/src/abi.rs`.
pub use crate::abi::{OwnedArrival, OwnedGpu, OwnedNode, OwnedService, OwnedTenant, OwnedWorkload};
use crate::abi::{Settings, Snapshot};

/// A [`Snapshot`] that owns its strings.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OwnedSnapshot {
    pub now_ms: u64,
    pub tenants: Vec<OwnedTenant>,
    pub nodes: Vec<OwnedNode>,
    pub gpus: Vec<OwnedGpu>,
    pub workloads: Vec<OwnedWorkload>,
    pub settings: Option<Settings>,
    /// JSON text.
    pub params: String,
    pub scope_tenant: Option<u32>,
    /// ABI 1.3.
    pub services: Vec<OwnedService>,
    /// ABI 1.9.
    pub arrivals: Vec<OwnedArrival>,
}

impl Default for OwnedSnapshot {
    fn default() -> Self {
        OwnedSnapshot {
            now_ms: 0,
            tenants: Vec::new(),
            nodes: Vec::new(),
            gpus: Vec::new(),
            workloads: Vec::new(),
            settings: None,
            params: "{}".to_owned(),
            scope_tenant: None,
            services: Vec::new(),
            arrivals: Vec::new(),
        }
    }
}

impl OwnedSnapshot {
    /// The borrowed form, ready for [`crate::abi::encode_snapshot`].
    pub fn as_snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            now_ms: self.now_ms,
            tenants: self.tenants.iter().map(OwnedTenant::as_tenant).collect(),
            nodes: self.nodes.iter().map(OwnedNode::as_node).collect(),
            gpus: self.gpus.iter().map(OwnedGpu::as_gpu).collect(),
            workloads: self.workloads.iter().map(OwnedWorkload::as_workload).collect(),
            settings: self.settings,
            params: &self.params,
            scope_tenant: self.scope_tenant,
            services: self.services.iter().map(OwnedService::as_service).collect(),
            arrivals: self.arrivals.iter().map(OwnedArrival::as_arrival).collect(),
        }
    }
}

impl From<&Snapshot<'_>> for OwnedSnapshot {
    fn from(s: &Snapshot<'_>) -> Self {
        OwnedSnapshot {
            now_ms: s.now_ms,
            tenants: s.tenants.iter().map(OwnedTenant::from).collect(),
            nodes: s.nodes.iter().map(OwnedNode::from).collect(),
            gpus: s.gpus.iter().map(OwnedGpu::from).collect(),
            workloads: s.workloads.iter().map(OwnedWorkload::from).collect(),
            settings: s.settings,
            params: s.params.to_owned(),
            scope_tenant: s.scope_tenant,
            services: s.services.iter().map(OwnedService::from).collect(),
            arrivals: s.arrivals.iter().map(OwnedArrival::from).collect(),
        }
    }
}
