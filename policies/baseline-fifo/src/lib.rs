//! Baseline **FIFO**: one queue in submission order, as Kueue's `StrictFIFO` queueing strategy or a
//! plain batch queue without backfill. A baseline the simulator (`sim/`) compares Airtime's policies
//! against; not registered by the control plane (`airtime_builtin_policies::BASELINES`).
//!
//! - Pending workloads are taken in submission order, ties by workload id. Priorities, classes and
//!   tenants are ignored.
//! - Each goes to the first ready node in the snapshot's order where it fits now
//!   ([`Plan::first_fit`]): enough free GPUs of an allowed model with the GPU memory free, and the
//!   host CPU and memory it asks for. Work with no GPUs runs on any ready node's CPU. A CPU-capable
//!   GPU workload does not fall back to CPU. A container workload only goes to a node with a
//!   container engine (ABI 1.4).
//! - Head-of-line blocking: once a workload does not fit, it and everything submitted after it keep
//!   pending ("waits behind <name>"), even what would fit. No backfill, no preemption.
//!
//! Params: none.

use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct Fifo;

airtime_policy_sdk::export_policy!(Fifo);

impl Policy for Fifo {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let mut queue: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        queue.sort_by(|(_, a), (_, b)| a.submitted_ms.cmp(&b.submitted_ms).then_with(|| a.id.cmp(b.id)));
        let ready: Vec<u32> = snapshot.ready_nodes().map(|(n, _)| n).collect();
        let any_engine = snapshot.ready_nodes().any(|(_, n)| n.containers);
        let mut plan = Plan::new(snapshot);
        // Once the head does not fit, the one reason every later workload gets.
        let mut behind: Option<String> = None;
        let mut placed = 0;
        for (index, workload) in queue {
            if let Some(reason) = &behind {
                plan.keep_pending(index, reason.clone())?;
                continue;
            }
            // `first_fit` skips the nodes that cannot run it (a container workload, no engine).
            match plan.first_fit(index, ready.iter().copied()) {
                Some((node, gpus)) => {
                    let reason = format!("FIFO: first fit on {}", snapshot.nodes[node as usize].name);
                    plan.place(index, node, gpus, reason)?;
                    placed += 1;
                }
                None => {
                    behind = Some(format!("FIFO: waits behind {}, ahead of it in the queue", workload.name));
                    let reason = if workload.container && !any_engine {
                        "FIFO: head of the queue; no ready node runs containers".to_owned()
                    } else {
                        format!("FIFO: head of the queue; no ready node has {}", workload.needs_in_words())
                    };
                    plan.keep_pending(index, reason)?;
                }
            }
        }
        let waiting = plan.decisions().len() - placed;
        ctx.info(format_args!("placed {placed}; {waiting} wait in submission order"));
        Ok(plan.into_decisions())
    }
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn the_head_of_the_queue_blocks_everything_submitted_after_it() {
        let outcome = SnapshotFixture::new()
            .node("n1", 2, "H100", 81920)
            .pending("first", 1, 1024)
            .pending("gang", 4, 1024)
            .pending_with("late-urgent", 1, 1024, |w| w.priority = 100)
            .evaluate(&Fifo)
            .expect("valid decisions");
        assert_eq!(outcome.placement("first"), Some(("n1", vec![0])));
        assert_eq!(
            outcome.reason("gang"),
            Some(
                "FIFO: head of the queue; no ready node has 4 free GPUs with ≥ 1024 MiB, 1000 mCPU and 4096 MiB of host memory"
            )
        );
        assert_eq!(
            outcome.reason("late-urgent"),
            Some("FIFO: waits behind gang, ahead of it in the queue"),
            "no priority, no backfill: it would fit on n1's free GPU"
        );
    }

    #[test]
    fn submission_order_not_table_order_then_id() {
        let outcome = SnapshotFixture::new()
            .node("n1", 1, "H100", 81920)
            .pending_with("second", 1, 1024, |w| w.submitted_ms = 20)
            .pending_with("b-tie", 1, 1024, |w| {
                w.submitted_ms = 10;
                w.id = "b".into();
            })
            .pending_with("a-tie", 1, 1024, |w| {
                w.submitted_ms = 10;
                w.id = "a".into();
            })
            .evaluate(&Fifo)
            .expect("valid decisions");
        assert_eq!(outcome.placed(), vec!["a-tie"]);
        assert!(outcome.reason("b-tie").is_some_and(|r| r.starts_with("FIFO: head of the queue")));
        assert_eq!(outcome.reason("second"), Some("FIFO: waits behind b-tie, ahead of it in the queue"));
    }

    #[test]
    fn first_fit_in_snapshot_order_with_models_memory_and_host_resources() {
        let outcome = SnapshotFixture::new()
            .node_with("draining", 8, "H100", 81920, |n| n.state = NodeState::Draining)
            .node_with("no-cpu", 8, "H100", 81920, |n| n.cpu_millis_free = 500)
            .node("a100", 4, "A100", 40960)
            .node("h100", 4, "H100", 81920)
            .gpu("h100", 0, |g| g.memory_used_mb = 70000)
            .pending_with("h100-only", 2, 20480, |w| w.gpu_models = "h100".into())
            .pending("big-memory", 1, 61440)
            .pending("cpu", 0, 0)
            .evaluate(&Fifo)
            .expect("valid decisions");
        assert_eq!(outcome.placement("h100-only"), Some(("h100", vec![1, 2])), "device 0 has too little memory free");
        assert_eq!(outcome.placement("big-memory"), Some(("h100", vec![3])));
        assert_eq!(outcome.placement("cpu"), Some(("a100", vec![])), "no-cpu has 500 mCPU free, not 1000");
    }

    #[test]
    fn a_container_workload_goes_to_a_node_with_a_container_engine() {
        let fixture = SnapshotFixture::new()
            .node("bare", 8, "H100", 81920)
            .node_with("engine", 8, "H100", 81920, |n| n.containers = true)
            .container_work(1);
        let outcome = fixture.evaluate(&Fifo).expect("valid decisions");
        assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
        assert_eq!(outcome.placement("image-cpu"), Some(("engine", vec![])));
        assert_eq!(outcome.placed_on("plain"), Some("bare"));
        assert_eq!(fixture.problems(&outcome.decisions), vec![]);

        let outcome = SnapshotFixture::new()
            .node("bare", 8, "H100", 81920)
            .pending_with("image", 1, 1024, |w| w.container = true)
            .pending("plain", 1, 1024)
            .evaluate(&Fifo)
            .expect("valid decisions");
        assert_eq!(outcome.reason("image"), Some("FIFO: head of the queue; no ready node runs containers"));
        assert!(outcome.is_kept_pending("plain"), "it waits behind the head");
    }

    #[test]
    fn it_never_preempts() {
        let outcome = SnapshotFixture::new()
            .node("n1", 1, "H100", 81920)
            .running_with("batch", "n1", &[0], |w| w.preemptible = true)
            .pending_with("urgent", 1, 1024, |w| w.priority = 1000)
            .evaluate(&Fifo)
            .expect("valid decisions");
        assert_eq!(outcome.decisions.len(), 1);
        assert!(outcome.is_kept_pending("urgent"));
    }

    #[test]
    fn a_large_fleet_gets_one_decision_per_pending_workload_that_the_host_accepts() {
        let fixture = SnapshotFixture::synthetic_fleet(40, 8, 800, 3);
        let outcome = fixture.evaluate(&Fifo).expect("the host's checks pass");
        assert_eq!(outcome.decisions.len(), 800);
        assert_eq!(fixture.problems(&outcome.decisions), vec![]);
        let placed = outcome.placed().len();
        assert!(placed > 0 && placed < 800, "{placed} placed before the head blocked");
    }
}
