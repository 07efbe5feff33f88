//! One victim search for every reason to preempt, with the rules that keep a preemption from
//! losing airtime.
//!
//! A search looks, node by node, for running work it may stop so that the preemptor fits there:
//! candidates are the node's running, preemptible work that the caller's `eligible` admits (not
//! customer-facing inference for a burst; only a borrowing tenant's work for a reclaim), cheapest
//! first — the lowest priority, then checkpointable work (it resumes), then the fewest GPU-seconds
//! a restart from scratch would throw away — taken until the preemptor's GPUs are free. The host's
//! rules are applied before anything is proposed: work within its minimum runtime is protected
//! (the search says which frees first, and when), work preempted as often as the hourly cap allows
//! and, under checkpointable-only, work that cannot checkpoint are never candidates.
//!
//! **No preemption loses airtime**: the preemptor must fit once the victims stop (its host CPU and
//! memory too), what they free must be used at once — no more GPU capacity stopped than started —
//! and, when the preemptor outranks its victims, the work stopped must be worth less than the work
//! started ([`worth`]). One exception, for customer traffic: work that outranks may stop
//! checkpointable work bigger than itself (it loses no progress) when nothing its size would do —
//! the search takes the set that frees the least beyond what the preemptor uses first. Without it a
//! burst waited behind any bigger training run (the replay's and the services' stories), at the
//! price of GPUs left idle until the queue fills them (in the fill experiment, dips of allocation). Of the nodes where
//! that holds, the one needing the fewest victims wins, then the least worth stopped.

use crate::abi::{Snapshot, Workload, WorkloadClass, WorkloadState};
use crate::plan::Plan;
use crate::view::GpuNeed;

use super::reserve::usable;

/// Running work per node, built once a cycle, so each search stays linear in what runs on a node.
#[derive(Debug, Clone)]
pub struct RunningByNode(Vec<Vec<u32>>);

impl RunningByNode {
    pub fn of(snapshot: &Snapshot<'_>) -> Self {
        let mut by_node: Vec<Vec<u32>> = vec![Vec::new(); snapshot.nodes.len()];
        for (v, w) in snapshot.running() {
            if let Some(list) = w.node.and_then(|n| by_node.get_mut(n as usize)) {
                list.push(v);
            }
        }
        RunningByNode(by_node)
    }

    /// The running workloads on `node`.
    pub fn on(&self, node: u32) -> &[u32] {
        self.0.get(node as usize).map_or(&[], Vec::as_slice)
    }
}

/// What running a workload is worth, to weigh a preemption: its GPU capacity times its class's
/// worth per GPU (customer-facing inference 8, batch inference 2, the rest 1), so a burst may stop
/// training or batch inference of its own size, never other customer-facing work.
pub fn worth(w: &Workload<'_>) -> u64 {
    let per_gpu = match w.class {
        WorkloadClass::RealtimeInference => 8,
        WorkloadClass::BatchInference => 2,
        _ => 1,
    };
    u64::from(w.gpu_demand_milli()) * per_gpu
}

/// The host's preemption rules as the snapshot shows them (ABI 1.5 for the last two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VictimRules {
    /// Seconds a workload runs before it may be preempted.
    pub min_runtime_s: u32,
    /// Preemptions of one workload per hour (`u32::MAX` when the snapshot has no settings).
    pub max_per_hour: u32,
    /// Only checkpointable work may be preempted.
    pub checkpointable_only: bool,
}

impl VictimRules {
    pub fn of(snapshot: &Snapshot<'_>) -> Self {
        match snapshot.settings {
            Some(s) => VictimRules {
                min_runtime_s: s.min_runtime_s,
                max_per_hour: s.max_preemptions_per_hour,
                checkpointable_only: s.checkpointable_only,
            },
            None => VictimRules { min_runtime_s: 0, max_per_hour: u32::MAX, checkpointable_only: false },
        }
    }

    /// Whether the host lets `w` be preempted at all (running, preemptible, under the hourly cap,
    /// checkpointable when only that may be): protection by minimum runtime is separate, as it ends.
    pub fn may_stop(&self, w: &Workload<'_>) -> bool {
        w.state == WorkloadState::Running
            && w.preemptible
            && w.preemptions_last_hour < self.max_per_hour
            && (w.checkpointable || !self.checkpointable_only)
    }

    /// Seconds `w` is still protected by the minimum runtime at `now_ms`, if it is.
    pub fn protected_for_s(&self, w: &Workload<'_>, now_ms: u64) -> Option<u64> {
        let ran_s = w.running_ms(now_ms) / 1000;
        (w.started_ms != 0 && ran_s < u64::from(self.min_runtime_s)).then(|| u64::from(self.min_runtime_s) - ran_s)
    }
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preemption {
    /// Stopping these, on this node, makes room.
    Victims {
        node: u32,
        victims: Vec<u32>,
    },
    /// The only possible victims are too young to preempt: the one that frees first, and when.
    Protected {
        victim: u32,
        remaining_s: u64,
    },
    Impossible,
}

/// Why a workload may stop others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// It outranks them (a burst of customer-facing traffic): what it stops must be worth less
    /// than it ([`worth`]).
    Outranks,
    /// Its tenant takes back its guarantee from tenants borrowing beyond theirs.
    Reclaims,
}

/// A victim search for one workload that does not fit.
pub struct VictimSearch<'p, 's, 'a> {
    pub plan: &'p Plan<'s, 'a>,
    /// The workload that needs room: only a node that can run it is searched.
    pub workload: &'p Workload<'a>,
    pub need: &'p GpuNeed<'a>,
    /// GPUs kept for others this cycle ([`Reservation::table`](super::Reservation::table)).
    pub reserved: &'p [bool],
    /// Workloads already chosen as victims this cycle.
    pub already: &'p [bool],
    pub running: &'p RunningByNode,
    pub rules: VictimRules,
}

impl VictimSearch<'_, '_, '_> {
    /// Searches every ready node that can run the workload; `eligible` says which running work the
    /// cause may stop (on top of the host's rules).
    pub fn run(&self, cause: Cause, eligible: impl Fn(&Workload<'_>) -> bool) -> Preemption {
        let snapshot = self.plan.snapshot();
        // (GPU capacity freed beyond what the preemptor uses, victims, worth stopped, node, victims)
        let mut best: Option<(u64, usize, u64, u32, Vec<u32>)> = None;
        let mut protected: Option<(u32, u64)> = None;
        for (node, _) in snapshot.ready_nodes().filter(|(_, n)| n.can_run(self.workload)) {
            let Some(victims) = self.on_node(node, cause, &eligible, &mut protected) else { continue };
            let of = |f: fn(&Workload<'_>) -> u64| -> u64 {
                victims.iter().map(|&v| f(&snapshot.workloads[v as usize])).sum()
            };
            let surplus =
                of(|vw| u64::from(vw.gpu_demand_milli())).saturating_sub(u64::from(self.workload.gpu_demand_milli()));
            let key = (surplus, victims.len(), of(worth));
            if best.as_ref().is_none_or(|b| key < (b.0, b.1, b.2)) {
                best = Some((key.0, key.1, key.2, node, victims));
            }
        }
        match (best, protected) {
            (Some((_, _, _, node, victims)), _) => Preemption::Victims { node, victims },
            (None, Some((victim, remaining_s))) => Preemption::Protected { victim, remaining_s },
            (None, None) => Preemption::Impossible,
        }
    }

    /// The victims that make room on `node` without losing airtime; notes in `protected` the
    /// candidate whose protection ends first. The cheapest candidates in order are tried first (the
    /// common case, linear); when they do not make a set that loses nothing, every subset of the
    /// [`EXACT_UP_TO`] cheapest is, and the cheapest valid one wins — the lowest highest priority,
    /// then the fewest victims, then the fewest that cannot checkpoint, then the least work lost.
    fn on_node(
        &self,
        node: u32,
        cause: Cause,
        eligible: &impl Fn(&Workload<'_>) -> bool,
        protected: &mut Option<(u32, u64)>,
    ) -> Option<Vec<u32>> {
        let (plan, need) = (self.plan, self.need);
        let snapshot = plan.snapshot();
        let now = snapshot.now_ms;
        let free = plan.free_gpus(node).filter(|(g, gpu)| need.fits(gpu) && !self.reserved[*g as usize]).count() as u32;
        let lost = |vw: &Workload<'_>| {
            if vw.checkpointable { 0 } else { vw.running_ms(now).saturating_mul(u64::from(vw.gpu_demand_milli())) }
        };
        // (victim, GPUs it frees that the preemptor could use), cheapest to stop first.
        let mut candidates: Vec<(u32, u32)> = Vec::new();
        for &v in self.running.on(node) {
            let vw = &snapshot.workloads[v as usize];
            if self.already[v as usize]
                || vw.class == WorkloadClass::RealtimeInference
                || !self.rules.may_stop(vw)
                || !eligible(vw)
            {
                continue;
            }
            // A GPU it shares with other work stays taken when it alone stops.
            let frees = snapshot
                .node_gpus(node)
                .filter(|(_, gpu)| gpu.holder == Some(v) && gpu.sharers <= 1 && usable(need, gpu))
                .count() as u32;
            if frees == 0 {
                continue;
            }
            if let Some(remaining) = self.rules.protected_for_s(vw, now) {
                if protected.is_none_or(|(_, r)| remaining < r) {
                    *protected = Some((v, remaining));
                }
                continue;
            }
            candidates.push((v, frees));
        }
        let key = |v: u32| {
            let vw = &snapshot.workloads[v as usize];
            (snapshot.effective_priority(vw), !vw.checkpointable, lost(vw), v)
        };
        candidates.sort_by_key(|&(v, _)| key(v));
        let mut gained = free;
        let mut chosen: Vec<u32> = Vec::new();
        for &(v, frees) in &candidates {
            if gained >= need.count {
                break;
            }
            gained += frees;
            chosen.push(v);
        }
        let surplus = |set: &[u32]| -> u64 {
            let freed: u64 = set.iter().map(|&v| u64::from(snapshot.workloads[v as usize].gpu_demand_milli())).sum();
            freed.saturating_sub(u64::from(self.workload.gpu_demand_milli()))
        };
        if self.makes_room(node, cause, &chosen, gained) && surplus(&chosen) == 0 {
            return Some(chosen);
        }
        let n = candidates.len().min(EXACT_UP_TO);
        let mut best: Option<(Cost, Vec<u32>)> = None;
        for mask in 1u32..(1 << n) {
            let set: Vec<u32> = (0..n).filter(|i| mask & (1 << i) != 0).map(|i| candidates[i].0).collect();
            let gained = free + (0..n).filter(|i| mask & (1 << i) != 0).map(|i| candidates[i].1).sum::<u32>();
            if !self.makes_room(node, cause, &set, gained) {
                continue;
            }
            let victims = set.iter().map(|&v| &snapshot.workloads[v as usize]);
            let cost = (
                surplus(&set),
                victims.clone().map(|vw| snapshot.effective_priority(vw)).max().unwrap_or(i32::MIN),
                set.len(),
                victims.clone().filter(|vw| !vw.checkpointable).count(),
                victims.map(lost).sum::<u64>(),
            );
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, set));
            }
        }
        best.map(|(_, set)| set)
    }

    /// Whether stopping `set` (leaving `gained` fitting GPUs free) makes room on `node` without
    /// losing airtime.
    fn makes_room(&self, node: u32, cause: Cause, set: &[u32], gained: u32) -> bool {
        let (plan, w) = (self.plan, self.workload);
        let snapshot = plan.snapshot();
        if set.is_empty() || gained < self.need.count {
            return false;
        }
        let freed =
            |f: fn(&Workload<'_>) -> u64| -> u64 { set.iter().map(|&v| f(&snapshot.workloads[v as usize])).sum() };
        let fits_after = u64::from(plan.cpu_free(node)) + freed(|vw| u64::from(vw.cpu_millis))
            >= u64::from(w.cpu_millis)
            && u64::from(plan.memory_free(node)) + freed(|vw| u64::from(vw.memory_mb)) >= u64::from(w.memory_mb);
        let used_at_once = freed(|vw| u64::from(vw.gpu_demand_milli())) <= u64::from(w.gpu_demand_milli());
        let resumable = set.iter().all(|&v| snapshot.workloads[v as usize].checkpointable);
        let no_loss = match cause {
            Cause::Outranks => (used_at_once || resumable) && freed(worth) < worth(w),
            Cause::Reclaims => used_at_once,
        };
        fits_after && no_loss
    }
}

/// What a set of victims costs, the least first: the GPU capacity it frees beyond what the
/// preemptor uses, its highest priority, its size, how many of them cannot checkpoint, the
/// GPU-milliseconds of work lost.
type Cost = (u64, i32, usize, usize, u64);

/// Up to how many candidates on one node the search tries every subset of, when the cheapest in
/// order do not make room (2^12 sets at most, on such a node only).
pub const EXACT_UP_TO: usize = 12;

#[cfg(test)]
mod tests {
    use crate::abi::{Decision, Settings, decode_snapshot};
    use crate::check::check_decisions;
    use crate::testing::SnapshotFixture;

    use super::*;

    /// A small deterministic generator (xorshift), so the cases are the same on every run.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A random fleet: 1–3 nodes of 2–4 GPUs, each GPU held by a random whole-GPU workload or free
    /// (workloads of 1–2 GPUs, random class, priority, flags, age and earlier preemptions), and one
    /// pending workload of 1–3 GPUs with random class and host CPU.
    fn fleet(rng: &mut Rng) -> SnapshotFixture {
        let settings = Settings {
            realtime_first: true,
            min_runtime_s: 600,
            max_preemptions_per_hour: 2,
            checkpointable_only: rng.below(4) == 0,
            ..Settings::default()
        };
        let mut f = SnapshotFixture::new().settings(settings);
        let mut running = 0;
        for n in 0..1 + rng.below(3) {
            let node = format!("n{n}");
            let gpus = 2 + rng.below(3) as u32;
            f = f.node_with(&node, gpus, "H100", 81920, |n| n.cpu_millis = 16_000);
            let mut d = 0;
            while d < gpus {
                let size = (1 + rng.below(2) as u32).min(gpus - d);
                if rng.below(4) > 0 {
                    let devices: Vec<u32> = (d..d + size).collect();
                    let (class, priority, flags, age, preempted, cpu) = (
                        rng.below(3),
                        rng.below(3) as i32,
                        rng.below(8),
                        rng.below(1200),
                        rng.below(3) as u32,
                        1000 * rng.below(8) as u32,
                    );
                    f = f.running_with(&format!("r{running}"), &node, &devices, |w| {
                        w.class =
                            [WorkloadClass::Training, WorkloadClass::BatchInference, WorkloadClass::RealtimeInference]
                                [class as usize];
                        w.priority = priority;
                        w.preemptible = flags & 1 != 0 || flags & 4 != 0;
                        w.checkpointable = flags & 2 != 0;
                        w.started_ms = crate::testing::FIXTURE_NOW_MS - age * 1000;
                        w.preemptions_last_hour = preempted;
                        w.cpu_millis = cpu;
                    });
                    running += 1;
                }
                d += size;
            }
        }
        let (count, class, cpu) = (1 + rng.below(3) as u32, rng.below(2), 1000 * rng.below(12) as u32);
        f.pending_with("needy", count, 0, |w| {
            w.class = [WorkloadClass::RealtimeInference, WorkloadClass::Training][class as usize];
            w.cpu_millis = cpu;
        })
    }

    /// Every rule, written out independently: whether stopping `set` on `node` makes room for `w`
    /// without losing airtime.
    fn feasible(snapshot: &Snapshot<'_>, node: u32, w: &Workload<'_>, set: &[u32]) -> bool {
        let settings = snapshot.settings.unwrap();
        let now = snapshot.now_ms;
        let mut freed_gpus = 0;
        for &v in set {
            let vw = &snapshot.workloads[v as usize];
            let ran_s = (now - vw.started_ms) / 1000;
            let allowed = vw.node == Some(node)
                && vw.preemptible
                && vw.class != WorkloadClass::RealtimeInference
                && ran_s >= u64::from(settings.min_runtime_s)
                && vw.preemptions_last_hour < settings.max_preemptions_per_hour
                && (vw.checkpointable || !settings.checkpointable_only);
            if !allowed {
                return false;
            }
            freed_gpus +=
                snapshot.node_gpus(node).filter(|(_, g)| g.holder == Some(v) && g.sharers <= 1).count() as u32;
        }
        let free = snapshot.node_gpus(node).filter(|(_, g)| g.holder.is_none()).count() as u32;
        let cpu_free = snapshot.nodes[node as usize].cpu_millis_free;
        let freed =
            |f: &dyn Fn(&Workload<'_>) -> u64| -> u64 { set.iter().map(|&v| f(&snapshot.workloads[v as usize])).sum() };
        let worth_of = |x: &Workload<'_>| {
            u64::from(x.gpu_count)
                * 1000
                * match x.class {
                    WorkloadClass::RealtimeInference => 8,
                    WorkloadClass::BatchInference => 2,
                    _ => 1,
                }
        };
        let used = freed(&|x| u64::from(x.gpu_count) * 1000) <= u64::from(w.gpu_count) * 1000;
        let resumable = set.iter().all(|&v| snapshot.workloads[v as usize].checkpointable);
        let no_loss = if w.class == WorkloadClass::RealtimeInference {
            (used || resumable) && freed(&worth_of) < worth_of(w)
        } else {
            used
        };
        !set.is_empty()
            && free + freed_gpus >= w.gpu_count
            && u64::from(cpu_free) + freed(&|x| u64::from(x.cpu_millis)) >= u64::from(w.cpu_millis)
            && no_loss
    }

    #[test]
    fn the_search_finds_room_whenever_brute_force_does_and_proposes_only_what_every_rule_allows() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut found, mut none) = (0, 0);
        for case in 0..3000 {
            let fixture = fleet(&mut rng);
            let bytes = fixture.encode();
            let snapshot = decode_snapshot(&bytes).unwrap();
            let plan = Plan::new(&snapshot);
            let (index, w) = snapshot.pending().next().unwrap();
            let need = w.gpu_need();
            if snapshot.ready_nodes().any(|(n, _)| plan.gpus_on(index, n, |g| g).is_some()) {
                continue; // it fits without preempting anything
            }
            let running = RunningByNode::of(&snapshot);
            let reserved = vec![false; snapshot.gpus.len()];
            let already = vec![false; snapshot.workloads.len()];
            let search = VictimSearch {
                plan: &plan,
                workload: w,
                need: &need,
                reserved: &reserved,
                already: &already,
                running: &running,
                rules: VictimRules::of(&snapshot),
            };
            // Only the outranking cause here: reclaim's extra filter is the caller's `eligible`.
            let cause = if w.class == WorkloadClass::RealtimeInference { Cause::Outranks } else { Cause::Reclaims };
            let result = search.run(cause, |_| true);
            // Brute force: every subset of the running work of every node.
            let mut possible = false;
            for (node, _) in snapshot.ready_nodes() {
                let on: Vec<u32> = running.on(node).to_vec();
                for mask in 1u32..(1 << on.len()) {
                    let set: Vec<u32> = (0..on.len()).filter(|i| mask & (1 << i) != 0).map(|i| on[i]).collect();
                    possible |= feasible(&snapshot, node, w, &set);
                }
            }
            match &result {
                Preemption::Victims { node, victims } => {
                    found += 1;
                    assert!(feasible(&snapshot, *node, w, victims), "case {case}: {victims:?} on {node} breaks a rule");
                    let decisions: Vec<Decision<'_>> = victims.iter().map(|&v| Decision::preempt(v, "test")).collect();
                    assert_eq!(check_decisions(&snapshot, &decisions), vec![], "case {case}: the checker refuses it");
                }
                _ => {
                    none += 1;
                    assert!(!possible, "case {case}: brute force makes room where the search found none ({result:?})");
                }
            }
        }
        assert!(found > 100 && none > 100, "the cases cover both outcomes: {found} found, {none} not");
    }
}
