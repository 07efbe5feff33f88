//! `fair-share`: a built-in platform policy that shares the fleet between tenants by weight, over
//! time. A tenant that used many GPU-hours lately waits behind one that used few, so a team that
//! submits a thousand jobs cannot crowd out a team that submits ten.
//!
//! **Weighted share.** Each tenant's standing is its *weighted share*, in GPU-hours per unit of
//! weight:
//!
//! ```text
//! share = (usage_weight × decayed_gpu_hours + held_gpu_hours × GPUs held now) / weight
//! ```
//!
//! `decayed_gpu_hours` is the tenant's usage history, decayed with the platform's half-life, as the
//! host puts it in the snapshot; a GPU held now counts as `held_gpu_hours` (one by default) more, so
//! what a tenant runs now weighs on top of what it ran. A weight of 0 counts as 1.
//!
//! **Order.** Pending work is served one workload at a time from the tenant with the smallest share
//! (ties: table order), and the share is recomputed after each GPU placement, so two tenants with
//! equal standing alternate (progressive filling, DRF-style on GPUs). A tenant *below its
//! guarantee* (holding fewer than its `guaranteed_gpus`) goes before every tenant that is not,
//! whatever its history. Within a tenant, its work goes by effective priority (the host's night
//! bonus for training applied), then submission time; with `realtime_first`, its real-time
//! inference goes before the rest of its work.
//!
//! **Placement.** CPU-only work, and CPU-capable work while a CPU node has room, goes to a CPU node
//! (the tightest CPU fit), leaving the GPUs to work that needs them; CPU-only work with no CPU node
//! free may use the spare host CPU of a GPU node (what is free beyond a per-GPU share of its CPU and
//! memory kept for each of its free GPUs, so GPUs never sit idle for want of host CPU); it is decided
//! at the end of the cycle, once the GPU work has taken what it needs. GPU work is a gang on one node, best fit: the node
//! with the fewest free GPUs left over, then the least GPU memory left over, with GPUs that fit its
//! memory by live telemetry and its allowed models, and the host CPU and memory it asks for. A
//! container workload only goes to (and only reclaims on) a node with a container engine (ABI 1.4);
//! with none ready it waits ("no ready node runs containers").
//!
//! **Quotas and the burst reserve.** A tenant may hold more than its guarantee only if it may
//! borrow. Non-preemptible work other than real-time inference may not leave fewer than
//! `burst_reserve_gpus` GPUs free.
//!
//! **Reclaim** (the only preemption; off with `"reclaim": false`). When work a tenant is guaranteed
//! (its GPUs held plus the workload's stay within `guaranteed_gpus`) does not fit, the policy
//! preempts preemptible work of the tenant *most over its fair share*: of the tenants holding more
//! than their guarantee and more than their fair part of the ready GPUs (split by weight among the
//! tenants with GPU work), the one with the largest weighted share that can make room; on the node
//! where the fewest of its workloads do (lowest priority first, then the most recently started). It
//! never preempts real-time inference, never takes a tenant below its own guarantee, and leaves work
//! that has run less than `min_runtime_s` alone (the waiting workload says for how long). The free
//! GPUs of that node are set aside for the waiting workload; while its victims stop (the policy sees
//! them as `stopping`), it waits for them and preempts no more.
//!
//! **Reasons.** Every pending workload gets one: placed ("best fit on gpu-a: GPUs [0,1] (H100), 6 left
//! free there; fair share: tenant product's turn at 3.5 weighted GPU-hours, the least with work
//! waiting"), or why not ("fair share: tenant research has 12.0 weighted GPU-hours vs 3.5 for product;
//! waiting behind product's work (no ready node has 4 free GPUs with ≥ 40960 MiB left)", "no ready
//! node has 16 GPUs with ≥ 1024 MiB, even with all its GPUs free", "quota used up: …", "held for the
//! burst reserve: …").
//!
//! Params (JSON, all optional):
//! - `usage_weight` (number ≥ 0, default 1): how much the decayed history counts; 0 shares by the
//!   GPUs held now only.
//! - `held_gpu_hours` (number ≥ 0, default 1): the GPU-hours each GPU held now counts for; 0 shares by
//!   history only (the share then changes only between cycles).
//! - `reclaim` (bool, default true): preempt for tenants below their guarantee.

mod cycle;
mod fleet;
mod ledger;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use airtime_policy_sdk::prelude::*;

use crate::cycle::Cycle;

/// The policy. Stateless: everything it needs is in the snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct FairShare;

airtime_policy_sdk::export_policy!(FairShare);

impl Policy for FairShare {
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        Config::read(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let config = Config::read(ctx.params())?;
        let settings = snapshot.settings_or_default();

        // Each tenant's queue, in its own order; the tenants are then served by share.
        let mut pending: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        pending.sort_by_cached_key(|(index, w)| {
            let realtime = settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
            (!realtime, Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
        });
        let pending_count = pending.len();
        let mut queues: Vec<Vec<(u32, &Workload<'s>)>> = vec![Vec::new(); snapshot.tenants.len()];
        for (index, w) in pending {
            if let Some(queue) = queues.get_mut(w.tenant as usize) {
                queue.push((index, w));
            }
        }

        let mut cycle = Cycle::new(snapshot, settings, config, &queues);
        let mut next = vec![0usize; queues.len()];
        let mut version = vec![0u32; queues.len()];
        let mut heap = BinaryHeap::new();
        for (t, queue) in queues.iter().enumerate() {
            if !queue.is_empty() {
                heap.push(Reverse((cycle.ledger.rank(t as u32), t as u32, 0u32)));
            }
        }
        while let Some(Reverse((_, t, entry_version))) = heap.pop() {
            let ti = t as usize;
            if entry_version != version[ti] {
                continue; // re-ranked since: a newer entry stands for it
            }
            let Some(&(index, w)) = queues[ti].get(next[ti]) else { continue };
            next[ti] += 1;
            cycle.decide(index, w)?;
            // The served tenant, and any tenant whose work was preempted, take their new rank.
            let mut changed = std::mem::take(&mut cycle.changed);
            changed.insert(t);
            for c in changed {
                let ci = c as usize;
                if next[ci] < queues[ci].len() {
                    version[ci] += 1;
                    heap.push(Reverse((cycle.ledger.rank(c), c, version[ci])));
                }
            }
        }

        cycle.finish()?;
        let (placed, preempted) = (cycle.placed, cycle.preempted_count);
        let free_left = cycle.fleet.plan.free_gpu_total();
        ctx.info(format_args!(
            "fair share: placed {placed} of {pending_count} pending workloads, preempting {preempted}; {free_left} GPUs left free"
        ));
        let standings = cycle.ledger.standings(20);
        if !standings.is_empty() {
            ctx.debug(format_args!("weighted GPU-hours after this cycle: {standings}"));
        }
        Ok(cycle.fleet.plan.into_decisions())
    }
}

/// The params, checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) usage_weight: f64,
    pub(crate) held_gpu_hours: f64,
    pub(crate) reclaim: bool,
}

impl Config {
    fn read(params: &airtime_policy_sdk::params::Params<'_>) -> Result<Self, Failure> {
        let non_negative = |key: &str| -> Result<f64, Failure> {
            let value: f64 = params.get_or(key, 1.0)?;
            if value.is_finite() && value >= 0.0 {
                Ok(value)
            } else {
                Err(Failure::new(format!("params.{key}: expected a finite number ≥ 0, found {value}")))
            }
        };
        Ok(Config {
            usage_weight: non_negative("usage_weight")?,
            held_gpu_hours: non_negative("held_gpu_hours")?,
            reclaim: params.get_or("reclaim", true)?,
        })
    }
}

#[cfg(test)]
mod tests;
