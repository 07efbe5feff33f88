//! A starting point for an Airtime policy. Copy this directory, rename the package in
//! `Cargo.toml`, and change [`Template::evaluate`].
//!
//! As written it is "first fit": pending workloads, highest priority first, each on the first ready
//! node with enough free GPUs that fit it; everything else waits with a reason. It reads one
//! parameter, `max_placements`, and logs a summary line.
//!
//! First fit looks at every ready node for every workload, which is fine for a few hundred nodes.
//! For best fit at fleet scale (1,000 nodes, 10,000 pending, in milliseconds), use the SDK's
//! placement toolkit, [`airtime_policy_sdk::fit`]: nodes grouped by free GPUs (`NodesByFree`), host
//! room (`RoomIndex`), each node's GPUs tightest first with NVLink domains (`TightestGpus`) and a
//! per-need memo (`FitMemo`) — the structures `priority-best-fit`, `cost-aware`, `fair-share` and
//! `slo-first` are built on. The module docs of `fit` show the loop.
//!
//! Build: `cargo build --release --target wasm32-unknown-unknown -p airtime-policy-template`
//! (the module is `target/wasm32-unknown-unknown/release/airtime_policy_template.wasm`).
//! Test: `cargo test -p airtime-policy-template`. Try it on a snapshot:
//! `airtime-policy run <module.wasm> --snapshot snapshot.json`.

use airtime_policy_sdk::prelude::*;

/// The policy. Keep it stateless: a fresh instance runs each evaluation anyway.
#[derive(Debug, Clone, Copy, Default)]
pub struct Template;

// Emits the module's exports when built for wasm32; a type check elsewhere.
airtime_policy_sdk::export_policy!(Template);

/// Reads the parameters the one way evaluation and activation both use.
fn max_placements(params: &airtime_policy_sdk::params::Params<'_>) -> Result<u32, Failure> {
    Ok(params.get_or("max_placements", u32::MAX)?)
}

impl Policy for Template {
    /// Runs when a platform team activates the policy: a parameter of the wrong type refuses the
    /// activation with this message, before any cycle runs the policy.
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        max_placements(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        // Parameters come from the JSON the platform stores with the policy; a wrong type fails the
        // evaluation with a message naming the key (that is what `?` does here).
        let max_placements = max_placements(ctx.params())?;

        // The plan refuses to take a GPU twice or decide a workload twice.
        let mut plan = Plan::new(snapshot);
        // A container workload runs only on a node with a container engine (ABI 1.4).
        let any_engine = snapshot.ready_nodes().any(|(_, n)| n.containers);
        let mut placed = 0;
        for (index, workload) in snapshot.pending_by_priority() {
            if placed == max_placements {
                plan.keep_pending(index, format!("at most {max_placements} placements per cycle"))?;
                continue;
            }
            if workload.container && !any_engine {
                plan.keep_pending(index, "no ready node runs containers")?;
                continue;
            }
            if !workload.needs_gpu() {
                // CPU work: the first ready node that can run it with the CPU and memory free.
                let node = snapshot.ready_nodes().find(|&(n, node)| {
                    node.can_run(workload)
                        && plan.cpu_free(n) >= workload.cpu_millis
                        && plan.memory_free(n) >= workload.memory_mb
                });
                let node = node.map(|(n, _)| n);
                match node {
                    Some(node) => {
                        plan.place(index, node, Vec::new(), "first fit on CPU")?;
                        placed += 1;
                    }
                    None => plan.keep_pending(index, "no ready node has the CPU and memory free")?,
                }
                continue;
            }
            // The first ready node that can run it with the GPUs, CPU and memory free
            // (`Plan::first_fit` skips nodes that cannot run it).
            let need = workload.gpu_need();
            let choice = plan.first_fit(index, snapshot.ready_nodes().map(|(n, _)| n));
            match choice {
                Some((node, gpus)) => {
                    let reason = format!("first fit on {}", snapshot.nodes[node as usize].name);
                    plan.place(index, node, gpus, reason)?;
                    placed += 1;
                }
                None => plan.keep_pending(index, format!("no ready node has {}", need.describe("free")))?,
            }
        }
        ctx.info(format_args!("placed {placed} workloads"));
        Ok(plan.into_decisions())
    }
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn places_on_the_first_node_that_fits() {
        let outcome = SnapshotFixture::new()
            .node("a100", 4, "A100", 40960)
            .node("h100", 8, "H100", 81920)
            .pending_with("big", 2, 61440, |w| w.priority = 10)
            .pending("small", 1, 20480)
            .cpu_node("cpu", 16_000, 65_536)
            .pending("embed", 0, 0)
            .evaluate(&Template)
            .expect("valid decisions");
        assert_eq!(outcome.placement("big"), Some(("h100", vec![0, 1])));
        assert_eq!(outcome.placement("small"), Some(("a100", vec![0])));
        assert_eq!(outcome.placement("embed"), Some(("a100", vec![])), "first fit: any ready node with CPU");
        assert_eq!(outcome.logs[0].message, "placed 3 workloads");
    }

    #[test]
    fn what_does_not_fit_waits_with_a_reason() {
        let outcome = SnapshotFixture::new()
            .node("n1", 2, "H100", 81920)
            .pending("gang", 4, 1024)
            .evaluate(&Template)
            .expect("valid decisions");
        assert_eq!(outcome.reason("gang"), Some("no ready node has 4 free GPUs with ≥ 1024 MiB"));
    }

    #[test]
    fn max_placements_bounds_a_cycle() {
        let outcome = SnapshotFixture::new()
            .params(r#"{"max_placements": 1}"#)
            .node("n1", 8, "H100", 81920)
            .pending("a", 1, 1024)
            .pending("b", 1, 1024)
            .evaluate(&Template)
            .expect("valid decisions");
        assert_eq!(outcome.placed(), vec!["a"]);
        assert_eq!(outcome.reason("b"), Some("at most 1 placements per cycle"));
    }

    #[test]
    fn a_container_workload_goes_to_a_node_with_a_container_engine() {
        let fixture = SnapshotFixture::new()
            .node("bare", 8, "H100", 81920)
            .node_with("engine", 8, "H100", 81920, |n| n.containers = true)
            .pending_with("image", 1, 1024, |w| w.container = true)
            .pending_with("image-cpu", 0, 0, |w| w.container = true)
            .pending("plain", 1, 1024);
        let outcome = fixture.evaluate(&Template).expect("valid decisions");
        assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
        assert_eq!(outcome.placement("image-cpu"), Some(("engine", vec![])));
        assert_eq!(outcome.placed_on("plain"), Some("bare"), "work not in a container runs anywhere");
        let bytes = fixture.encode();
        let snapshot = airtime_policy_sdk::abi::decode_snapshot(&bytes).expect("fixture");
        assert_eq!(airtime_policy_sdk::check::check_decisions(&snapshot, &outcome.decisions), vec![]);

        let outcome = SnapshotFixture::new()
            .node("bare", 8, "H100", 81920)
            .pending_with("image", 1, 1024, |w| w.container = true)
            .evaluate(&Template)
            .expect("valid decisions");
        assert_eq!(outcome.reason("image"), Some("no ready node runs containers"));
    }
}
