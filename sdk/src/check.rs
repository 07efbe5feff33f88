//! Checks of decisions against the snapshot they answer: the rules every host applies before acting
//! (`ARCHITECTURE.md`, "What the host checks in every policy decision"), so a policy's tests fail
//! where the control plane would refuse its output.
//!
//! Indexes name real records; nothing is decided twice; a placement is for a pending workload, on a
//! ready node with the CPU and memory it asks for, with exactly `gpu_count` distinct GPUs of that node
//! that are free (not held, not given earlier in the cycle), of an allowed model, with enough free
//! memory by live telemetry; a CPU placement (no GPUs) only for CPU-only or CPU-capable work; a
//! preemption only of running, preemptible work.
//!
//! This is the one implementation of those rules: [`check_decisions`] runs a [`Checker`] for a
//! policy's tests, and the scheduling core (`airtime-scheduler`) runs one in every cycle, adding
//! the rules only a host knows (tenant scope, quotas, the preemption settings) through
//! [`Checker::check_with`]. It acts on the decisions that pass and records the problems of those
//! that do not.

use std::fmt;

use crate::abi::{Action, Decision, Node, Snapshot, Workload};

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
    decisions
        .iter()
        .enumerate()
        .filter_map(|(position, decision)| {
            checker.check(decision).err().map(|problem| DecisionProblem {
                decision: position,
                workload: decision.workload,
                problem,
            })
        })
        .collect()
}

/// The ABI's rules, one decision at a time, remembering what the accepted ones took. This is the
/// one implementation of those rules: [`check_decisions`] runs it for a policy's tests, and the
/// control plane's scheduling core (crate `airtime-scheduler`) runs it with its own rules added
/// through [`Checker::check_with`].
pub struct Checker<'s, 'a> {
    snapshot: &'s Snapshot<'a>,
    decided: Vec<bool>,
    gpu_taken: Vec<bool>,
    cpu_free: Vec<u32>,
    memory_free: Vec<u32>,
}

impl<'s, 'a> Checker<'s, 'a> {
    pub fn new(snapshot: &'s Snapshot<'a>) -> Self {
        Checker {
            snapshot,
            decided: vec![false; snapshot.workloads.len()],
            gpu_taken: vec![false; snapshot.gpus.len()],
            cpu_free: snapshot.nodes.iter().map(|n| n.cpu_millis_free).collect(),
            memory_free: snapshot.nodes.iter().map(|n| n.memory_mb_free).collect(),
        }
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
                self.check_place(workload, *node, gpus)?;
                more(workload)?;
                if let Some(n) = self.cpu_free.get_mut(*node as usize) {
                    *n -= workload.cpu_millis;
                }
                if let Some(m) = self.memory_free.get_mut(*node as usize) {
                    *m -= workload.memory_mb;
                }
                for &gpu in gpus {
                    if let Some(taken) = self.gpu_taken.get_mut(gpu as usize) {
                        *taken = true;
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
        if let Some(holder) = g.holder {
            let holder = snapshot.workload(holder).map_or("?", |w| w.name);
            return Err(format!("place: {device} is held by {holder}"));
        }
        if self.gpu_taken.get(gpu as usize).copied().unwrap_or(false) {
            return Err(format!("place: {device} is taken by an earlier decision"));
        }
        if !workload.allows_model(g.model) {
            return Err(format!(
                "place: {device} is a {}; workload {} allows {}",
                g.model, workload.name, workload.gpu_models
            ));
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
