//! `slo-first`: Airtime's default platform policy. It answers the 3 a.m. question — when GPUs free
//! up, does the queued batch job get them, or are they kept for the burst of customer traffic? —
//! from the platform's priority settings, every cycle, with a reason for every call.
//!
//! **Order.** Pending work is ranked: real-time (customer-facing) inference first when
//! `realtime_first`; then work its tenant is guaranteed (within its GPU quota) before work that
//! would borrow; then effective priority (the night bonus for training applied by the host); then
//! submission time.
//!
//! **Placement.** CPU-only work, and CPU-capable work when a CPU node has room, goes to a CPU node
//! (GPUs stay for work that needs them). GPU work is a gang on one node, best fit: the node with the
//! fewest free GPUs left over, GPUs that fit its memory by live telemetry and its allowed models. A
//! container workload only goes to (reserves, and preempts on) a node with a container engine (ABI
//! 1.4); with none ready it waits ("no ready node runs containers").
//!
//! **Burst reserve.** Non-preemptible work other than real-time inference may not leave fewer than
//! `burst_reserve_gpus` GPUs free.
//!
//! **Quotas.** A tenant may hold more than its guarantee only if it may borrow.
//!
//! **Backfill with a reservation.** The highest-ranked GPU workload that cannot be placed reserves
//! the free GPUs of the node where it will fit first; lower-ranked work may use other GPUs but not
//! those, so a stream of small jobs cannot starve a big gang.
//!
//! **Preemption** (of preemptible work only; never of real-time inference):
//! - a real-time workload that does not fit preempts the lowest-priority work on the node where the
//!   fewest victims make room (the customer-facing burst);
//! - work a tenant is guaranteed that does not fit reclaims GPUs from tenants borrowing beyond
//!   their guarantee;
//! - work that has not run `min_runtime_s` is protected, and the waiting workload says for how long.
//!
//! Victims are stopped with the checkpoint signal and requeued; while they stop (the policy sees
//! them as `stopping`), the waiting workload does not preempt more.
//!
//! Params: none.

use std::collections::{BTreeMap, BTreeSet};

use airtime_policy_sdk::fit::{NodeRoom, NodesByFree, RoomIndex, gpu_list};
use airtime_policy_sdk::frag::FragPlacer;
use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct SloFirst;

/// A GPU shape (count, memory per GPU, allowed models, MIG profile, a container engine): workloads
/// of one shape fit the GPUs or fail alike.
type Shape<'a> = (u32, u32, &'a str, &'a str, bool);

/// Everything that decides where a workload fits: GPUs, thousandths and memory of each, models,
/// MIG profile, a container engine, host CPU and memory.
type FullShape<'a> = (u32, u32, u32, &'a str, &'a str, bool, (u32, u32));

airtime_policy_sdk::export_policy!(SloFirst);

/// Where work goes: the least fragmenting fit (the default: fragmentation gradient descent for
/// whole GPUs, shares and CPU work on GPU nodes) or plain best fit (the node with the fewest free
/// GPUs left, the fullest GPU a share fits on), for comparing the two on the same policy
/// (`{"placement": "best_fit"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    LeastFragmenting,
    BestFit,
}

fn read_params(params: &airtime_policy_sdk::params::Params<'_>) -> Result<Placement, Failure> {
    match params.str("placement")? {
        None | Some("least_fragmenting") => Ok(Placement::LeastFragmenting),
        Some("best_fit") => Ok(Placement::BestFit),
        Some(other) => {
            Err(Failure::from(format!("placement must be \"least_fragmenting\" or \"best_fit\", not {other:?}")))
        }
    }
}

/// Why a preemption is made, for the victims' records.
enum Cause<'a> {
    Burst(&'a str),
    Reclaim { needy: &'a str },
}

enum Preemption {
    /// These victims, on this node, make room.
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

impl Policy for SloFirst {
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        read_params(params).map(|_| ())
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let placement = read_params(ctx.params())?;
        let settings = snapshot.settings_or_default();
        let mut plan = Plan::new(snapshot);
        // Held capacity per tenant in thousandths of a GPU: a quarter-GPU share counts 250.
        let mut tenant_gpus: Vec<u32> = snapshot.tenants.iter().map(Tenant::held_milli).collect();
        let guaranteed = |t: u32| snapshot.tenant(t).map_or(0, |t| t.guaranteed_gpus);
        let guaranteed_milli = |t: u32| guaranteed(t).saturating_mul(WHOLE_GPU_MILLI);
        // What typically arrives, for placing work where it fragments least: built at the first
        // placement that asks, so a cycle that places nothing pays nothing for it.
        let mut placer: Option<FragPlacer<'s>> = None;
        let least_fragmenting = placement == Placement::LeastFragmenting;
        let tenant_name = |t: u32| snapshot.tenant(t).map_or("?", |t| t.name);

        let mut order = snapshot.pending_by_priority();
        order.sort_by_key(|(index, w)| {
            let realtime = settings.realtime_first && w.class == WorkloadClass::RealtimeInference;
            let within = tenant_gpus[w.tenant as usize] + w.gpu_demand_milli() <= guaranteed_milli(w.tenant);
            (!realtime, !within, std::cmp::Reverse(snapshot.effective_priority(w)), w.submitted_ms, *index)
        });

        let mut reserved = vec![false; snapshot.gpus.len()];
        let mut head: Option<&str> = None;
        let mut victim = vec![false; snapshot.workloads.len()];
        // Running work per node, built once: victim searches stay linear in what runs on a node.
        let mut by_node: Vec<Vec<u32>> = vec![Vec::new(); snapshot.nodes.len()];
        for (v, vw) in snapshot.running() {
            if let Some(node) = vw.node.filter(|n| (*n as usize) < by_node.len()) {
                by_node[node as usize].push(v);
            }
        }
        // A cycle only takes resources, so a shape that found no room (or no victims) finds none
        // later in the same cycle: remembered, so 10,000 pending workloads cost one search a shape.
        let mut no_fit: BTreeSet<Shape<'_>> = BTreeSet::new();
        let mut unplaceable: BTreeSet<FullShape<'_>> = BTreeSet::new();
        let mut no_victims: BTreeSet<(Shape<'_>, bool)> = BTreeSet::new();
        let mut no_vacating: BTreeSet<Shape<'_>> = BTreeSet::new();
        let mut protected_by_shape: BTreeMap<(Shape<'_>, bool), (u32, u64)> = BTreeMap::new();
        let mut reserved_only: BTreeMap<Shape<'_>, bool> = BTreeMap::new();
        let mut largest_by_shape: BTreeMap<Shape<'_>, u32> = BTreeMap::new();
        let mut most_free_by_shape: BTreeMap<Shape<'_>, Option<(usize, &str)>> = BTreeMap::new();
        let unreserved = vec![false; snapshot.gpus.len()];
        let any_stopping = snapshot.workloads.iter().any(|w| w.state == WorkloadState::Stopping);
        let any_engine = snapshot.ready_nodes().any(|(_, n)| n.containers);
        let mut fleet = FleetIndex::new(snapshot, &plan);

        for (index, w) in order {
            if w.container && !any_engine {
                plan.keep_pending(index, "no ready node runs containers")?;
                continue;
            }
            // CPU-only work, and CPU-capable work while a CPU node has room.
            if !w.needs_gpu() || w.cpu_capable {
                let mut node = fleet.cpu_node(snapshot, &plan, w);
                // CPU work on GPU nodes: where its cores strand the least GPU capacity.
                if !w.needs_gpu() && least_fragmenting && node.is_some_and(|n| snapshot.nodes[n as usize].gpu_count > 0)
                {
                    let placer = placer.get_or_insert_with(|| FragPlacer::new(Workmix::of(snapshot)));
                    node = placer.place(&plan, index, |_| true, |_| true).map(|p| p.node);
                }
                if let Some(node) = node {
                    let n = &snapshot.nodes[node as usize];
                    let reason = if w.needs_gpu() {
                        format!(
                            "CPU-capable: placed on CPU node {} (${:.2}/h), leaving GPUs for work that needs them",
                            n.name, n.cost_per_hour
                        )
                    } else {
                        format!("placed on {} ({} mCPU free)", n.name, plan.cpu_free(node))
                    };
                    fleet.place(&mut plan, index, node, Vec::new(), reason)?;
                    if let Some(p) = placer.as_mut() {
                        p.placed(&plan, node);
                    }
                    continue;
                }
                if !w.needs_gpu() {
                    plan.keep_pending(
                        index,
                        format!("{} has {} mCPU and {} MiB of memory free", no_node(w), w.cpu_millis, w.memory_mb),
                    )?;
                    continue;
                }
            }

            let need = w.gpu_need();
            let t = w.tenant;
            let demand = w.gpu_demand_milli();
            let borrowing = tenant_gpus[t as usize] + demand > guaranteed_milli(t);
            if borrowing && !snapshot.tenant(t).is_some_and(|t| t.may_borrow) {
                plan.keep_pending(
                    index,
                    format!(
                        "quota used up: tenant {} holds {} of its {} guaranteed GPUs and may not borrow",
                        tenant_name(t),
                        gpus_in_words(u64::from(tenant_gpus[t as usize])),
                        guaranteed(t)
                    ),
                )?;
                continue;
            }
            let exempt_from_reserve = w.class == WorkloadClass::RealtimeInference || w.preemptible;
            if settings.burst_reserve_gpus > 0
                && !exempt_from_reserve
                && plan.free_gpu_total().saturating_sub(need.count) < settings.burst_reserve_gpus
            {
                plan.keep_pending(
                    index,
                    format!(
                        "held for the burst reserve: {} GPUs are kept free for real-time inference ({} free now; preemptible work may use them)",
                        settings.burst_reserve_gpus,
                        plan.free_gpu_total()
                    ),
                )?;
                continue;
            }

            // Everything that decides where it fits: a shape that found no place this cycle finds
            // none later in it (a cycle only takes capacity; reservations only grow).
            let full_shape =
                (need.count, need.milli, need.memory_mb, w.gpu_models, w.mig_profile, w.container, host_of(w));
            let placeable = !unplaceable.contains(&full_shape);
            // A share of one GPU: the shareable GPU where it adds the least fragmentation for what
            // typically arrives (not the node reserved for the head's gang).
            if w.is_share() && placeable {
                let open = snapshot
                    .ready_nodes()
                    .map(|(node, _)| node)
                    .filter(|&node| !snapshot.node_gpus(node).any(|(g, _)| reserved[g as usize]));
                let fit = match placement {
                    Placement::LeastFragmenting => placer
                        .get_or_insert_with(|| FragPlacer::new(Workmix::of(snapshot)))
                        .place(
                            &plan,
                            index,
                            |node| !snapshot.node_gpus(node).any(|(g, _)| reserved[g as usize]),
                            |g| snapshot.gpus[g as usize].is_shareable(),
                        )
                        .map(|p| (p.node, p.gpus[0], fragment_words(p.added))),
                    Placement::BestFit => plan.best_fit_share(index, open).map(|(n, g)| (n, g, "best fit".to_owned())),
                };
                if let Some((node, gpu, how)) = fit {
                    let n = &snapshot.nodes[node as usize];
                    let g = &snapshot.gpus[gpu as usize];
                    let reason = format!(
                        "shares {} GPU {} ({}): {}/1000 and {} MiB, leaving {}/1000 free; {how}; {} priority {}",
                        n.name,
                        g.device_index,
                        g.sharing,
                        w.gpu_milli,
                        w.gpu_memory_mb,
                        plan.free_milli(gpu) - w.gpu_milli,
                        w.class.as_str(),
                        snapshot.effective_priority(w)
                    );
                    tenant_gpus[t as usize] += demand;
                    fleet.place(&mut plan, index, node, vec![gpu], reason)?;
                    if let Some(p) = placer.as_mut() {
                        p.placed(&plan, node);
                    }
                    continue;
                }
            }

            let shape = (need.count, need.memory_mb, w.gpu_models, w.mig_profile, w.container);
            let host = (w.cpu_millis, w.memory_mb);
            // `no_fit` remembers GPU shapes that found no GPUs at all; host CPU and memory vary per
            // workload, so a failure for want of them is not remembered.
            let fit = if no_fit.contains(&shape) || !placeable {
                None
            } else if least_fragmenting && need.mig_profile.is_empty() {
                placer
                    .get_or_insert_with(|| FragPlacer::new(Workmix::of(snapshot)))
                    .place(&plan, index, |_| true, |g| !reserved[g as usize])
                    .map(|p| {
                        let left = plan.free_gpu_count(p.node)
                            - p.gpus.iter().filter(|&&g| plan.is_gpu_free(g)).count() as u32;
                        (p.node, p.gpus, left, fragment_words(p.added))
                    })
            } else {
                best_fit(snapshot, &plan, &fleet, w, &need, host, &reserved)
                    .map(|(n, g, left)| (n, g, left, String::new()))
            };
            if fit.is_none() {
                unplaceable.insert(full_shape);
            }
            if fit.is_none()
                && !no_fit.contains(&shape)
                && best_fit(snapshot, &plan, &fleet, w, &need, (0, 0), &reserved).is_none()
            {
                no_fit.insert(shape);
            }
            if let Some((node, gpus, left, how)) = fit {
                let n = &snapshot.nodes[node as usize];
                let how = if how.is_empty() { "best fit".to_owned() } else { how };
                let mut reason = format!(
                    "{how} on {}: {} (leaves {left} free there); {} priority {}",
                    n.name,
                    gpu_list(snapshot, &gpus),
                    w.class.as_str(),
                    snapshot.effective_priority(w)
                );
                if borrowing {
                    reason.push_str(&format!(
                        "; borrowing idle capacity beyond tenant {}'s guarantee of {}",
                        tenant_name(t),
                        guaranteed(t)
                    ));
                }
                // On a shareable GPU a share takes only its thousandths; anywhere else the GPU.
                let held = if w.is_share() && gpus.iter().all(|&g| snapshot.gpus[g as usize].is_shareable()) {
                    demand
                } else {
                    need.count * WHOLE_GPU_MILLI
                };
                tenant_gpus[t as usize] += held;
                fleet.place(&mut plan, index, node, gpus, reason)?;
                if let Some(p) = placer.as_mut() {
                    p.placed(&plan, node);
                }
                continue;
            }

            // It does not fit now. Is it only the reservation for the head that stops it?
            let only_reserved = head.is_some()
                && *reserved_only
                    .entry(shape)
                    .or_insert_with(|| best_fit(snapshot, &plan, &fleet, w, &need, host, &unreserved).is_some());
            if let Some(owner) = head.filter(|_| only_reserved) {
                plan.keep_pending(
                    index,
                    format!(
                        "the fitting GPUs are reserved for {owner}, ahead of it in the queue (waiting for its gang)"
                    ),
                )?;
                continue;
            }

            // GPUs already being vacated for it (victims stopping): wait for them, preempt no more.
            // (A shape that found no node being vacated finds none later in the cycle either: the
            // stopping work stays stopping, and free and unreserved GPUs only get fewer.)
            let vacating = if any_stopping && !no_vacating.contains(&shape) {
                vacating_fits(snapshot, &plan, w, &need, &reserved)
            } else {
                None
            };
            if vacating.is_none() && any_stopping {
                no_vacating.insert(shape);
            }
            if let Some(node) = vacating {
                reserve_node(snapshot, &plan, node, &need, &mut reserved);
                plan.keep_pending(
                    index,
                    format!(
                        "waiting for preempted work on {} to stop (grace period {} s)",
                        snapshot.nodes[node as usize].name, settings.grace_period_s
                    ),
                )?;
                continue;
            }

            let cause = if settings.realtime_first && w.class == WorkloadClass::RealtimeInference {
                Some(Cause::Burst(w.name))
            } else if !borrowing {
                Some(Cause::Reclaim { needy: tenant_name(t) })
            } else {
                None
            };
            let victim_key = (shape, matches!(cause, Some(Cause::Burst(_))));
            if cause.is_some()
                && let Some(&(v, remaining_s)) = protected_by_shape.get(&victim_key)
            {
                plan.keep_pending(
                    index,
                    format!(
                        "waiting: {} is protected by its minimum runtime for {remaining_s} more s",
                        snapshot.workloads[v as usize].name
                    ),
                )?;
                continue;
            }
            if let Some(cause) = cause.filter(|_| !no_victims.contains(&victim_key)) {
                let search = Search {
                    plan: &plan,
                    workload: w,
                    need: &need,
                    reserved: &reserved,
                    already: &victim,
                    by_node: &by_node,
                };
                match choose_victims(snapshot, &search, &cause, &tenant_gpus, settings.min_runtime_s) {
                    Preemption::Victims { node, victims } => {
                        for &v in &victims {
                            let vw = &snapshot.workloads[v as usize];
                            let why = match &cause {
                                Cause::Burst(name) => format!(
                                    "preempted for real-time inference {name} (customer-facing burst); requeued, resumes from its checkpoint"
                                ),
                                Cause::Reclaim { needy } => format!(
                                    "reclaimed: tenant {} borrows beyond its guarantee of {} and tenant {needy} needs its guaranteed GPUs back; requeued",
                                    tenant_name(vw.tenant),
                                    guaranteed(vw.tenant)
                                ),
                            };
                            victim[v as usize] = true;
                            tenant_gpus[vw.tenant as usize] =
                                tenant_gpus[vw.tenant as usize].saturating_sub(vw.gpu_demand_milli());
                            plan.preempt(v, why)?;
                        }
                        reserve_node(snapshot, &plan, node, &need, &mut reserved);
                        let names: Vec<&str> = victims.iter().map(|&v| snapshot.workloads[v as usize].name).collect();
                        plan.keep_pending(
                            index,
                            format!(
                                "preempting {} on {} to make room; placed once they stop",
                                names.join(", "),
                                snapshot.nodes[node as usize].name
                            ),
                        )?;
                        continue;
                    }
                    Preemption::Protected { victim: v, remaining_s } => {
                        // Nothing of this shape can preempt this cycle: later ones wait with it.
                        protected_by_shape.insert(victim_key, (v, remaining_s));
                        plan.keep_pending(
                            index,
                            format!(
                                "waiting: {} is protected by its minimum runtime for {remaining_s} more s",
                                snapshot.workloads[v as usize].name
                            ),
                        )?;
                        continue;
                    }
                    Preemption::Impossible => {
                        no_victims.insert(victim_key);
                    }
                }
            }

            // The head of the queue reserves the node where it will fit first.
            let most = *most_free_by_shape.entry(shape).or_insert_with(|| {
                snapshot
                    .ready_nodes()
                    .filter(|(_, n)| n.can_run(w))
                    .map(|(node, n)| {
                        (
                            plan.free_gpus(node).filter(|(g, gpu)| need.fits(gpu) && !reserved[*g as usize]).count(),
                            n.name,
                        )
                    })
                    .max_by_key(|(free, _)| *free)
            });
            let (most_free, most_name) = most.unwrap_or((0, "no node"));
            let largest = *largest_by_shape.entry(shape).or_insert_with(|| {
                snapshot
                    .ready_nodes()
                    .filter(|(_, n)| n.can_run(w))
                    .map(|(node, _)| snapshot.node_gpus(node).filter(|(_, g)| usable(&need, g)).count() as u32)
                    .max()
                    .unwrap_or(0)
            });
            if largest < need.count {
                plan.keep_pending(
                    index,
                    format!("{} has {} at all (the most on one node is {largest})", no_node(w), need.describe("")),
                )?;
                continue;
            }
            // A share waits for room on a shared GPU, not for a node of its own: it reserves none.
            if head.is_none()
                && !w.is_share()
                && let Some(node) = soonest_node(snapshot, &plan, w, &need)
            {
                reserve_node(snapshot, &plan, node, &need, &mut reserved);
                head = Some(w.name);
                plan.keep_pending(
                    index,
                    format!(
                        "waiting for its gang: needs {} on one node; the most free on one node is {most_free} ({most_name}); the free GPUs of {} are reserved for it",
                        need.describe("free"),
                        snapshot.nodes[node as usize].name
                    ),
                )?;
                continue;
            }
            plan.keep_pending(
                index,
                format!(
                    "{} has {}; the most free on one node is {most_free} ({most_name})",
                    no_node(w),
                    need.describe("free")
                ),
            )?;
        }
        Ok(plan.into_decisions())
    }
}

/// The host CPU and memory a workload asks for.
fn host_of(w: &Workload<'_>) -> (u32, u32) {
    (w.cpu_millis, w.memory_mb)
}

/// How a fragmentation-aware placement is explained: what it adds to the capacity no typical
/// workload could use.
fn fragment_words(added: f64) -> String {
    format!("the least fragmenting fit ({added:+.0}/1000 GPU expected unusable)")
}

/// "no ready node", or for a container workload (which looks only at the nodes with a container
/// engine) "no ready node that runs containers".
fn no_node(w: &Workload<'_>) -> &'static str {
    if w.container { "no ready node that runs containers" } else { "no ready node" }
}

/// The ready nodes indexed by what they have free (the SDK's placement toolkit), kept current as
/// the cycle places work, so a placement looks at the tightest candidates instead of the fleet.
/// The CPU indexes are built at the first CPU placement that asks, from the plan as it stands: a
/// cycle with no CPU work (most cycles of a GPU cluster) sorts nothing for it.
struct FleetIndex {
    /// Ready nodes by free GPUs.
    free: NodesByFree,
    /// Ready CPU-only nodes, the least free CPU first, then the cheapest; and every ready node,
    /// the least free CPU first.
    cpu: Option<CpuRoom>,
}

struct CpuRoom {
    cpu_only: RoomIndex,
    every: RoomIndex,
}

fn room(plan: &Plan<'_, '_>, node: u32, tie: u64) -> NodeRoom {
    NodeRoom { node, tier: 0, cpu: plan.cpu_free(node), memory: plan.memory_free(node), tie }
}

impl FleetIndex {
    fn new(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>) -> Self {
        FleetIndex { free: NodesByFree::of_ready_nodes(snapshot, plan), cpu: None }
    }

    fn cpu_room(&mut self, snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>) -> &CpuRoom {
        self.cpu.get_or_insert_with(|| {
            let cpu_only =
                snapshot.ready_nodes().filter(|(_, n)| n.gpu_count == 0).map(|(node, n)| room(plan, node, cents(n)));
            CpuRoom {
                cpu_only: RoomIndex::new(snapshot.nodes.len(), cpu_only),
                every: RoomIndex::new(
                    snapshot.nodes.len(),
                    snapshot.ready_nodes().map(|(node, _)| room(plan, node, 0)),
                ),
            }
        })
    }

    /// Places `workload` through the plan and files what the placement took.
    fn place<'a>(
        &mut self,
        plan: &mut Plan<'_, 'a>,
        workload: u32,
        node: u32,
        gpus: Vec<u32>,
        reason: String,
    ) -> Result<(), Failure> {
        let before = plan.free_gpu_count(node);
        plan.place(workload, node, gpus, reason)?;
        self.free.moved(node, before, plan.free_gpu_count(node));
        if let Some(cpu) = self.cpu.as_mut() {
            let (free_cpu, memory) = (plan.cpu_free(node), plan.memory_free(node));
            let tie = plan.snapshot().node(node).map_or(0, cents);
            cpu.cpu_only.set(node, free_cpu, memory, tie);
            cpu.every.set(node, free_cpu, memory, 0);
        }
        Ok(())
    }

    /// A ready CPU-only node that can run the workload with room for its CPU and memory, tightest
    /// CPU fit first (then the cheapest); for CPU-only work, failing that, any ready node with the
    /// room, tightest first.
    fn cpu_node(&mut self, snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, w: &Workload<'_>) -> Option<u32> {
        let can_run = |node: u32| snapshot.node(node).is_some_and(|n| n.can_run(w));
        let cpu = self.cpu_room(snapshot, plan);
        if let Some(node) = cpu.cpu_only.best(w.cpu_millis, w.memory_mb, can_run) {
            return Some(node);
        }
        // CPU-only work may also use the CPU of GPU nodes.
        if w.needs_gpu() {
            return None;
        }
        cpu.every.best(w.cpu_millis, w.memory_mb, can_run)
    }
}

/// A node's cost per hour in cents, the tie-break between CPU nodes of equal free CPU.
fn cents(n: &Node<'_>) -> u64 {
    u64::from((n.cost_per_hour * 100.0) as u32)
}

/// The node that can run `w` whose fitting free GPUs (not reserved) hold the gang with the fewest
/// left over.
///
/// Nodes are visited by their free-GPU count (the fleet index's groups, tightest first), so the GPU
/// lists are only built for the best candidates: this runs once per placement over 1,000 nodes.
fn best_fit(
    snapshot: &Snapshot<'_>,
    plan: &Plan<'_, '_>,
    fleet: &FleetIndex,
    w: &Workload<'_>,
    need: &GpuNeed<'_>,
    (cpu_millis, memory_mb): (u32, u32),
    reserved: &[bool],
) -> Option<(u32, Vec<u32>, u32)> {
    if need.count == 0 {
        return None;
    }
    let mut fitting: Vec<(u32, u32)> = Vec::new();
    for group in fleet.free.at_least(need.count) {
        for &node in group {
            let runs = snapshot.node(node).is_some_and(|n| n.can_run(w));
            // The node must also have the host CPU and memory the workload asks for.
            if !runs || plan.cpu_free(node) < cpu_millis || plan.memory_free(node) < memory_mb {
                continue;
            }
            fitting.clear();
            fitting.extend(
                plan.free_gpus(node)
                    .filter(|(g, gpu)| need.fits(gpu) && !reserved[*g as usize])
                    .map(|(g, gpu)| (gpu.memory_free_mb(), g)),
            );
            if (fitting.len() as u32) < need.count {
                continue;
            }
            // The tightest GPUs by free memory, keeping roomy ones for bigger work.
            fitting.sort_unstable();
            let gpus: Vec<u32> = fitting.iter().take(need.count as usize).map(|(_, g)| *g).collect();
            return Some((node, gpus, plan.free_gpu_count(node) - need.count));
        }
    }
    None
}

/// Whether `gpu` could ever serve `need` (model and device kind: MIG instances only for their
/// profile), whoever holds it now.
fn usable(need: &GpuNeed<'_>, gpu: &Gpu<'_>) -> bool {
    need.allows_model(gpu.model) && need.device_kind_fits(gpu)
}

/// A node that can run `w` where the free GPUs plus those held by stopping work would hold the gang.
fn vacating_fits(
    snapshot: &Snapshot<'_>,
    plan: &Plan<'_, '_>,
    w: &Workload<'_>,
    need: &GpuNeed<'_>,
    reserved: &[bool],
) -> Option<u32> {
    snapshot.ready_nodes().filter(|(_, n)| n.can_run(w)).map(|(node, _)| node).find(|&node| {
        let mut stopping = 0u32;
        let mut free = 0u32;
        for (g, gpu) in snapshot.node_gpus(node) {
            if !usable(need, gpu) || reserved[g as usize] {
                continue;
            }
            match gpu.holder {
                Some(h) if snapshot.workloads[h as usize].state == WorkloadState::Stopping => stopping += 1,
                None if plan.is_gpu_free(g) && need.fits(gpu) => free += 1,
                _ => {}
            }
        }
        stopping > 0 && free + stopping >= need.count
    })
}

/// Marks the free fitting GPUs of `node` as reserved.
fn reserve_node(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, node: u32, need: &GpuNeed<'_>, reserved: &mut [bool]) {
    for (g, gpu) in snapshot.node_gpus(node) {
        if plan.is_gpu_free(g) && usable(need, gpu) {
            reserved[g as usize] = true;
        }
    }
}

/// Where the gang will fit first: a node that can run `w` with enough GPUs of an allowed model,
/// most of them free now, then the fewest held by long-running work.
fn soonest_node(snapshot: &Snapshot<'_>, plan: &Plan<'_, '_>, w: &Workload<'_>, need: &GpuNeed<'_>) -> Option<u32> {
    snapshot
        .ready_nodes()
        .filter(|(node, n)| {
            n.can_run(w) && snapshot.node_gpus(*node).filter(|(_, g)| usable(need, g)).count() as u32 >= need.count
        })
        .max_by_key(|(node, _)| (plan.free_gpu_count(*node), std::cmp::Reverse(*node)))
        .map(|(node, _)| node)
}

/// What running a workload is worth, to weigh a preemption: its GPU capacity times its class's
/// worth per GPU (customer-facing inference 8, batch inference 2, the rest 1), so a burst may stop
/// training or batch inference of its own size, never other customer-facing work.
fn worth(w: &Workload<'_>) -> u64 {
    let per_gpu = match w.class {
        WorkloadClass::RealtimeInference => 8,
        WorkloadClass::BatchInference => 2,
        _ => 1,
    };
    u64::from(w.gpu_demand_milli()) * per_gpu
}

/// What a victim search looks at.
struct Search<'p, 's, 'a> {
    plan: &'p Plan<'s, 'a>,
    /// The workload that needs room: only a node that can run it is searched.
    workload: &'p Workload<'a>,
    need: &'p GpuNeed<'a>,
    reserved: &'p [bool],
    /// Already chosen as victims this cycle.
    already: &'p [bool],
    by_node: &'p [Vec<u32>],
}

fn choose_victims(
    snapshot: &Snapshot<'_>,
    search: &Search<'_, '_, '_>,
    cause: &Cause<'_>,
    tenant_gpus: &[u32],
    min_runtime_s: u32,
) -> Preemption {
    let Search { plan, workload, need, reserved, already, by_node } = *search;
    let now = snapshot.now_ms;
    let guaranteed = |t: u32| snapshot.tenant(t).map_or(0, |t| t.guaranteed_gpus);
    let mut best: Option<(u32, Vec<u32>)> = None;
    let mut protected: Option<(u32, u64)> = None;
    for (node, _) in snapshot.ready_nodes().filter(|(_, n)| n.can_run(workload)) {
        let free = plan.free_gpus(node).filter(|(g, gpu)| need.fits(gpu) && !reserved[*g as usize]).count() as u32;
        // Candidates on this node, cheapest to stop first: lowest priority, then the most recently started.
        let mut candidates: Vec<(u32, &Workload<'_>)> = by_node[node as usize]
            .iter()
            .map(|&v| (v, &snapshot.workloads[v as usize]))
            .filter(|(v, vw)| {
                vw.preemptible
                    && !already[*v as usize]
                    && vw.class != WorkloadClass::RealtimeInference
                    && match cause {
                        Cause::Burst(_) => true,
                        Cause::Reclaim { .. } => {
                            tenant_gpus[vw.tenant as usize] > guaranteed(vw.tenant).saturating_mul(WHOLE_GPU_MILLI)
                        }
                    }
            })
            .collect();
        // Cheapest to stop first: the lowest priority, then checkpointable work (it resumes), then
        // the fewest GPU-seconds a restart from scratch would throw away.
        let lost = |vw: &Workload<'_>| {
            if vw.checkpointable { 0 } else { vw.running_ms(now).saturating_mul(u64::from(vw.gpu_demand_milli())) }
        };
        candidates.sort_by_key(|(v, vw)| (snapshot.effective_priority(vw), !vw.checkpointable, lost(vw), *v));
        let mut gained = free;
        let mut chosen: Vec<u32> = Vec::new();
        for (v, vw) in candidates {
            if gained >= need.count {
                break;
            }
            // Its GPUs are on this node: look there, not through the whole fleet's GPU table.
            let frees =
                snapshot.node_gpus(node).filter(|(_, gpu)| gpu.holder == Some(v) && usable(need, gpu)).count() as u32;
            if frees == 0 {
                continue;
            }
            let ran_s = vw.running_ms(now) / 1000;
            if vw.started_ms != 0 && ran_s < u64::from(min_runtime_s) {
                let remaining = u64::from(min_runtime_s) - ran_s;
                if protected.is_none_or(|(_, r)| remaining < r) {
                    protected = Some((v, remaining));
                }
                continue;
            }
            gained += frees;
            chosen.push(v);
        }
        // Never lose airtime: the preemptor must fit once they stop (its host CPU and memory too),
        // and for a burst the work stopped must be worth less than the work started (by the
        // classes' worth per GPU). What they free must be used at once — no more GPU capacity
        // stopped than started, or the rest stands idle while they wait again — except for a burst
        // whose victims are all checkpointable: they lose nothing, and what the burst leaves of
        // their GPUs goes back to the queue (customer traffic does not wait on a bigger job).
        let freed =
            |f: fn(&Workload<'_>) -> u64| -> u64 { chosen.iter().map(|&v| f(&snapshot.workloads[v as usize])).sum() };
        let fits_after = u64::from(plan.cpu_free(node)) + freed(|vw| u64::from(vw.cpu_millis))
            >= u64::from(workload.cpu_millis)
            && u64::from(plan.memory_free(node)) + freed(|vw| u64::from(vw.memory_mb)) >= u64::from(workload.memory_mb);
        let used = freed(|vw| u64::from(vw.gpu_demand_milli())) <= u64::from(workload.gpu_demand_milli());
        let resumable = chosen.iter().all(|&v| snapshot.workloads[v as usize].checkpointable);
        let no_loss = match cause {
            Cause::Burst(_) => (used || resumable) && freed(worth) < worth(workload),
            Cause::Reclaim { .. } => used,
        };
        if gained >= need.count
            && !chosen.is_empty()
            && fits_after
            && no_loss
            && best.as_ref().is_none_or(|(_, b)| chosen.len() < b.len())
        {
            best = Some((node, chosen));
        }
    }
    match (best, protected) {
        (Some((node, victims)), _) => Preemption::Victims { node, victims },
        (None, Some((victim, remaining_s))) => Preemption::Protected { victim, remaining_s },
        (None, None) => Preemption::Impossible,
    }
}

#[cfg(test)]
mod tests;
