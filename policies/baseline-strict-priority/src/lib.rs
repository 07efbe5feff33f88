//! Baseline **strict priority with preemption**: what Kueue (priority-based preemption,
//! `withinClusterQueue: LowerPriority`) and Slurm (`PreemptType=preempt/partition_prio` or `qos`,
//! `PreemptMode=REQUEUE`) do by default. A baseline the simulator (`sim/`) compares Airtime's
//! policies against; not registered by the control plane (`airtime_builtin_policies::BASELINES`).
//!
//! - **Order.** The workload's own priority (highest first), then submission, then table order. No
//!   classes, tenants, guarantees or night bonus: priority is everything.
//! - **Fit.** Each workload goes to the first ready node, in snapshot order, where it fits now
//!   ([`Plan::first_fit`]: free GPUs of an allowed model with the memory, host CPU and memory).
//!   Work with no GPUs runs on any node's CPU; GPU work has no CPU fallback. A container workload
//!   only goes to (and only preempts on) a node with a container engine (ABI 1.4).
//! - **Preemption.** A workload that does not fit looks for one node where stopping running,
//!   preemptible workloads of strictly lower priority would make room. Work already `stopping` there
//!   counts as freeing, so a workload whose victims are still stopping waits for them and preempts
//!   nothing more. On each node the victims are the lowest priority first (then the most recently
//!   started), pruned to a minimal set as Kueue does (dropping, highest priority first, any victim
//!   not needed); the node needing the fewest victims wins, then the lowest victim priority, then
//!   snapshot order. The victims are preempted and the workload stays pending; it starts once they
//!   have stopped.
//! - **Holding.** A node where a workload waits for stopping work is held for it this cycle: nothing
//!   of lower priority is placed there, so nothing takes the room being made.
//! - **The host's rules.** Work that has run less than the settings' `min_runtime_s` is not
//!   proposed (the host would refuse it), nor is anything when the settings cap preemptions at 0
//!   an hour. The per-workload hourly count is not in the snapshot: the host enforces it.
//!
//! Params: none.

use std::collections::BTreeMap;

use airtime_policy_sdk::prelude::*;

#[derive(Debug, Clone, Copy, Default)]
pub struct StrictPriority;

airtime_policy_sdk::export_policy!(StrictPriority);

/// (GPU count, MiB per GPU, models, mCPU, MiB, a container engine). Processed highest priority
/// first, a cycle only takes resources, holds nodes and claims victims, so a shape that can neither
/// fit nor make room cannot later in the cycle either, at the same or a lower priority.
type Shape<'a> = (u32, u32, &'a str, u32, u32, bool);

/// How a workload that does not fit gets room.
enum Room {
    /// On `node`, by preempting `victims` (none: work stopping there already makes room), whose
    /// highest priority is `top` (`i32::MIN` for none).
    On {
        node: u32,
        victims: Vec<u32>,
        top: i32,
    },
    /// Only work inside its minimum runtime could make room: the one free soonest, and when.
    Protected {
        victim: u32,
        remaining_s: u64,
    },
    None,
}

impl Policy for StrictPriority {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        let rules = Rules::of(snapshot);
        let ready: Vec<u32> = snapshot.ready_nodes().map(|(n, _)| n).collect();
        let any_engine = snapshot.ready_nodes().any(|(_, n)| n.containers);
        // Running and stopping work by node, built once: victim searches look at one node's work.
        let mut on_node: Vec<Vec<u32>> = vec![Vec::new(); snapshot.nodes.len()];
        for (index, w) in snapshot.workloads_indexed().filter(|(_, w)| w.holds_resources()) {
            if let Some(list) = w.node.and_then(|n| on_node.get_mut(n as usize)) {
                list.push(index);
            }
        }
        let mut plan = Plan::new(snapshot);
        let mut held = vec![false; snapshot.nodes.len()];
        let mut stuck: BTreeMap<Shape<'s>, String> = BTreeMap::new();
        let (mut placed, mut preempted) = (0, 0);

        for (index, w) in snapshot.pending_by_priority() {
            let shape = (w.gpu_count, w.gpu_memory_mb, w.gpu_models, w.cpu_millis, w.memory_mb, w.container);
            if let Some(reason) = stuck.get(&shape) {
                plan.keep_pending(index, reason.clone())?;
                continue;
            }
            if w.container && !any_engine {
                let reason = "strict priority: no ready node runs containers".to_owned();
                plan.keep_pending(index, reason.clone())?;
                stuck.insert(shape, reason);
                continue;
            }
            // `first_fit` skips the nodes that cannot run it (a container workload, no engine).
            let open = ready.iter().copied().filter(|&n| !held[n as usize]);
            if let Some((node, gpus)) = plan.first_fit(index, open) {
                let name = snapshot.nodes[node as usize].name;
                plan.place(index, node, gpus, format!("strict priority {}: first fit on {name}", w.priority))?;
                placed += 1;
                continue;
            }
            let search = Search { snapshot, plan: &plan, on_node: &on_node, rules };
            // Room only on a node that can run it: preempting elsewhere would free nothing it can use.
            let room = ready
                .iter()
                .filter(|&&n| !held[n as usize] && (!w.container || plan.can_run(w, n)))
                .map(|&node| search.room_on(node, w))
                .fold(Room::None, better);
            match room {
                Room::On { node, victims, .. } => {
                    let name = snapshot.nodes[node as usize].name;
                    held[node as usize] = true;
                    for &v in &victims {
                        let vw = &snapshot.workloads[v as usize];
                        let reason = format!(
                            "strict priority: preempted for {} (priority {} over {}); requeued",
                            w.name, w.priority, vw.priority
                        );
                        plan.preempt(v, reason)?;
                    }
                    preempted += victims.len();
                    let reason = if victims.is_empty() {
                        format!("strict priority {}: waits for stopping work on {name} to free room", w.priority)
                    } else {
                        let names: Vec<&str> = victims.iter().map(|&v| snapshot.workloads[v as usize].name).collect();
                        format!(
                            "strict priority {}: preempting {} on {name}; starts once they stop",
                            w.priority,
                            names.join(", ")
                        )
                    };
                    plan.keep_pending(index, reason)?;
                }
                Room::Protected { victim, remaining_s } => {
                    let reason = format!(
                        "strict priority: no ready node has {}; lower-priority {} is protected by its minimum runtime for {remaining_s} more s",
                        w.needs_in_words(),
                        snapshot.workloads[victim as usize].name
                    );
                    plan.keep_pending(index, reason.clone())?;
                    stuck.insert(shape, reason);
                }
                Room::None => {
                    let why = if rules.no_preemptions {
                        "the settings allow no preemptions"
                    } else {
                        "preempting lower-priority work would not make room"
                    };
                    let reason = format!("strict priority: no ready node has {}; {why}", w.needs_in_words());
                    plan.keep_pending(index, reason.clone())?;
                    stuck.insert(shape, reason);
                }
            }
        }
        let waiting = plan.decisions().len() - placed - preempted;
        ctx.info(format_args!("placed {placed}, preempted {preempted}; {waiting} wait"));
        Ok(plan.into_decisions())
    }
}

/// The preemption rules the snapshot shows.
#[derive(Debug, Clone, Copy)]
struct Rules {
    min_runtime_s: u64,
    /// The settings cap preemptions at 0 an hour: the host refuses every one.
    no_preemptions: bool,
}

impl Rules {
    fn of(snapshot: &Snapshot<'_>) -> Rules {
        Rules {
            min_runtime_s: u64::from(snapshot.settings_or_default().min_runtime_s),
            no_preemptions: snapshot.settings.is_some_and(|s| s.max_preemptions_per_hour == 0),
        }
    }
}

/// What a victim search looks at.
struct Search<'p, 's, 'a> {
    snapshot: &'p Snapshot<'a>,
    plan: &'p Plan<'s, 'a>,
    on_node: &'p [Vec<u32>],
    rules: Rules,
}

/// What stopping some work would free on a node for one workload.
#[derive(Debug, Clone, Copy, Default)]
struct Freed {
    gpus: u32,
    cpu_millis: u64,
    memory_mb: u64,
}

impl Search<'_, '_, '_> {
    /// How `w` could get room on `node`: stopping work counts as freeing; then the fewest running,
    /// preemptible workloads of lower priority that are past their minimum runtime and not already
    /// claimed this cycle.
    fn room_on(&self, node: u32, w: &Workload<'_>) -> Room {
        let (snapshot, plan) = (self.snapshot, self.plan);
        let need = w.gpu_need();
        let enough = |f: Freed| {
            f.gpus >= need.count && f.cpu_millis >= u64::from(w.cpu_millis) && f.memory_mb >= u64::from(w.memory_mb)
        };
        // What stopping `v` frees: its host CPU and memory, and its GPUs that would serve `w` (an
        // allowed model with the memory once it is gone).
        let frees = |v: u32| {
            let vw = &snapshot.workloads[v as usize];
            let gpus = snapshot
                .node_gpus(node)
                .filter(|(_, g)| g.holder == Some(v) && need.allows_model(g.model) && g.memory_mb >= need.memory_mb)
                .count() as u32;
            Freed { gpus, cpu_millis: u64::from(vw.cpu_millis), memory_mb: u64::from(vw.memory_mb) }
        };
        let add = |a: Freed, b: Freed| Freed {
            gpus: a.gpus + b.gpus,
            cpu_millis: a.cpu_millis + b.cpu_millis,
            memory_mb: a.memory_mb + b.memory_mb,
        };
        let mut base = Freed {
            gpus: plan.free_gpus(node).filter(|(_, g)| need.fits(g)).count() as u32,
            cpu_millis: u64::from(plan.cpu_free(node)),
            memory_mb: u64::from(plan.memory_free(node)),
        };
        let work = self.on_node.get(node as usize).map_or(&[][..], Vec::as_slice);
        let mut stopping = false;
        for &v in work.iter().filter(|&&v| snapshot.workloads[v as usize].is_stopping()) {
            base = add(base, frees(v));
            stopping = true;
        }
        if enough(base) {
            // Free room alone would have been found by first fit: it is stopping work that fits it.
            return if stopping { Room::On { node, victims: Vec::new(), top: i32::MIN } } else { Room::None };
        }
        if self.rules.no_preemptions {
            return Room::None;
        }

        let mut candidates: Vec<(u32, &Workload<'_>)> = Vec::new();
        let mut protected: Option<(u32, u64)> = None;
        let mut with_protected = base;
        for &v in work {
            let vw = &snapshot.workloads[v as usize];
            if !vw.is_running() || !vw.preemptible || vw.priority >= w.priority || plan.is_decided(v) {
                continue;
            }
            let ran_s = vw.running_ms(snapshot.now_ms) / 1000;
            if vw.started_ms != 0 && ran_s < self.rules.min_runtime_s {
                let remaining = self.rules.min_runtime_s - ran_s;
                if protected.is_none_or(|(_, r)| remaining < r) {
                    protected = Some((v, remaining));
                }
                with_protected = add(with_protected, frees(v));
                continue;
            }
            with_protected = add(with_protected, frees(v));
            candidates.push((v, vw));
        }
        // Cheapest to stop first: the lowest priority, then the most recently started.
        candidates.sort_by_key(|&(v, vw)| (vw.priority, std::cmp::Reverse(vw.started_ms), v));
        let mut victims: Vec<(u32, Freed)> = Vec::new();
        let mut gained = base;
        for &(v, _) in &candidates {
            if enough(gained) {
                break;
            }
            let freed = frees(v);
            gained = add(gained, freed);
            victims.push((v, freed));
        }
        if !enough(gained) {
            return match protected {
                Some((victim, remaining_s)) if enough(with_protected) => Room::Protected { victim, remaining_s },
                _ => Room::None,
            };
        }
        // Minimal: drop, highest priority first, every victim the rest make room without.
        for at in (0..victims.len()).rev() {
            let without = victims
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != at)
                .fold(base, |sum, (_, &(_, freed))| add(sum, freed));
            if enough(without) {
                victims.remove(at);
            }
        }
        let top = victims.iter().map(|&(v, _)| snapshot.workloads[v as usize].priority).max().unwrap_or(i32::MIN);
        Room::On { node, victims: victims.into_iter().map(|(v, _)| v).collect(), top }
    }
}

/// The better of two ways to get room: on a node, the fewest victims, then the lowest highest-victim
/// priority, then the earlier node (`a`: the fold visits nodes in order); else the protected victim
/// free soonest.
fn better(a: Room, b: Room) -> Room {
    match (a, b) {
        (a @ Room::On { .. }, b @ Room::On { .. }) => {
            let key = |r: &Room| match r {
                Room::On { victims, top, .. } => (victims.len(), *top),
                _ => (usize::MAX, i32::MAX),
            };
            if key(&b) < key(&a) { b } else { a }
        }
        (on @ Room::On { .. }, _) | (_, on @ Room::On { .. }) => on,
        (a @ Room::Protected { remaining_s: ar, .. }, b @ Room::Protected { remaining_s: br, .. }) => {
            if br < ar {
                b
            } else {
                a
            }
        }
        (p @ Room::Protected { .. }, Room::None) | (Room::None, p @ Room::Protected { .. }) => p,
        (Room::None, Room::None) => Room::None,
    }
}

#[cfg(test)]
mod tests;
