//! Ordering the queue, and the quota arithmetic it rests on.

use crate::abi::{Snapshot, WHOLE_GPU_MILLI, Workload, WorkloadClass};

/// What each tenant holds in thousandths of a GPU (a quarter-GPU share counts 250), against its
/// guarantee, kept current as a cycle places and preempts work.
#[derive(Debug, Clone)]
pub struct Holdings {
    held: Vec<u32>,
    guaranteed: Vec<u32>,
    may_borrow: Vec<bool>,
    /// Thousandths of a GPU each tenant may hold at most (`u32::MAX`: no limit).
    limit: Vec<u32>,
}

impl Holdings {
    /// What the snapshot's tenants hold now.
    pub fn of(snapshot: &Snapshot<'_>) -> Holdings {
        Holdings {
            held: snapshot.tenants.iter().map(|t| t.held_milli()).collect(),
            guaranteed: snapshot.tenants.iter().map(|t| t.guaranteed_gpus.saturating_mul(WHOLE_GPU_MILLI)).collect(),
            may_borrow: snapshot.tenants.iter().map(|t| t.may_borrow).collect(),
            limit: snapshot.tenants.iter().map(|t| t.limit_milli().unwrap_or(u32::MAX)).collect(),
        }
    }

    /// Whether placing `w` takes its tenant past its limit (ABI 1.7), which no borrowing allows.
    /// A gang member counts its whole gang ([`demand`](Self::demand)).
    pub fn past_limit(&self, w: &Workload<'_>) -> bool {
        let limit = self.limit.get(w.tenant as usize).copied().unwrap_or(u32::MAX);
        let demand = Holdings::demand(w);
        demand > 0 && self.held(w.tenant).saturating_add(demand) > limit
    }

    /// Thousandths of a GPU placing `w` takes: a gang member's, its whole gang's (a gang is placed
    /// whole, so it fits a quota whole or not at all).
    pub fn demand(w: &Workload<'_>) -> u32 {
        let members = if w.in_gang() { w.gang_size } else { 1 };
        w.gpu_demand_milli().saturating_mul(members)
    }

    /// Thousandths of a GPU `tenant` may hold at most, if it has a limit.
    pub fn limit(&self, tenant: u32) -> Option<u32> {
        self.limit.get(tenant as usize).copied().filter(|&l| l != u32::MAX)
    }

    /// Thousandths of a GPU `tenant` holds.
    pub fn held(&self, tenant: u32) -> u32 {
        self.held.get(tenant as usize).copied().unwrap_or(0)
    }

    /// Thousandths of a GPU `tenant` is guaranteed.
    pub fn guaranteed(&self, tenant: u32) -> u32 {
        self.guaranteed.get(tenant as usize).copied().unwrap_or(0)
    }

    /// Whether placing `w` takes its tenant beyond its guarantee (a gang member: its whole gang).
    pub fn borrowing(&self, w: &Workload<'_>) -> bool {
        self.held(w.tenant).saturating_add(Holdings::demand(w)) > self.guaranteed(w.tenant)
    }

    /// Whether `tenant` holds more than its guarantee now (its work may be reclaimed).
    pub fn borrows(&self, tenant: u32) -> bool {
        self.held(tenant) > self.guaranteed(tenant)
    }

    /// Whether `tenant` may hold more than its guarantee.
    pub fn may_borrow(&self, tenant: u32) -> bool {
        self.may_borrow.get(tenant as usize).copied().unwrap_or(false)
    }

    /// `tenant` now holds `milli` more.
    pub fn take(&mut self, tenant: u32, milli: u32) {
        if let Some(h) = self.held.get_mut(tenant as usize) {
            *h = h.saturating_add(milli);
        }
    }

    /// `tenant` gives `milli` back (a victim of preemption).
    pub fn give_back(&mut self, tenant: u32, milli: u32) {
        if let Some(h) = self.held.get_mut(tenant as usize) {
            *h = h.saturating_sub(milli);
        }
    }
}

/// How [`queue`] ranks pending work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranking {
    /// Customer-facing (real-time) inference before everything else.
    pub realtime_first: bool,
    /// Work within its tenant's guarantee before work that would borrow.
    pub guaranteed_first: bool,
}

impl Ranking {
    /// The platform's settings' ranking: real-time first when they say so, guarantees first.
    pub fn of(snapshot: &Snapshot<'_>) -> Ranking {
        Ranking { realtime_first: snapshot.settings_or_default().realtime_first, guaranteed_first: true }
    }
}

/// Pending work, best first: real-time inference (when the ranking says so), then work within its
/// tenant's guarantee (likewise), then effective priority (the host's night bonus for training
/// applied), then submission time, then table order — a total order, so every host ranks alike.
pub fn queue<'s, 'a>(
    snapshot: &'s Snapshot<'a>,
    holdings: &Holdings,
    ranking: Ranking,
) -> Vec<(u32, &'s Workload<'a>)> {
    let mut order = snapshot.pending_by_priority();
    order.sort_by_key(|(index, w)| {
        let realtime = ranking.realtime_first && w.class == WorkloadClass::RealtimeInference;
        let within = !ranking.guaranteed_first || !holdings.borrowing(w);
        (!realtime, !within, std::cmp::Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
    });
    order
}

#[cfg(test)]
mod tests {
    use crate::abi::{WorkloadClass, decode_snapshot};
    use crate::testing::SnapshotFixture;

    use super::*;

    #[test]
    fn real_time_first_then_guaranteed_then_priority_then_submission() {
        let bytes = SnapshotFixture::new()
            .tenant_with("owner", |t| t.guaranteed_gpus = 1)
            .tenant("borrower")
            .node("n", 1, "V100", 16384)
            .pending_with("old-low", 1, 0, |w| w.priority = 1)
            .pending_with("high", 1, 0, |w| w.priority = 9)
            .pending_with("late-low", 1, 0, |w| {
                w.priority = 1;
                w.submitted_ms += 10;
            })
            .pending_with("burst", 1, 0, |w| w.class = WorkloadClass::RealtimeInference)
            .workload_tenant("old-low", "borrower")
            .workload_tenant("high", "borrower")
            .workload_tenant("late-low", "owner")
            .workload_tenant("burst", "borrower")
            .encode();
        let snapshot = decode_snapshot(&bytes).unwrap();
        let holdings = Holdings::of(&snapshot);
        let names = |ranking| queue(&snapshot, &holdings, ranking).iter().map(|(_, w)| w.name).collect::<Vec<_>>();
        assert_eq!(
            names(Ranking { realtime_first: true, guaranteed_first: true }),
            ["burst", "late-low", "high", "old-low"]
        );
        assert_eq!(
            names(Ranking { realtime_first: false, guaranteed_first: false }),
            ["high", "old-low", "late-low", "burst"]
        );
    }
}
