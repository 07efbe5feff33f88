//! Checks of decisions against the snapshot they answer: the rules every host applies before acting
//! (`ARCHITECTURE.md`, "What the host checks in every policy decision"), so a policy's tests fail
//! where the control plane would refuse its output.
//!
//! Indexes name real records; nothing is decided twice; a placement is for a pending workload, on a
//! ready node with the CPU and memory it asks for, with exactly `gpu_count` distinct GPUs of that node
//! that are free (not held, not given earlier in the cycle), of an allowed model, with enough free
//! memory by live telemetry; a container workload only on a node with a container engine (ABI
//! 1.4); a CPU placement (no GPUs) only for CPU-only or CPU-capable work; a preemption only of
//! running, preemptible work, and (ABI 1.5) only as the platform's preemption rules allow: not
//! within the minimum runtime, not past the hourly cap, only checkpointable work when so set.
//!
//! Shares (ABI 1.2): a share of one GPU (`gpu_milli` below 1000) on a time-sliced or MPS GPU takes
//! only its thousandths and its memory slice, and needs both unreserved (counting the cycle's earlier
//! placements) — so no GPU is ever over-committed; anywhere else a share takes the whole GPU, which
//! must be free. Whole-GPU work needs a GPU nobody holds any part of. A MIG instance serves only
//! work asking for its profile, and such work runs only on an instance of it.
//!
//! This is the one implementation of those rules: [`check_decisions`] runs a [`Checker`] for a
//! policy's tests, and the scheduling core (`airtime-scheduler`) runs one in every cycle, adding
//! the rules only a host knows (tenant scope, quotas) through
//! [`Checker::check_with`]. It acts on the decisions that pass and records the problems of those
//! that do not.

use std::fmt;

use crate::abi::{Action, Decision, Node, Snapshot, WHOLE_GPU_MILLI, Workload};
use crate::gang::{GangReadiness, Gangs};

/// Why one decision cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionProblem {
    /// Position of the decision in the policy's output.
    pub decision: usize,
    /// The workload index it named.
    pub workload: u32,
    /// What is wrong, in words.
    pub problem: String,
}

impl fmt::Display for DecisionProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "decision {} (workload {}): {}", self.decision, self.workload, self.problem)
    }
}

/// Every problem of `decisions` against `snapshot`; empty when all can be carried out.
///
/// Decisions are judged in order, each against what the earlier accepted ones took: when two take
/// the same GPU, or more CPU than a node has, or decide the same workload, the later one is the
/// problem.
pub fn check_decisions(snapshot: &Snapshot<'_>, decisions: &[Decision<'_>]) -> Vec<DecisionProblem> {
    let mut checker = Checker::new(snapshot);
    let mut problems: Vec<DecisionProblem> = decisions
        .iter()
        .enumerate()
        .filter_map(|(position, decision)| {
            checker.check(decision).err().map(|problem| DecisionProblem {
                decision: position,
                workload: decision.workload,
                problem,
            })
        })
        .collect();
    for (workload, problem) in checker.partial_gangs() {
        if let Some(position) =
            decisions.iter().position(|d| d.workload == workload && matches!(d.action, Action::Place { .. }))
        {
            problems.push(DecisionProblem { decision: position, workload, problem });
        }
    }
    problems.sort_by_key(|p| p.decision);
    problems
}

/// The ABI's rules, one decision at a time, remembering what the accepted ones took. This is the
/// one implementation of those rules: [`check_decisions`] runs it for a policy's tests, and the
/// control plane's scheduling core (crate `airtime-scheduler`) runs it with its own rules added
/// through [`Checker::check_with`].
pub struct Checker<'s, 'a> {
    snapshot: &'s Snapshot<'a>,
    decided: Vec<bool>,
    /// Thousandths of each GPU given by earlier decisions of the cycle (1000: given whole).
    milli_taken: Vec<u32>,
    /// Memory slices given on each GPU by earlier decisions, MiB.
    memory_taken: Vec<u32>,
    cpu_free: Vec<u32>,
    memory_free: Vec<u32>,
    /// The snapshot's gangs, indexed at the first gang member's placement.
    gangs: Option<Gangs<'a>>,
    /// Accepted placements of gang members: (gang, workload, node).
    gang_placed: Vec<(&'a str, u32, u32)>,
}

impl<'s, 'a> Checker<'s, 'a> {
    pub fn new(snapshot: &'s Snapshot<'a>) -> Self {
        Checker {
            snapshot,
            decided: vec![false; snapshot.workloads.len()],
            milli_taken: vec![0; snapshot.gpus.len()],
            memory_taken: vec![0; snapshot.gpus.len()],
            cpu_free: snapshot.nodes.iter().map(|n| n.cpu_millis_free).collect(),
            memory_free: snapshot.nodes.iter().map(|n| n.memory_mb_free).collect(),
            gangs: None,
            gang_placed: Vec::new(),
        }
    }

    /// The accepted placements of gang members whose gang was not placed whole — every member, each
    /// on a node of its own, in this evaluation — with the problem: a host undoes them (a gang
    /// runs whole or not at all). Call after the last decision.
    pub fn partial_gangs(&self) -> Vec<(u32, String)> {
        let snapshot = self.snapshot;
        let mut out = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for &(gang, _, _) in &self.gang_placed {
            if seen.contains(&gang) {
                continue;
            }
            seen.push(gang);
            let placed: Vec<u32> = self.gang_placed.iter().filter(|(g, _, _)| *g == gang).map(|(_, w, _)| *w).collect();
            let size = snapshot.workloads[placed[0] as usize].gang_size;
            if (placed.len() as u32) < size {
                for w in placed.iter().copied() {
                    out.push((
                        w,
                        format!(
                            "place: workload {} is a member of a gang of {size}, and only {} of its members were \
                             placed: a gang is placed whole or not at all",
                            snapshot.workloads[w as usize].name,
                            placed.len()
                        ),
                    ));
                }
            }
        }
        out
    }

    /// A gang member's placement on `node`: every member of its gang pending, and no other member
    /// placed on `node`.
    fn check_gang(&mut self, workload: &Workload<'a>, index: u32, node: u32) -> Result<(), String> {
        let snapshot = self.snapshot;
        let gangs = self.gangs.get_or_insert_with(|| Gangs::of(snapshot));
        if let GangReadiness::Waiting { pending, size } =
            gangs.readiness(snapshot, workload.gang_id, workload.gang_size)
        {
            return Err(format!(
                "place: workload {} is a member of a gang of {size} of which {pending} are waiting: a gang is placed \
                 only when all its members wait",
                workload.name
            ));
        }
        if let Some((_, other, _)) =
            self.gang_placed.iter().find(|(g, w, n)| *g == workload.gang_id && *n == node && *w != index)
        {
            return Err(format!(
                "place: workload {} and {} are members of one gang: each member needs a node of its own",
                workload.name, snapshot.workloads[*other as usize].name
            ));
        }
        Ok(())
    }

    /// Checks one decision and, if it passes, records what it takes.
    pub fn check(&mut self, decision: &Decision<'_>) -> Result<(), String> {
        self.check_with(decision, |_| Ok(()))
    }

    /// Checks one decision by the ABI's rules and then by `more` (a host's own rules, given the
    /// decided workload), and records what it takes only if both pass. The first decision for a
    /// workload claims it, even if refused.
    pub fn check_with(
        &mut self,
        decision: &Decision<'_>,
        more: impl FnOnce(&Workload<'a>) -> Result<(), String>,
    ) -> Result<(), String> {
        let snapshot = self.snapshot;
        let Some(workload) = snapshot.workload(decision.workload) else {
            return Err(format!("no workload {} (the snapshot has {})", decision.workload, snapshot.workloads.len()));
        };
        match self.decided.get_mut(decision.workload as usize) {
            Some(true) => {
                return Err(format!("workload {} ({}) already has a decision", decision.workload, workload.name));
            }
            Some(decided) => *decided = true,
            None => {}
        }
        match &decision.action {
            Action::Place { node, gpus } => {
                if workload.in_gang() {
                    self.check_gang(workload, decision.workload, *node)?;
                }
                self.check_place(workload, *node, gpus)?;
                more(workload)?;
                if workload.in_gang() {
                    self.gang_placed.push((workload.gang_id, decision.workload, *node));
                }
                if let Some(n) = self.cpu_free.get_mut(*node as usize) {
                    *n -= workload.cpu_millis;
                }
                if let Some(m) = self.memory_free.get_mut(*node as usize) {
                    *m -= workload.memory_mb;
                }
                for &gpu in gpus {
                    let Some(g) = snapshot.gpu(gpu) else { continue };
                    let (milli, memory) = if workload.is_share() && g.is_shareable() {
                        (workload.gpu_milli, workload.gpu_memory_mb)
                    } else {
                        (WHOLE_GPU_MILLI, 0)
                    };
                    if let Some(taken) = self.milli_taken.get_mut(gpu as usize) {
                        *taken = taken.saturating_add(milli);
                    }
                    if let Some(taken) = self.memory_taken.get_mut(gpu as usize) {
                        *taken = taken.saturating_add(memory);
                    }
                }
            }
            Action::Preempt => {
                if workload.is_stopping() {
                    return Err(format!("preempt: workload {} is already stopping", workload.name));
                }
                if !workload.is_running() {
                    return Err(format!("preempt: workload {} is {}, not running", workload.name, workload.state));
                }
                if !workload.preemptible {
                    return Err(format!("preempt: workload {} is not preemptible", workload.name));
                }
                if let Some(rules) = &snapshot.settings {
                    preemption_rules(rules, workload, snapshot.now_ms)?;
                }
                more(workload)?;
            }
            Action::KeepPending => {
                if !workload.is_pending() {
                    return Err(format!("keep pending: workload {} is {}, not pending", workload.name, workload.state));
                }
                more(workload)?;
            }
        }
        Ok(())
    }

    /// Whether a placement is sound; records nothing.
    fn check_place(&self, workload: &Workload<'_>, node: u32, gpus: &[u32]) -> Result<(), String> {
        let snapshot = self.snapshot;
        let name = workload.name;
        if !workload.is_pending() {
            return Err(format!("place: workload {name} is {}, not pending", workload.state));
        }
        let Some(n) = snapshot.node(node) else {
            return Err(format!("place: no node {node} (the snapshot has {})", snapshot.nodes.len()));
        };
        if !n.is_ready() {
            return Err(format!("place: node {} is {}", n.name, n.state));
        }
        if !n.can_run(workload) {
            return Err(format!(
                "place: workload {name} runs in a container and node {} has no container engine",
                n.name
            ));
        }
        let (cpu, memory) = (self.cpu_free[node as usize], self.memory_free[node as usize]);
        if cpu < workload.cpu_millis || memory < workload.memory_mb {
            return Err(format!(
                "place: node {} has {cpu} mCPU and {memory} MiB free; workload {name} needs {} mCPU and {} MiB",
                n.name, workload.cpu_millis, workload.memory_mb
            ));
        }
        if gpus.is_empty() {
            if workload.needs_gpu() && !workload.cpu_capable {
                return Err(format!(
                    "place: workload {name} needs {} GPUs and cannot run on CPU, but no GPU was given",
                    workload.gpu_count
                ));
            }
        } else {
            if gpus.len() != workload.gpu_count as usize {
                return Err(format!(
                    "place: workload {name} needs {} GPUs, {} were given",
                    workload.gpu_count,
                    gpus.len()
                ));
            }
            for (i, &gpu) in gpus.iter().enumerate() {
                self.check_gpu(workload, node, n, gpu, gpus.get(..i).unwrap_or(&[]))?;
            }
        }
        Ok(())
    }

    fn check_gpu(
        &self,
        workload: &Workload<'_>,
        node: u32,
        n: &Node<'_>,
        gpu: u32,
        before: &[u32],
    ) -> Result<(), String> {
        let snapshot = self.snapshot;
        let Some(g) = snapshot.gpu(gpu) else {
            return Err(format!("place: no GPU {gpu} (the snapshot has {})", snapshot.gpus.len()));
        };
        let device = format!("GPU {gpu} ({} device {})", n.name, g.device_index);
        if g.node != node {
            let other = snapshot.node(g.node).map_or("?", |n| n.name);
            return Err(format!("place: GPU {gpu} is on node {other}, not {}", n.name));
        }
        if before.contains(&gpu) {
            return Err(format!("place: GPU {gpu} is listed twice"));
        }
        if g.is_mig() || workload.asks_mig() {
            if !g.is_mig() {
                return Err(format!(
                    "place: {device} is a whole GPU; workload {} asks for a MIG {} instance",
                    workload.name, workload.mig_profile
                ));
            }
            if !workload.gpu_need().device_kind_fits(g) {
                let asks = if workload.asks_mig() { workload.mig_profile } else { "no MIG instance" };
                return Err(format!(
                    "place: {device} is a MIG {} instance; workload {} asks for {asks}",
                    g.mig_profile, workload.name
                ));
            }
        }
        if !workload.allows_model(g.model) {
            return Err(format!(
                "place: {device} is a {}; workload {} allows {}",
                g.model, workload.name, workload.gpu_models
            ));
        }
        let taken = self.milli_taken.get(gpu as usize).copied().unwrap_or(0);
        if workload.is_share() && g.is_shareable() {
            let free = g.free_share_milli().saturating_sub(taken);
            if free < workload.gpu_milli {
                return Err(format!(
                    "place: {device} has {free}/1000 unshared ({} sharers); workload {} needs {}/1000",
                    g.sharers, workload.name, workload.gpu_milli
                ));
            }
            let memory =
                g.share_memory_free_mb().saturating_sub(self.memory_taken.get(gpu as usize).copied().unwrap_or(0));
            if memory < workload.gpu_memory_mb {
                return Err(format!(
                    "place: {device} has {memory} MiB unreserved; workload {}'s memory slice is {} MiB",
                    workload.name, workload.gpu_memory_mb
                ));
            }
            return Ok(());
        }
        if let Some(holder) = g.holder {
            let holder = snapshot.workload(holder).map_or("?", |w| w.name);
            let shared = if g.sharers > 1 { format!(" and {} more sharing it", g.sharers - 1) } else { String::new() };
            return Err(format!("place: {device} is held by {holder}{shared}"));
        }
        if !g.is_free() {
            return Err(format!("place: {device} is shared by {} workloads outside this scope", g.sharers));
        }
        if taken > 0 {
            return Err(format!("place: {device} is taken by an earlier decision"));
        }
        if g.memory_free_mb() < workload.gpu_memory_mb {
            return Err(format!(
                "place: {device} has {} MiB free; workload {} needs {} MiB on each GPU",
                g.memory_free_mb(),
                workload.name,
                workload.gpu_memory_mb
            ));
        }
        Ok(())
    }
}
/// The platform's preemption rules, which no policy can override (ABI 1.5 shows them all):
/// minimum runtime, the cap on preemptions per hour, and (when set) only checkpointable work.
fn preemption_rules(rules: &crate::abi::Settings, w: &Workload<'_>, now_ms: u64) -> Result<(), String> {
    if rules.checkpointable_only && !w.checkpointable {
        return Err(format!("preempt: only checkpointable work may be preempted, and {} is not", w.name));
    }
    if w.started_ms != 0 {
        let ran = now_ms.saturating_sub(w.started_ms) / 1000;
        if ran < u64::from(rules.min_runtime_s) {
            return Err(format!(
                "preempt: workload {} has run {ran} s of its protected {} s minimum runtime",
                w.name, rules.min_runtime_s
            ));
        }
    }
    if w.preemptions_last_hour >= rules.max_preemptions_per_hour {
        return Err(format!(
            "preempt: workload {} was already preempted {} times in the last hour (cap {})",
            w.name, w.preemptions_last_hour, rules.max_preemptions_per_hour
        ));
    }
    Ok(())
}
