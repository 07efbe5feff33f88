//! A starting point for an Airtime policy. Copy this directory, rename the package in
//! `Cargo.toml`, and change [`Template::evaluate`].
//!
//! As written it is a page of the SDK's actions (`airtime_policy_sdk::actions`), the steps every
//! policy repeats: the queue ranked by the platform's settings (real-time inference first when they
//! say so, then priority, then submission), each workload allocated by best fit — CPU work on a
//! CPU node (or the tightest node with room), a share on the fullest GPU that holds it, whole GPUs
//! on the node left with the fewest free — and everything else waiting with a reason; the first
//! GPU workload that does not fit reserves the node where it will fit first, so small work cannot
//! starve it. It reads one parameter, `max_placements`, and logs a summary line.
//!
//! To go further, swap [`Fit::BestFit`] for [`Fit::LeastFragmenting`] (Weng et al.'s
//! fragmentation-aware placement, what `slo-first` uses), or let real-time work preempt with
//! [`VictimSearch`](airtime_policy_sdk::actions::VictimSearch) — `policies/slo-first` shows both.
//!
//! Build: `cargo build --release --target wasm32-unknown-unknown -p airtime-policy-template`
//! (the module is `target/wasm32-unknown-unknown/release/airtime_policy_template.wasm`).
//! Test: `cargo test -p airtime-policy-template`. Try it on a snapshot:
//! `airtime-policy run <module.wasm> --snapshot snapshot.json`.

use airtime_policy_sdk::actions::{Allocation, Allocator, Fit, Holdings, Ranking, Reservation, queue};
use airtime_policy_sdk::gang::{GangReadiness, Gangs};
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
        let mut alloc = Allocator::new(&plan, Fit::BestFit);
        let mut reservation = Reservation::new(snapshot);
        // A container workload runs only on a node with a container engine (ABI 1.4).
        let any_engine = snapshot.ready_nodes().any(|(_, n)| n.containers);
        let ranking = Ranking { guaranteed_first: false, ..Ranking::of(snapshot) };
        let mut placed = 0;
        let mut gangs: Option<Gangs<'s>> = None;
        for (index, w) in queue(snapshot, &Holdings::of(snapshot), ranking) {
            if placed == max_placements {
                plan.keep_pending(index, format!("at most {max_placements} placements per cycle"))?;
                continue;
            }
            if w.in_gang() {
                // A gang across nodes: every member on a node of its own, or every member waits.
                let gangs = gangs.get_or_insert_with(|| Gangs::of(snapshot));
                let members = match gangs.readiness(snapshot, w.gang_id, w.gang_size) {
                    GangReadiness::Ready(members) if !plan.is_decided(index) => members,
                    _ => {
                        if w.is_pending() && !plan.is_decided(index) {
                            plan.keep_pending(index, "waiting for the rest of its gang")?;
                        }
                        continue;
                    }
                };
                let words = |m: u32, a: &Allocation| {
                    format!("gang member {m} {} on {}", a.how, snapshot.nodes[a.node as usize].name)
                };
                if alloc.gang(&mut plan, &members, |g| !reservation.is_reserved(g), words)?.is_none() {
                    for m in members {
                        plan.keep_pending(m, "its gang does not fit whole: no node for every member")?;
                    }
                }
                continue;
            }
            if w.container && !any_engine {
                plan.keep_pending(index, "no ready node runs containers")?;
                continue;
            }
            let fit = if !w.needs_gpu() {
                alloc.cpu(&plan, index).map(|node| (node, Vec::new(), "best fit on CPU".to_owned()))
            } else {
                let share = if w.is_share() { alloc.share(&plan, index, |_| true) } else { None };
                share
                    .or_else(|| alloc.gpus(&plan, index, |g| !reservation.is_reserved(g)))
                    .map(|a| (a.node, a.gpus, a.how))
            };
            match fit {
                Some((node, gpus, how)) => {
                    let reason = format!("{how} on {}", snapshot.nodes[node as usize].name);
                    alloc.place(&mut plan, index, node, gpus, reason)?;
                    placed += 1;
                }
                None if !w.needs_gpu() => plan.keep_pending(index, "no ready node has the CPU and memory free")?,
                None => {
                    let need = w.gpu_need();
                    let mut reason = format!("no ready node has {}", need.describe("free"));
                    if let Some(node) = reservation.claim_for_head(&plan, w, &need) {
                        reason.push_str(&format!(
                            "; the free GPUs of {} are kept for it",
                            snapshot.nodes[node as usize].name
                        ));
                    }
                    plan.keep_pending(index, reason)?;
                }
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
    fn places_by_best_fit_highest_priority_first() {
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
        assert_eq!(outcome.placement("small"), Some(("a100", vec![0])), "the node left with the fewest free GPUs");
        assert_eq!(outcome.placement("embed"), Some(("cpu", vec![])), "CPU work on a CPU node");
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
    fn the_first_gang_that_does_not_fit_keeps_its_node_from_smaller_work() {
        let outcome = SnapshotFixture::new()
            .node("n1", 4, "H100", 81920)
            .running("busy", "n1", &[0, 1])
            .pending_with("gang", 4, 1024, |w| w.priority = 5)
            .pending("small", 1, 1024)
            .evaluate(&Template)
            .expect("valid decisions");
        assert_eq!(
            outcome.reason("gang"),
            Some("no ready node has 4 free GPUs with ≥ 1024 MiB; the free GPUs of n1 are kept for it")
        );
        assert!(outcome.is_kept_pending("small"), "{:?}", outcome.reason("small"));
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
            .container_work(1);
        let outcome = fixture.evaluate(&Template).expect("valid decisions");
        assert_eq!(outcome.placement("image"), Some(("engine", vec![0])));
        assert_eq!(outcome.placement("image-cpu"), Some(("engine", vec![])));
        assert_eq!(
            outcome.placed_on("plain"),
            Some("engine"),
            "work not in a container runs anywhere: best fit packs it"
        );
        assert_eq!(fixture.problems(&outcome.decisions), vec![]);

        let outcome = SnapshotFixture::new()
            .node("bare", 8, "H100", 81920)
            .pending_with("image", 1, 1024, |w| w.container = true)
            .evaluate(&Template)
            .expect("valid decisions");
        assert_eq!(outcome.reason("image"), Some("no ready node runs containers"));
    }
}
