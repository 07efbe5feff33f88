//! The ledger: every tenant's standing (weighted GPU-hours, guarantee, what it holds), kept current
//! as the cycle places and preempts, and the order in which tenants are served.

use airtime_policy_sdk::prelude::*;

use crate::Config;

/// Every tenant's standing, kept current as the cycle places and preempts.
pub(crate) struct Ledger<'s> {
    pub(crate) names: Vec<&'s str>,
    /// `usage_weight × decayed_gpu_hours`.
    pub(crate) history: Vec<f64>,
    pub(crate) weight: Vec<f64>,
    pub(crate) guaranteed: Vec<u32>,
    pub(crate) may_borrow: Vec<bool>,
    /// GPUs held: by running work, plus what this cycle placed or set aside, less what it preempted.
    pub(crate) held: Vec<u32>,
    /// GPUs this cycle gave each tenant (placed, or set aside for it).
    pub(crate) given: Vec<u32>,
    /// Its share, and whether it was below its guarantee, when this cycle first gave it GPUs.
    pub(crate) first_served: Vec<Option<(f64, bool)>>,
    /// The two tenants given the most GPUs this cycle, most first.
    pub(crate) top: [Option<u32>; 2],
    /// Its part of the ready GPUs by weight, among the tenants with GPU work (held or pending).
    pub(crate) fair_gpus: Vec<f64>,
    pub(crate) held_gpu_hours: f64,
}

impl<'s> Ledger<'s> {
    pub(crate) fn new(snapshot: &Snapshot<'s>, config: Config, queues: &[Vec<(u32, &Workload<'s>)>]) -> Self {
        let tenants = &snapshot.tenants;
        let weight: Vec<f64> = tenants.iter().map(|t| f64::from(t.weight.max(1))).collect();
        let history = tenants
            .iter()
            .map(|t| {
                let hours = f64::from(t.decayed_gpu_hours);
                if hours.is_finite() && hours > 0.0 { config.usage_weight * hours } else { 0.0 }
            })
            .collect();
        let held: Vec<u32> = tenants.iter().map(|t| t.running_gpus).collect();
        let active: Vec<bool> = (0..tenants.len())
            .map(|t| held[t] > 0 || queues.get(t).is_some_and(|q| q.iter().any(|(_, w)| w.needs_gpu())))
            .collect();
        let active_weight: f64 = (0..tenants.len()).filter(|&t| active[t]).map(|t| weight[t]).sum();
        let ready_gpus = f64::from(
            snapshot.gpus.iter().filter(|g| snapshot.node(g.node).is_some_and(Node::is_ready)).count() as u32,
        );
        let fair_gpus = (0..tenants.len())
            .map(|t| if active[t] && active_weight > 0.0 { ready_gpus * weight[t] / active_weight } else { 0.0 })
            .collect();
        Ledger {
            names: tenants.iter().map(|t| t.name).collect(),
            history,
            weight,
            guaranteed: tenants.iter().map(|t| t.guaranteed_gpus).collect(),
            may_borrow: tenants.iter().map(|t| t.may_borrow).collect(),
            held,
            given: vec![0; tenants.len()],
            first_served: vec![None; tenants.len()],
            top: [None, None],
            fair_gpus,
            held_gpu_hours: config.held_gpu_hours,
        }
    }

    pub(crate) fn name(&self, t: u32) -> &'s str {
        self.names.get(t as usize).copied().unwrap_or("?")
    }

    pub(crate) fn held(&self, t: u32) -> u32 {
        self.held.get(t as usize).copied().unwrap_or(0)
    }

    pub(crate) fn guaranteed(&self, t: u32) -> u32 {
        self.guaranteed.get(t as usize).copied().unwrap_or(0)
    }

    /// Weighted GPU-hours: history plus what it holds now, per unit of weight.
    pub(crate) fn share(&self, t: u32) -> f64 {
        let t = t as usize;
        match (self.history.get(t), self.weight.get(t), self.held.get(t)) {
            (Some(history), Some(weight), Some(held)) => (history + self.held_gpu_hours * f64::from(*held)) / weight,
            _ => 0.0,
        }
    }

    pub(crate) fn below_guarantee(&self, t: u32) -> bool {
        self.held(t) < self.guaranteed(t)
    }

    /// `gpus` more would stay within its guarantee.
    pub(crate) fn within_guarantee(&self, t: u32, gpus: u32) -> bool {
        self.held(t).saturating_add(gpus) <= self.guaranteed(t)
    }

    /// Holds more than its guarantee and more than its fair part of the fleet: the work above both
    /// is what a reclaim may take.
    pub(crate) fn over_fair_share(&self, t: u32) -> bool {
        let held = self.held(t);
        held > self.guaranteed(t) && f64::from(held) > self.fair_gpus.get(t as usize).copied().unwrap_or(0.0)
    }

    /// The heap key: below its guarantee first, then the smallest share. A share is finite and
    /// non-negative, so its bits order as the numbers do.
    pub(crate) fn rank(&self, t: u32) -> (bool, u64) {
        (!self.below_guarantee(t), self.share(t).to_bits())
    }

    /// This cycle gives `t` `gpus` GPUs.
    pub(crate) fn give(&mut self, t: u32, gpus: u32) {
        let (share, below) = (self.share(t), self.below_guarantee(t));
        let ti = t as usize;
        if let Some(first) = self.first_served.get_mut(ti) {
            first.get_or_insert((share, below));
        }
        if let (Some(held), Some(given)) = (self.held.get_mut(ti), self.given.get_mut(ti)) {
            *held = held.saturating_add(gpus);
            *given = given.saturating_add(gpus);
        }
        let given = |x: Option<u32>| x.map_or(0, |x| self.given[x as usize]);
        self.top = match self.top {
            [Some(a), b] if a == t => [Some(a), b],
            [a, Some(b)] if b == t => {
                if given(Some(b)) > given(a) {
                    [Some(b), a]
                } else {
                    [a, Some(b)]
                }
            }
            [a, b] => {
                if given(Some(t)) > given(a) {
                    [Some(t), a]
                } else if given(Some(t)) > given(b) {
                    [a, Some(t)]
                } else {
                    [a, b]
                }
            }
        };
    }

    /// `t`'s preempted work gives back `gpus` GPUs.
    pub(crate) fn release(&mut self, t: u32, gpus: u32) {
        if let Some(held) = self.held.get_mut(t as usize) {
            *held = held.saturating_sub(gpus);
        }
    }

    /// The tenant other than `t` this cycle gave the most GPUs to, if any.
    pub(crate) fn rival(&self, t: u32) -> Option<u32> {
        self.top.into_iter().flatten().find(|&r| r != t)
    }

    /// "product 3.5, research 12.0": the first `limit` tenants with GPU work by share.
    pub(crate) fn standings(&self, limit: usize) -> String {
        let mut active: Vec<u32> =
            (0..self.names.len() as u32).filter(|&t| self.fair_gpus[t as usize] > 0.0 || self.held(t) > 0).collect();
        active.sort_by(|&a, &b| self.share(a).total_cmp(&self.share(b)).then(a.cmp(&b)));
        let shown: Vec<String> =
            active.iter().take(limit).map(|&t| format!("{} {:.1}", self.name(t), self.share(t))).collect();
        let mut text = shown.join(", ");
        if active.len() > limit {
            text.push_str(&format!(", and {} more", active.len() - limit));
        }
        text
    }
}
