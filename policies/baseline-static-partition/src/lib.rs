//! Baseline **static partition**: the common practice of a dedicated inference pool and a separate
//! training pool (two node pools, or two Kueue cluster queues without borrowing, or two Slurm
//! partitions). A baseline the simulator (`sim/`) compares Airtime's policies against; not
//! registered by the control plane (`airtime_builtin_policies::BASELINES`).
//!
//! - **Pools.** GPU nodes, in the snapshot's order (ready or not, so the pools do not move when a
//!   node drains), join the inference pool until it holds at least `inference_gpu_share` of all
//!   GPUs; the other GPU nodes are the training pool.
//! - **Who goes where.** `realtime_inference`, `batch_inference` and `embeddings` run only in the
//!   inference pool; every other class only in the training pool, so neither uses the other's idle
//!   GPUs (the waste the simulator measures). Work with no GPUs may run on any ready node's CPU.
//! - **Order and fit.** Priority (highest first), then submission, then table order; each workload
//!   on the first ready node of its pool, in snapshot order, where it fits now ([`Plan::first_fit`]:
//!   free GPUs of an allowed model with the memory, host CPU and memory; a container workload only
//!   on a node with a container engine, ABI 1.4). What does not fit is
//!   skipped (no head-of-line blocking); nothing is preempted; no CPU fallback for GPU work.
//!
//! Params: `inference_gpu_share` (a number from 0 to 1, default 0.3); activation refuses anything
//! else.

use std::collections::BTreeMap;

use airtime_policy_sdk::params::Params;
use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct StaticPartition;

airtime_policy_sdk::export_policy!(StaticPartition);

/// The share of GPUs the inference pool gets unless the params say otherwise.
pub const DEFAULT_INFERENCE_GPU_SHARE: f64 = 0.3;

/// What one node of a pool must offer a workload: (GPU count, MiB per GPU, models, mCPU, MiB, a
/// container engine). A cycle only takes resources, so a shape that fits nowhere in its pool fits
/// nowhere later either.
type Shape<'a> = (Pool, u32, u32, &'a str, u32, u32, bool);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pool {
    Inference,
    Training,
    /// CPU-only work: any ready node.
    Cpu,
}

impl Pool {
    fn of(workload: &Workload<'_>) -> Pool {
        match workload.class {
            _ if !workload.needs_gpu() => Pool::Cpu,
            WorkloadClass::RealtimeInference | WorkloadClass::BatchInference | WorkloadClass::Embeddings => {
                Pool::Inference
            }
            _ => Pool::Training,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Pool::Inference => "inference pool",
            Pool::Training => "training pool",
            Pool::Cpu => "fleet's CPU",
        }
    }
}

/// The share, read the one way evaluation and activation both use.
fn inference_share(params: &Params<'_>) -> Result<f64, Failure> {
    let share: f64 = params.get_or("inference_gpu_share", DEFAULT_INFERENCE_GPU_SHARE)?;
    if !(0.0..=1.0).contains(&share) {
        return Err(Failure::new(format!(
            "params.inference_gpu_share: the share of GPUs for the inference pool must be between 0 and 1, found {share}"
        )));
    }
    Ok(share)
}

/// Per node, whether it is in the inference pool: GPU nodes in snapshot order until the pool holds
/// at least `share` of all GPUs.
fn inference_pool(snapshot: &Snapshot<'_>, share: f64) -> Vec<bool> {
    let total: u32 = snapshot.nodes.iter().map(|n| n.gpu_count).sum();
    // The tolerance keeps 0.3 × 10 (3.0000000000000004 in floating point) at 3 GPUs.
    let target = share * f64::from(total) - 1e-9;
    let mut pooled = 0u32;
    snapshot
        .nodes
        .iter()
        .map(|node| {
            let join = node.has_gpus() && f64::from(pooled) < target;
            if join {
                pooled += node.gpu_count;
            }
            join
        })
        .collect()
}

impl Policy for StaticPartition {
    fn validate_params(&self, params: &Params<'_>) -> Result<(), Failure> {
        inference_share(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let share = inference_share(ctx.params())?;
        let in_inference = inference_pool(snapshot, share);
        let pool_of_node = |node: u32, n: &Node<'_>| match n.has_gpus() {
            false => None,
            true if in_inference[node as usize] => Some(Pool::Inference),
            true => Some(Pool::Training),
        };
        let gpus_in = |pool: Pool| -> u32 {
            snapshot.nodes_indexed().filter(|&(i, n)| pool_of_node(i, n) == Some(pool)).map(|(_, n)| n.gpu_count).sum()
        };
        let (inference_gpus, training_gpus) = (gpus_in(Pool::Inference), gpus_in(Pool::Training));
        // Per pool, whether a ready node of it has a container engine (container work needs one).
        let engine_in = |pool: Pool| {
            snapshot.ready_nodes().any(|(i, n)| n.containers && (pool == Pool::Cpu || pool_of_node(i, n) == Some(pool)))
        };
        let engines = [engine_in(Pool::Inference), engine_in(Pool::Training), engine_in(Pool::Cpu)];

        let mut plan = Plan::new(snapshot);
        let mut no_room: BTreeMap<Shape<'s>, String> = BTreeMap::new();
        let mut placed = 0;
        for (index, workload) in snapshot.pending_by_priority() {
            let pool = Pool::of(workload);
            let shape = (
                pool,
                workload.gpu_count,
                workload.gpu_memory_mb,
                workload.gpu_models,
                workload.cpu_millis,
                workload.memory_mb,
                workload.container,
            );
            if let Some(reason) = no_room.get(&shape) {
                plan.keep_pending(index, reason.clone())?;
                continue;
            }
            let nodes = snapshot
                .ready_nodes()
                .filter(|&(i, n)| pool == Pool::Cpu || pool_of_node(i, n) == Some(pool))
                .map(|(i, _)| i);
            // `first_fit` skips the nodes that cannot run it (a container workload, no engine).
            if let Some((node, gpus)) = plan.first_fit(index, nodes) {
                let reason = format!(
                    "static partition: first fit in the {} on {}",
                    pool.name(),
                    snapshot.nodes[node as usize].name
                );
                plan.place(index, node, gpus, reason)?;
                placed += 1;
                continue;
            }
            let pool_gpus = match pool {
                Pool::Inference => inference_gpus,
                Pool::Training => training_gpus,
                Pool::Cpu => u32::MAX,
            };
            let reason = if pool_gpus == 0 {
                format!("static partition: the {} has no GPU nodes (inference_gpu_share {share})", pool.name())
            } else if workload.container && !engines[pool as usize] {
                format!("static partition: no ready node of the {} runs containers", pool.name())
            } else {
                format!("static partition: no ready node of the {} has {}", pool.name(), workload.needs_in_words())
            };
            plan.keep_pending(index, reason.clone())?;
            no_room.insert(shape, reason);
        }
        let waiting = plan.decisions().len() - placed;
        ctx.info(format_args!(
            "inference pool {inference_gpus} GPUs, training pool {training_gpus} GPUs; placed {placed}, {waiting} wait"
        ));
        Ok(plan.into_decisions())
    }
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::abi::decode_snapshot;
    use airtime_policy_sdk::check::check_decisions;
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    /// 8 GPUs: the first node (4 of 8, at least 30%) is the inference pool, the second training.
    fn fleet() -> SnapshotFixture {
        SnapshotFixture::new().node("serve", 4, "H100", 81920).node("train", 4, "H100", 81920)
    }

    fn class(class: WorkloadClass) -> impl FnOnce(&mut airtime_policy_sdk::owned::OwnedWorkload) {
        move |w| w.class = class
    }

    #[test]
    fn training_stays_out_of_the_inference_pool_even_when_it_is_idle() {
        let outcome = fleet()
            .pending_with("big-train", 4, 1024, class(WorkloadClass::Training))
            .pending_with("more-train", 2, 1024, class(WorkloadClass::FineTuning))
            .pending_with("replica", 1, 1024, class(WorkloadClass::RealtimeInference))
            .evaluate(&StaticPartition)
            .expect("valid decisions");
        assert_eq!(outcome.placement("big-train"), Some(("train", vec![0, 1, 2, 3])));
        assert_eq!(
            outcome.reason("more-train"),
            Some(
                "static partition: no ready node of the training pool has 2 free GPUs with ≥ 1024 MiB, 1000 mCPU and 4096 MiB of host memory"
            ),
            "three of serve's GPUs are idle, but not its pool"
        );
        assert_eq!(outcome.placement("replica"), Some(("serve", vec![0])));
    }

    #[test]
    fn inference_classes_stay_out_of_the_training_pool_and_cpu_work_goes_anywhere() {
        let outcome = fleet()
            .pending_with("batch", 4, 1024, class(WorkloadClass::BatchInference))
            .pending_with("embed", 1, 1024, class(WorkloadClass::Embeddings))
            .pending_with("eval", 1, 1024, class(WorkloadClass::Evaluation))
            .pending_with("cpu-embed", 0, 0, class(WorkloadClass::Embeddings))
            .evaluate(&StaticPartition)
            .expect("valid decisions");
        assert_eq!(outcome.placed_on("batch"), Some("serve"));
        assert!(outcome.is_kept_pending("embed"), "the inference pool is full; train is idle but not its pool");
        assert_eq!(outcome.placed_on("eval"), Some("train"), "evaluation is not inference");
        assert_eq!(outcome.placement("cpu-embed"), Some(("serve", vec![])), "CPU work on any node's CPU");
    }

    #[test]
    fn priority_then_submission_within_a_pool_without_head_of_line_blocking() {
        let outcome = fleet()
            .pending_with("early", 2, 1024, class(WorkloadClass::Training))
            .pending_with("gang", 8, 1024, |w| {
                w.class = WorkloadClass::Training;
                w.priority = 5;
            })
            .pending_with("urgent", 3, 1024, |w| {
                w.class = WorkloadClass::Training;
                w.priority = 5;
            })
            .pending_with("late", 1, 1024, class(WorkloadClass::Training))
            .evaluate(&StaticPartition)
            .expect("valid decisions");
        assert!(outcome.is_kept_pending("gang"), "8 GPUs never fit one 4-GPU node");
        assert_eq!(outcome.placement("urgent"), Some(("train", vec![0, 1, 2])), "skips the gang; priority first");
        assert!(outcome.is_kept_pending("early"), "one GPU left; it needs two");
        assert_eq!(outcome.placement("late"), Some(("train", vec![3])), "skips early, which does not fit");
    }

    #[test]
    fn a_container_workload_goes_to_a_node_of_its_pool_with_a_container_engine() {
        let fixture = SnapshotFixture::new()
            .node("bare", 4, "H100", 81920)
            .node_with("engine", 4, "H100", 81920, |n| n.containers = true)
            .params(r#"{"inference_gpu_share": 1}"#)
            .pending_with("image", 1, 1024, |w| {
                w.class = WorkloadClass::BatchInference;
                w.container = true;
            })
            .pending_with("image-cpu", 0, 0, |w| w.container = true)
            .pending_with("plain", 1, 1024, class(WorkloadClass::BatchInference));
        let outcome = fixture.evaluate(&StaticPartition).expect("valid decisions");
        assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
        assert_eq!(outcome.placement("image-cpu"), Some(("engine", vec![])));
        assert_eq!(outcome.placement("plain"), Some(("bare", vec![0])));
        assert_eq!(fixture.problems(&outcome.decisions), vec![]);

        // The engine is in the inference pool only: training in a container has nowhere to go.
        let outcome = fleet()
            .edit(|doc| doc.nodes[0].containers = true)
            .pending_with("train-image", 1, 1024, |w| {
                w.class = WorkloadClass::Training;
                w.container = true;
            })
            .pending_with("train", 1, 1024, class(WorkloadClass::Training))
            .evaluate(&StaticPartition)
            .expect("valid decisions");
        assert_eq!(
            outcome.reason("train-image"),
            Some("static partition: no ready node of the training pool runs containers")
        );
        assert_eq!(outcome.placed_on("train"), Some("train"), "not held by the container shape's failure");
    }

    #[test]
    fn the_pools_follow_the_share_over_all_gpus_in_snapshot_order() {
        let fixture = |share: &str| {
            SnapshotFixture::new()
                .params(&format!(r#"{{"inference_gpu_share": {share}}}"#))
                .cpu_node("cpu", 16_000, 65_536)
                .node_with("a", 2, "H100", 81920, |n| n.state = NodeState::Draining)
                .node("b", 2, "H100", 81920)
                .node("c", 2, "H100", 81920)
                .node("d", 4, "H100", 81920)
        };
        let pools = |share: &str| {
            let fixture = fixture(share);
            let bytes = fixture.encode();
            let snapshot = decode_snapshot(&bytes).expect("fixture");
            inference_pool(&snapshot, share.parse().expect("number"))
        };
        // 10 GPUs. 0.3 is 3 GPUs: a (2, draining but still in the pool) and b.
        assert_eq!(pools("0.3"), vec![false, true, true, false, false]);
        assert_eq!(pools("0.2"), vec![false, true, false, false, false]);
        assert_eq!(pools("0.5"), vec![false, true, true, true, false]);
        assert_eq!(pools("1"), vec![false, true, true, true, true]);
        assert_eq!(pools("0"), vec![false; 5]);

        let outcome = fixture("0")
            .pending_with("replica", 1, 1024, class(WorkloadClass::RealtimeInference))
            .evaluate(&StaticPartition)
            .expect("valid decisions");
        assert_eq!(
            outcome.reason("replica"),
            Some("static partition: the inference pool has no GPU nodes (inference_gpu_share 0)")
        );
    }

    #[test]
    fn the_share_is_checked_at_activation_and_in_every_evaluation() {
        let check = |json: &str| StaticPartition.validate_params(&Params::parse(json));
        assert_eq!(check("{}"), Ok(()));
        assert_eq!(check(r#"{"inference_gpu_share": 0.5}"#), Ok(()));
        assert_eq!(check(r#"{"inference_gpu_share": 1}"#), Ok(()));
        assert_eq!(
            check(r#"{"inference_gpu_share": 1.5}"#).expect_err("out of range").message(),
            "params.inference_gpu_share: the share of GPUs for the inference pool must be between 0 and 1, found 1.5"
        );
        assert!(check(r#"{"inference_gpu_share": -0.1}"#).is_err());
        assert_eq!(
            check(r#"{"inference_gpu_share": "half"}"#).expect_err("not a number").message(),
            r#"params.inference_gpu_share: expected a number, found the string "half""#
        );
        let error = fleet().params(r#"{"inference_gpu_share": 2}"#).evaluate(&StaticPartition).expect_err("fails");
        assert!(error.to_string().contains("between 0 and 1"), "{error}");
    }

    #[test]
    fn a_large_fleet_gets_one_decision_per_pending_workload_that_the_host_accepts() {
        for seed in 0..20 {
            let fixture = SnapshotFixture::synthetic_fleet(30, 8, 500, seed).edit(|doc| {
                for (i, node) in doc.nodes.iter_mut().enumerate() {
                    if i % 7 == 3 {
                        node.state = NodeState::Lost;
                    }
                    node.cpu_millis_free = node.cpu_millis / (1 + i as u32 % 3);
                }
            });
            let outcome = fixture.evaluate(&StaticPartition).expect("the host's checks pass");
            assert_eq!(outcome.decisions.len(), 500);
            let bytes = fixture.encode();
            let snapshot = decode_snapshot(&bytes).expect("fixture");
            assert_eq!(check_decisions(&snapshot, &outcome.decisions), vec![]);
            let pools = inference_pool(&snapshot, DEFAULT_INFERENCE_GPU_SHARE);
            for decision in &outcome.decisions {
                let w = &snapshot.workloads[decision.workload as usize];
                if let Action::Place { node, gpus } = &decision.action
                    && !gpus.is_empty()
                {
                    assert_eq!(pools[*node as usize], Pool::of(w) == Pool::Inference, "{} in the wrong pool", w.name);
                }
            }
        }
    }
}
