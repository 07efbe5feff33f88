//! Node agents played by the test itself: enrolled and registered over the API like a real agent,
//! then driven with exactly the reports a story (or the telemetry benchmark) needs.

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::{Api, ControlPlane};

/// A node enrolled and registered over the API, and a client acting with its credential.
#[derive(Clone)]
pub struct EnrolledNode {
    pub name: String,
    pub node_id: String,
    /// Authenticated with the node's credential.
    pub agent: Api,
}

impl EnrolledNode {
    /// Enrols `name` with a fresh enrolment token and registers it with `gpus` simulated H100s.
    pub async fn register(cp: &ControlPlane, name: &str, gpus: u32) -> anyhow::Result<EnrolledNode> {
        Self::register_at(&cp.url, &cp.admin_token, name, gpus).await
    }

    /// [`EnrolledNode::register`] with the control plane's address and an admin's token (for tasks
    /// that cannot borrow the [`ControlPlane`]).
    pub async fn register_at(url: &str, admin_token: &str, name: &str, gpus: u32) -> anyhow::Result<EnrolledNode> {
        let anonymous = Api::new(url);
        let made =
            anonymous.with_token(admin_token).created("/api/v1/enrolment-tokens", &json!({"node_name": name})).await?;
        let token = made["token"].as_str().context("no enrolment token")?;
        let enrolled =
            anonymous.created("/api/v1/agent/enrol", &json!({"enrolment_token": token, "name": name})).await?;
        let credential = enrolled["credential"].as_str().context("no node credential")?;
        let agent = anonymous.with_token(credential);
        let gpus: Vec<Value> = (0..gpus)
            .map(|i| json!({"index": i, "model": "H100-SXM", "memory_mb": 81920, "simulated": true}))
            .collect();
        let registered = agent
            .created(
                "/api/v1/agent/register",
                &json!({"name": name, "hostname": name, "cpu_millis": 64000, "memory_mb": 524288,
                        "agent_version": "0.1.0", "gpu_source": "simulated", "gpus": gpus}),
            )
            .await?;
        let node_id = registered["node_id"].as_str().context("no node id")?.to_owned();
        Ok(EnrolledNode { name: name.to_owned(), node_id, agent })
    }

    /// The path of this node's telemetry.
    pub fn telemetry_path(&self) -> String {
        format!("/api/v1/agent/nodes/{}/telemetry", self.node_id)
    }
}

/// A telemetry report: host CPU `cpu`, and GPU `i` at utilisation `gpu_util[i]` (memory, temperature
/// and power derived from it, so every field is checked).
pub fn telemetry_report(cpu: f64, gpu_util: &[f64]) -> Value {
    let gpus: Vec<Value> = gpu_util
        .iter()
        .enumerate()
        .map(|(i, u)| {
            json!({"index": i, "util": u, "memory_used_mb": (u * 80000.0) as u64, "temperature_c": 40.0 + u * 40.0,
                   "power_w": 100.0 + u * 600.0, "ecc_errors": 0})
        })
        .collect();
    json!({"cpu_util": cpu, "memory_used_mb": 65536, "gpus": gpus})
}
