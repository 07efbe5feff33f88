//! Checks of decisions against the snapshot they answer, which every host wants before acting:
//! indexes name real records, GPUs belong to the node and are free, nothing is decided or taken
//! twice, and each action suits the workload's state.
//!
//! These are the rules of the ABI itself. The control plane adds its own (quotas, tenant scope,
//! preemption rules) on top; it can act on the decisions that pass and record the problems of those
//! that do not.

use std::fmt;

use crate::abi::{Action, Decision, Snapshot};

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
/// Decisions are judged in order: when two take the same GPU or decide the same workload, the
/// later one is the problem.
pub fn check_decisions(snapshot: &Snapshot<'_>, decisions: &[Decision<'_>]) -> Vec<DecisionProblem> {
    let mut problems = Vec::new();
    let mut decided = vec![false; snapshot.workloads.len()];
    let mut gpu_taken = vec![false; snapshot.gpus.len()];
    for (position, decision) in decisions.iter().enumerate() {
        let mut problem = |text: String| {
            problems.push(DecisionProblem { decision: position, workload: decision.workload, problem: text });
        };
        let Some(workload) = snapshot.workload(decision.workload) else {
            problem(format!(
                "no workload {} (the snapshot has {})",
                decision.workload,
                snapshot.workloads.len()
            ));
            continue;
        };
        let seen = decided.get_mut(decision.workload as usize);
        if seen.as_deref() == Some(&true) {
            problem(format!("workload {} ({}) already has a decision", decision.workload, workload.name));
            continue;
        }
        if let Some(seen) = seen {
            *seen = true;
        }
        match &decision.action {
            Action::Place { node, gpus } => {
                if !workload.is_pending() {
                    problem(format!("place: workload {} is {}, not pending", workload.name, workload.state));
                    continue;
                }
                let Some(n) = snapshot.node(*node) else {
                    problem(format!("place: no node {node} (the snapshot has {})", snapshot.nodes.len()));
                    continue;
                };
                if !n.is_ready() {
                    problem(format!("place: node {} is {}", n.name, n.state));
                    continue;
                }
                if gpus.is_empty() {
                    if workload.needs_gpu() && !workload.cpu_capable {
                        problem(format!(
                            "place: workload {} needs {} GPUs and cannot run on CPU, but no GPU was given",
                            workload.name, workload.gpu_count
                        ));
                    }
                    continue;
                }
                if gpus.len() != workload.gpu_count as usize {
                    problem(format!(
                        "place: workload {} needs {} GPUs, {} were given",
                        workload.name,
                        workload.gpu_count,
                        gpus.len()
                    ));
                    continue;
                }
                for (i, &gpu) in gpus.iter().enumerate() {
                    let Some(g) = snapshot.gpu(gpu) else {
                        problem(format!("place: no GPU {gpu} (the snapshot has {})", snapshot.gpus.len()));
                        break;
                    };
                    if g.node != *node {
                        let other = snapshot.node(g.node).map_or("?", |n| n.name);
                        problem(format!("place: GPU {gpu} is on node {other}, not {}", n.name));
                        break;
                    }
                    if gpus.get(..i).is_some_and(|before| before.contains(&gpu)) {
                        problem(format!("place: GPU {gpu} is listed twice"));
                        break;
                    }
                    if let Some(holder) = g.holder {
                        let name = snapshot.workload(holder).map_or("?", |w| w.name);
                        problem(format!(
                            "place: GPU {gpu} ({} device {}) is held by {name}",
                            n.name, g.device_index
                        ));
                        break;
                    }
                    if gpu_taken.get(gpu as usize).copied().unwrap_or(false) {
                        problem(format!(
                            "place: GPU {gpu} ({} device {}) is taken by an earlier decision",
                            n.name, g.device_index
                        ));
                        break;
                    }
                }
                if problems.last().is_some_and(|p| p.decision == position) {
                    continue;
                }
                for &gpu in gpus {
                    if let Some(taken) = gpu_taken.get_mut(gpu as usize) {
                        *taken = true;
                    }
                }
            }
            Action::Preempt => {
                if !workload.is_running() {
                    problem(format!("preempt: workload {} is {}, not running", workload.name, workload.state));
                }
            }
            Action::KeepPending => {
                if !workload.is_pending() {
                    problem(format!("keep pending: workload {} is {}, not pending", workload.name, workload.state));
                }
            }
        }
    }
    problems
}
