//! Baseline **FGD** of Weng et al.'s simulator ("Beware of Fragmentation", USENIX ATC '23;
//! `hkust-adsl/kubernetes-scheduler-simulator`, `pkg/simulator/plugin/fgd_score.go` and
//! `pkg/utils/frag.go`), reimplemented from their code as `weng-best-fit` is, so that
//! `airtime-sim fill` can check its run of FGD against the published one and compare the SDK's
//! exact placer ([`FragPlacer`](airtime_policy_sdk::frag::FragPlacer), which `slo-first` uses)
//! with it. Not registered by the control plane.
//!
//! - Pending work in submission order, each once per cycle; priorities, classes and tenants ignored.
//! - Typical pods: the snapshot's workloads (in the fill, every pod arrived so far), CPU-only pods
//!   included, by (GPU thousandths, GPUs, CPU, models); the most popular kept until they cover 95%
//!   of the pods (their `GetTypicalPods` with `isInvolvedCpuPods`, threshold 95, step 1).
//! - A node's fragmentation: for each typical pod, weighted by its popularity, the free GPU
//!   thousandths it could not use there; a CPU-only pod counts all of them (their `XL`/`XR`).
//! - Score of a node: `⌊σ((F_before − F_after) / 1000) × 100⌋` — a sigmoid of the gradient in GPUs,
//!   truncated to an integer as their plugin does — the highest taken, ties to the node whose name
//!   sorts first (their simulator's `selectHost`, changed from Kubernetes' random pick "for
//!   reproducibility"). A share takes the GPU of the node with the best such score, the first on
//!   ties (their `gpusel FGD`); whole GPUs the free ones in device order. No preemption.
//!
//! Params: none.

use std::collections::{BTreeMap, HashMap};

use airtime_policy_sdk::frag::TaskKind;
use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct Fgd;

airtime_policy_sdk::export_policy!(Fgd);

/// Their popularity threshold for typical pods (`--pod-popularity-threshold`, default 95).
const TYPICAL_SHARE: f64 = 0.95;

impl Policy for Fgd {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let mut queue: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        queue.sort_by(|(_, a), (_, b)| a.submitted_ms.cmp(&b.submitted_ms).then_with(|| a.id.cmp(b.id)));
        let ready: Vec<u32> = snapshot.ready_nodes().map(|(n, _)| n).collect();
        let mut plan = Plan::new(snapshot);
        let mut typical: Option<Typical<'s>> = None;
        let mut placed = 0;
        // A cycle only takes capacity: a shape that fitted nowhere fits nowhere later in it.
        let mut no_fit: Vec<Shape<'s>> = Vec::new();
        for (index, w) in queue {
            let shape = shape(w);
            if no_fit.contains(&shape) {
                plan.keep_pending(index, format!("FGD: no ready node has {}", w.needs_in_words()))?;
                continue;
            }
            let typical = typical.get_or_insert_with(|| Typical::of(snapshot));
            // (score, node, gpus): the highest score, ties to the smallest node name.
            let mut best: Option<(i64, u32, Vec<u32>)> = None;
            for &node in &ready {
                let Some(gpus) = plan.gpus_on(index, node, |g| plan.free_milli(g)) else { continue };
                let Some((score, gpus)) = typical.score(&plan, w, node, gpus) else { continue };
                let name = snapshot.nodes[node as usize].name;
                if best
                    .as_ref()
                    .is_none_or(|b| score > b.0 || (score == b.0 && name < snapshot.nodes[b.1 as usize].name))
                {
                    best = Some((score, node, gpus));
                }
            }
            match best {
                Some((score, node, gpus)) => {
                    let reason = format!("FGD (Weng et al.): score {score} on {}", snapshot.nodes[node as usize].name);
                    plan.place(index, node, gpus, reason)?;
                    placed += 1;
                }
                None => {
                    no_fit.push(shape);
                    plan.keep_pending(index, format!("FGD: no ready node has {}", w.needs_in_words()))?;
                }
            }
        }
        ctx.info(format_args!("placed {placed}"));
        Ok(plan.into_decisions())
    }
}

/// A node's free CPU and its GPUs' (free thousandths, model), sorted.
type NodeState<'s> = (u32, Vec<(u32, &'s str)>);

/// A kind of pod: (GPU thousandths, GPUs, CPU, models).
type Kind<'s> = (u32, u32, u32, &'s str);

/// The typical pods: GPU kinds (weights summing to `1 − cpu_weight`) and the weight of the CPU-only
/// kinds, with node fragmentation memoised by node state for the cycle.
struct Typical<'s> {
    gpu: Workmix<'s>,
    cpu_weight: f64,
    memo: HashMap<NodeState<'s>, f64>,
}

impl<'s> Typical<'s> {
    fn of(snapshot: &Snapshot<'s>) -> Self {
        let mut counts: BTreeMap<Kind<'s>, u32> = BTreeMap::new();
        for w in snapshot.workloads.iter().filter(|w| !w.asks_mig()) {
            let (milli, count) = match (w.needs_gpu(), w.is_share()) {
                (false, _) => (0, 0),
                (true, true) => (w.gpu_milli, 1),
                (true, false) => (WHOLE_GPU_MILLI, w.gpu_count),
            };
            *counts.entry((milli, count, w.cpu_millis, w.gpu_models.trim())).or_default() += 1;
        }
        let total: u32 = counts.values().sum();
        let mut kinds: Vec<(Kind<'s>, u32)> = counts.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut kept = 0u32;
        let mut cut = 0;
        while cut < kinds.len() && f64::from(kept) < TYPICAL_SHARE * f64::from(total) {
            kept += kinds[cut].1;
            cut += 1;
        }
        kinds.truncate(cut);
        let cpu: u32 = kinds.iter().filter(|(k, _)| k.1 == 0).map(|(_, n)| n).sum();
        let cpu_weight = if kept == 0 { 0.0 } else { f64::from(cpu) / f64::from(kept) };
        let gpu =
            Workmix::new(kinds.iter().filter(|(k, _)| k.1 > 0).map(|&((milli, count, cpu_millis, models), n)| {
                TaskKind { milli, count, cpu_millis, models, weight: f64::from(n) }
            }));
        Typical { gpu, cpu_weight, memo: HashMap::new() }
    }

    /// Their node fragmentation, thousandths of a GPU: GPU kinds as the SDK measures them, CPU-only
    /// kinds all the free GPU capacity.
    fn fragmentation(&mut self, cpu_free: u32, mut gpus: Vec<(u32, &'s str)>) -> f64 {
        gpus.sort_unstable();
        let key = (cpu_free, gpus);
        if let Some(&f) = self.memo.get(&key) {
            return f;
        }
        let free: u32 = key.1.iter().map(|(f, _)| *f).sum();
        let f = (1.0 - self.cpu_weight) * self.gpu.node_fragmentation(key.1.iter().copied(), key.0)
            + self.cpu_weight * f64::from(free);
        self.memo.insert(key, f);
        f
    }

    /// The node's score for `w` and the GPUs it would take: for a share the best-scoring GPU (the
    /// first on ties), otherwise `gpus` (the plan's fit).
    fn score(&mut self, plan: &Plan<'_, 's>, w: &Workload<'_>, node: u32, gpus: Vec<u32>) -> Option<(i64, Vec<u32>)> {
        let snapshot = plan.snapshot();
        let state: Vec<(u32, u32, &'s str)> = snapshot
            .node_gpus(node)
            .filter(|(_, g)| !g.is_mig())
            .map(|(g, gpu)| (g, plan.free_milli(g), gpu.model))
            .collect();
        let cpu = plan.cpu_free(node);
        let before = self.fragmentation(cpu, state.iter().map(|&(_, f, m)| (f, m)).collect());
        let mut after = |taken: &[u32], milli: u32| {
            let gpus = state.iter().map(|&(g, f, m)| (if taken.contains(&g) { f.saturating_sub(milli) } else { f }, m));
            let f = self.fragmentation(cpu.saturating_sub(w.cpu_millis), gpus.collect());
            (sigmoid((before - f) / 1000.0) * 100.0) as i64
        };
        if w.is_share() {
            let mut best: Option<(i64, u32)> = None;
            for &(g, _, _) in &state {
                if plan.fits_share(w, g) {
                    let score = after(&[g], w.gpu_milli);
                    if best.is_none_or(|(s, _)| score > s) {
                        best = Some((score, g));
                    }
                }
            }
            best.map(|(score, g)| (score, vec![g])).or_else(|| Some((after(&gpus, WHOLE_GPU_MILLI), gpus)))
        } else {
            Some((after(&gpus, WHOLE_GPU_MILLI), gpus))
        }
    }
}

/// What decides where a workload fits: GPUs, thousandths and memory of each, models, host CPU and
/// memory, a container engine.
type Shape<'s> = (u32, u32, u32, &'s str, u32, u32, bool);

fn shape<'s>(w: &Workload<'s>) -> Shape<'s> {
    (w.gpu_count, w.gpu_milli, w.gpu_memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::abi::Sharing;
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn a_share_goes_where_what_it_leaves_still_fits_the_typical_shares() {
        // Mostly 600/1000 shares arrive. GPU 0 has 600 free, GPU 1 700, GPU 2 400: best fit puts a
        // 100 share on GPU 2, FGD on GPU 1, the one GPU where what is left still fits a 600.
        let outcome = SnapshotFixture::new()
            .node("n", 3, "V100", 16384)
            .sharing("n", Sharing::Mps)
            .node("m", 2, "V100", 16384)
            .sharing("m", Sharing::Mps)
            .running_share("a", "n", 0, 400, 0)
            .running_share("b", "n", 1, 300, 0)
            .running_share("c", "n", 2, 600, 0)
            .running_share("d", "m", 0, 600, 0)
            .running_share("e", "m", 1, 600, 0)
            .pending_share("small", 100, 0)
            .evaluate(&Fgd)
            .expect("valid decisions");
        assert_eq!(outcome.placement("small"), Some(("n", vec![1])));
    }
}
