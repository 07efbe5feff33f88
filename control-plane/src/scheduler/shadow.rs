//! Shadow mode: a candidate policy version decides beside the active one every cycle, on the same
//! snapshot; its decisions are checked like real ones, compared with the active policy's, recorded,
//! and never applied.

use std::collections::BTreeMap;

use serde_json::json;
use sqlx::PgPool;

use crate::policies::Selected;
use crate::scheduler::Failure;
use crate::scheduler::check::{self, Proposal, Scope};
use crate::scheduler::fleet_view::FleetView;
use crate::scheduler::record::Decider;

#[derive(Debug)]
pub struct Compared {
    pub agreed: usize,
    pub differed: usize,
    pub diff: serde_json::Value,
    pub error: Option<String>,
}

/// What a decision does, without its wording: two policies agree when these are equal.
fn effect(fleet: &FleetView, p: &Proposal) -> String {
    match p {
        Proposal::Place { node, gpus, .. } if gpus.is_empty() => format!("place on {} (CPU)", fleet.nodes[*node].name),
        Proposal::Place { node, gpus, .. } => {
            let mut devices: Vec<u32> = gpus.iter().map(|&g| fleet.gpus[g].device_index).collect();
            devices.sort_unstable();
            format!("place on {} GPUs {devices:?}", fleet.nodes[*node].name)
        }
        Proposal::Preempt { .. } => "preempt".into(),
        Proposal::KeepPending { .. } => "keep pending".into(),
    }
}

pub fn compare(fleet: &FleetView, active: &[Proposal], shadow: Result<Vec<Proposal>, Failure>) -> Compared {
    let shadow = match shadow {
        Ok(proposals) => check::check(fleet, Scope::Platform, proposals),
        Err(failure) => {
            return Compared {
                agreed: 0,
                differed: 0,
                diff: json!([]),
                error: Some(format!("{}: {}", failure.kind, failure.message)),
            };
        }
    };
    let by_workload = |ps: &[Proposal]| -> BTreeMap<usize, (String, String)> {
        ps.iter()
            .map(|p| {
                let reason = match p {
                    Proposal::Place { reason, .. }
                    | Proposal::Preempt { reason, .. }
                    | Proposal::KeepPending { reason, .. } => reason.clone(),
                };
                (p.workload(), (effect(fleet, p), reason))
            })
            .collect()
    };
    let a = by_workload(active);
    let s = by_workload(&shadow.accepted);
    let mut agreed = 0;
    let mut diff = Vec::new();
    for w in a.keys().chain(s.keys()).copied().collect::<std::collections::BTreeSet<_>>() {
        let (ae, se) = (a.get(&w), s.get(&w));
        if ae.map(|x| &x.0) == se.map(|x| &x.0) {
            agreed += 1;
            continue;
        }
        let workload = &fleet.workloads[w];
        diff.push(json!({
            "workload_id": workload.id,
            "workload_name": workload.name,
            "active": ae.map(|(e, r)| json!({"decision": e, "reason": r})),
            "shadow": se.map(|(e, r)| json!({"decision": e, "reason": r})),
        }));
    }
    for r in &shadow.refused {
        diff.push(json!({"refused": r.reason, "workload_id": r.workload.map(|w| fleet.workloads[w].id)}));
    }
    Compared { agreed, differed: diff.len(), diff: serde_json::Value::Array(diff), error: None }
}

pub async fn record(
    db: &PgPool,
    cycle_id: i64,
    candidate: &Selected,
    active: &Decider,
    compared: &Compared,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO shadow_results (cycle_id, scope, shadow_version_id, active_policy_name, agreed, differed, diff, error) \
         VALUES ($1, 'platform', $2, $3, $4, $5, $6, $7)",
    )
    .bind(cycle_id)
    .bind(candidate.policy.version_id)
    .bind(&active.policy_name)
    .bind(compared.agreed as i32)
    .bind(compared.differed as i32)
    .bind(&compared.diff)
    .bind(&compared.error)
    .execute(db)
    .await?;
    Ok(())
}
