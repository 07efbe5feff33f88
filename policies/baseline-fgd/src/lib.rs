//! **FGD alone**: each pending pod, in submission order, goes where it adds the least expected
//! fragmentation for the typical pods — the measure of Weng et al.'s FGD ("Beware of
//! Fragmentation", USENIX ATC '23) on the SDK's placer
//! ([`FragPlacer`](airtime_policy_sdk::frag::FragPlacer)), the placement `slo-first` uses, with
//! nothing else: no priorities, no reservation, no preemption. `airtime-sim fill` runs it beside
//! `slo-first` so that what the rest of a real policy costs or gains reads off one table. Not
//! registered by the control plane.
//!
//! Compared as their plugin compares placements: by `⌊σ(Δ/1000) × 100⌋` of the gradient, so
//! gradients within about 0.04 GPU tie, and ties broken in a fixed pseudo-random order of the
//! nodes, as their simulator breaks them by prefixing node names with a random permutation
//! ([`FragPlacer::scored`](airtime_policy_sdk::frag::FragPlacer::scored)). Both matter on their fill
//! experiment (`docs/simulator-results.md`).
//!
//! - The typical pods are the snapshot's running work and what was asked for in the last ten
//!   minutes ([`Workmix::of`]), CPU-only pods included: for them every free GPU is fragment, as
//!   in their measure.
//!
//! Params: none.

use airtime_policy_sdk::frag::FragPlacer;
use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct Fgd;

airtime_policy_sdk::export_policy!(Fgd);

impl Policy for Fgd {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let mut queue: Vec<(u32, &Workload<'s>)> = snapshot.pending().collect();
        queue.sort_by(|(_, a), (_, b)| a.submitted_ms.cmp(&b.submitted_ms).then_with(|| a.id.cmp(b.id)));
        let mut plan = Plan::new(snapshot);
        let mut placer: Option<FragPlacer<'s>> = None;
        let mut placed = 0;
        for (index, w) in queue {
            let placer = placer.get_or_insert_with(|| FragPlacer::scored(Workmix::of(snapshot)));
            match placer.place(&plan, index, |_| true, |_| true) {
                Some(p) => {
                    let reason = format!(
                        "FGD: adds {:.0}/1000 of a GPU of expected fragmentation on {}",
                        p.added, snapshot.nodes[p.node as usize].name
                    );
                    plan.place(index, p.node, p.gpus, reason)?;
                    placer.placed(&plan, p.node);
                    placed += 1;
                }
                None => plan.keep_pending(index, format!("FGD: no ready node has {}", w.needs_in_words()))?,
            }
        }
        ctx.info(format_args!("placed {placed}"));
        Ok(plan.into_decisions())
    }
}

#[cfg(test)]
mod tests {
    use airtime_policy_sdk::abi::Sharing;
    use airtime_policy_sdk::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn a_share_goes_where_what_it_leaves_still_fits_the_typical_shares() {
        // GPU 0 of n has 600 free, GPU 1 700, GPU 2 400 (m's GPUs have no room): best fit puts a
        // 100 share on GPU 2, FGD on GPU 1, where what is left still fits the 600 share that
        // arrives — on GPU 2 the 300 left would not fit the 400 one.
        let outcome = SnapshotFixture::new()
            .node("n", 3, "V100", 16384)
            .sharing("n", Sharing::Mps)
            .node("m", 2, "V100", 16384)
            .sharing("m", Sharing::Mps)
            .running_share("a", "n", 0, 400, 0)
            .running_share("b", "n", 1, 300, 0)
            .running_share("c", "n", 2, 600, 0)
            .running_share("d", "m", 0, 950, 0)
            .running_share("e", "m", 1, 950, 0)
            .pending_share("small", 100, 0)
            .evaluate(&Fgd)
            .expect("valid decisions");
        assert_eq!(outcome.placement("small"), Some(("n", vec![1])));
    }
}
