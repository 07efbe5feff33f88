//! Baseline **Random** of Weng et al.'s simulator ("Beware of Fragmentation", USENIX ATC '23;
//! `hkust-adsl/kubernetes-scheduler-simulator`, `pkg/simulator/plugin/random_score.go` with
//! `gpusel random`): the floor of the fill experiment `airtime-sim fill` reproduces. Not registered
//! by the control plane (`airtime_builtin_policies::BASELINES`).
//!
//! - Pending work in submission order, each once per cycle; priorities, classes and tenants ignored.
//! - A feasible node (host CPU and memory free, the GPU model allowed, the GPUs free: for a share of
//!   one GPU, a GPU with that many thousandths free) chosen uniformly at random; for a share, a
//!   random GPU of it that holds the share; whole GPUs in device order. No preemption.
//! - "Random" is a hash of the workload's id and the candidate (node or GPU), so a run is
//!   reproducible and two workloads draw independently.
//!
//! Params: none.

use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct Random;

airtime_policy_sdk::export_policy!(Random);

impl Policy for Random {
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
                plan.keep_pending(index, format!("Random: no ready node has {}", w.needs_in_words()))?;
                continue;
            }
            // The feasible node with the smallest draw: a uniform choice among them.
            let choice = ready
                .iter()
                .filter_map(|&node| {
                    plan.gpus_on(index, node, |g| draw(w.id, 1, g)).map(|gpus| (draw(w.id, 0, node), node, gpus))
                })
                .min_by_key(|(d, node, _)| (*d, *node));
            match choice {
                Some((_, node, gpus)) => {
                    let reason = format!("Random (Weng et al.): {}", snapshot.nodes[node as usize].name);
                    plan.place(index, node, gpus, reason)?;
                    placed += 1;
                }
                None => {
                    no_fit.push(shape);
                    plan.keep_pending(index, format!("Random: no ready node has {}", w.needs_in_words()))?;
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

/// A stable pseudo-random draw for (workload, what is drawn, candidate): FNV-1a, then a
/// SplitMix64 finaliser so neighbouring candidates draw unrelated values.
fn draw(id: &str, what: u8, candidate: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain([what]).chain(candidate.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn work_spreads_over_the_feasible_nodes() {
        let mut fixture = SnapshotFixture::new().node("a", 8, "V100", 16384).node("b", 8, "V100", 16384);
        for i in 0..8 {
            fixture = fixture.pending(&format!("w{i}"), 1, 0);
        }
        let outcome = fixture.evaluate(&Random).expect("valid decisions");
        let on_a = (0..8).filter(|i| outcome.placed_on(&format!("w{i}")) == Some("a")).count();
        assert!((1..8).contains(&on_a), "{on_a} of 8 on a: not spread");
    }

    #[test]
    fn work_only_goes_where_it_fits() {
        let outcome = SnapshotFixture::new()
            .node("small", 1, "V100", 16384)
            .node("big", 4, "V100", 16384)
            .pending("gang", 4, 0)
            .evaluate(&Random)
            .expect("valid decisions");
        assert_eq!(outcome.placement("gang"), Some(("big", vec![0, 1, 2, 3])));
    }
}
