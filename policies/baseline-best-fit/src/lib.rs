//! Baseline **BestFit** of Weng et al.'s simulator ("Beware of Fragmentation", USENIX ATC '23;
//! `hkust-adsl/kubernetes-scheduler-simulator`, `pkg/simulator/plugin/best_fit_score.go`), the
//! reference `airtime-sim fill` checks its protocol against: reimplemented from the scoring in their
//! code, so that its allocation in the fill experiment lands within about a point of the published
//! one. Not registered by the control plane (`airtime_builtin_policies::BASELINES`).
//!
//! - Pending work in submission order, each once per cycle; priorities, classes and tenants ignored.
//! - A node is feasible when it has the host CPU and memory free, the GPU model allowed, and the
//!   GPUs: for a share of one GPU, a GPU with that many thousandths free (shared, or a free one that
//!   is not shared); for whole GPUs, that many free.
//! - Score, lower is better: `½ (cpu_free − cpu) / 128 cores + ½ (gpu_free − gpu) / 8 GPUs`, GPU
//!   capacity in thousandths summed over the node; as there, turned into an integer in 0..=100
//!   (`⌊(1 − score) × 100⌋`), the highest taken, ties broken at random (Kubernetes' host selection)
//!   — here by a hash of the workload and the node, so a run is reproducible.
//! - The GPU: for a share, the GPU with the least free that holds it (their `gpusel best`); whole
//!   GPUs in device order. No preemption.
//!
//! Params: none.

use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct BestFit;

airtime_policy_sdk::export_policy!(BestFit);

/// Their normalising constants (`open-gpu-share/utils/const.go`): 128 cores, 8 GPUs.
const MAX_SPEC_CPU_MILLI: f64 = 128_000.0;
const MAX_SPEC_GPU_MILLI: f64 = 8_000.0;

impl Policy for BestFit {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let mut queue: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        queue.sort_by(|(_, a), (_, b)| a.submitted_ms.cmp(&b.submitted_ms).then_with(|| a.id.cmp(b.id)));
        let ready: Vec<u32> = snapshot.ready_nodes().map(|(n, _)| n).collect();
        let mut plan = Plan::new(snapshot);
        let mut placed = 0;
        // A cycle only takes capacity: a shape that fitted nowhere fits nowhere later in it.
        let mut no_fit: Vec<Shape<'s>> = Vec::new();
        for (index, w) in queue {
            let shape = shape(w);
            if no_fit.contains(&shape) {
                plan.keep_pending(index, format!("BestFit: no ready node has {}", w.needs_in_words()))?;
                continue;
            }
            // (integer score, tie-break hash, node, gpus)
            let mut best: Option<(i64, u64, u32, Vec<u32>)> = None;
            for &node in &ready {
                let Some(gpus) = plan.gpus_on(index, node, |g| plan.free_milli(g)) else { continue };
                let gpu_free: u32 = snapshot.node_gpus(node).map(|(g, _)| plan.free_milli(g)).sum();
                let score = 0.5 * f64::from(plan.cpu_free(node) - w.cpu_millis) / MAX_SPEC_CPU_MILLI
                    + 0.5 * f64::from(gpu_free.saturating_sub(w.gpu_demand_milli() * u32::from(w.needs_gpu())))
                        / MAX_SPEC_GPU_MILLI;
                let key = (((1.0 - score) * 100.0) as i64, tie(w.id, node));
                if best.as_ref().is_none_or(|b| key > (b.0, b.1)) {
                    best = Some((key.0, key.1, node, gpus));
                }
            }
            match best {
                Some((score, _, node, gpus)) => {
                    let reason =
                        format!("BestFit (Weng et al.): score {score} on {}", snapshot.nodes[node as usize].name);
                    plan.place(index, node, gpus, reason)?;
                    placed += 1;
                }
                None => {
                    no_fit.push(shape);
                    plan.keep_pending(index, format!("BestFit: no ready node has {}", w.needs_in_words()))?;
                }
            }
        }
        ctx.info(format_args!("placed {placed}"));
        Ok(plan.into_decisions())
    }
}

/// What decides where a workload fits: GPUs, thousandths and memory of each, models, host CPU and
/// memory, a container engine.
type Shape<'s> = (u32, u32, u32, &'s str, u32, u32, bool);

fn shape<'s>(w: &Workload<'s>) -> Shape<'s> {
    (w.gpu_count, w.gpu_milli, w.gpu_memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container)
}

/// A stable pseudo-random tie-break (FNV-1a of the workload's id, mixed with the node).
fn tie(id: &str, node: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain(node.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::abi::Sharing;
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn the_node_with_the_least_left_over_gets_the_work() {
        let outcome = SnapshotFixture::new()
            .node("roomy", 8, "V100", 16384)
            .node("tight", 2, "V100", 16384)
            .pending("one", 1, 0)
            .evaluate(&BestFit)
            .expect("valid decisions");
        assert_eq!(outcome.placement("one"), Some(("tight", vec![0])));
    }

    #[test]
    fn a_share_takes_the_fullest_gpu_that_holds_it() {
        let outcome = SnapshotFixture::new()
            .node("n", 2, "V100", 16384)
            .sharing("n", Sharing::Mps)
            .running_share("a", "n", 0, 300, 0)
            .running_share("b", "n", 1, 600, 0)
            .pending_share("quarter", 250, 0)
            .evaluate(&BestFit)
            .expect("valid decisions");
        assert_eq!(outcome.placement("quarter"), Some(("n", vec![1])));
    }
}
