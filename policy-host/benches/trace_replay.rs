//! Replays a real production GPU cluster trace through the built-in policies and compares what they
//! make of it: how busy the GPUs are kept, how long customer-facing (LS) and best-effort (BE) work
//! waits, how often work is preempted.
//!
//! The trace is Alibaba's `cluster-trace-gpu-v2023` (openb: 1,213 GPU nodes, 8,152 pods; Weng et
//! al., "Beware of Fragmentation", USENIX ATC '23), read at run time from `../shared/traces` (or
//! `AIRTIME_TRACES`); it is not part of this repository. Each policy runs natively through the real
//! ABI (`SnapshotFixture`, which also applies the host's structural checks), one scheduling cycle per
//! minute of trace time in which something arrives or ends.
//!
//! Simplifications, stated: a pod asking for a fraction of a GPU gets a whole one (Airtime does not
//! share GPUs yet); LS pods are real-time inference, every other pod batch inference, preemptible
//! and checkpointable (a preempted pod resumes with the time it still needed); memory per GPU comes
//! from the model's spec sheet. The trace's pods are spread over 149 days on 6,212 GPUs, which keeps
//! any policy idle; to make them contend, the replay takes the first `AIRTIME_TRACE_NODES` nodes
//! (default 150, in the trace's order, so every GPU model is represented as it comes), the first
//! `AIRTIME_TRACE_PODS` pods (default 3,000) and compresses arrival times by `AIRTIME_TRACE_SPEEDUP`
//! (default 400×) while keeping every pod's real lifetime.
//!
//! `cargo bench -p airtime-policy-host --bench trace_replay`

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

use airtime_policy_sdk::abi::{Action, NodeState, Settings, WorkloadClass, WorkloadState};
use airtime_policy_sdk::guest::Policy;
use airtime_policy_sdk::owned::{OwnedGpu, OwnedNode, OwnedSnapshot, OwnedTenant, OwnedWorkload};
use airtime_policy_sdk::testing::SnapshotFixture;

const CYCLE_S: u64 = 60;

struct Pod {
    name: String,
    cpu_millis: u32,
    memory_mb: u32,
    gpus: u32,
    ls: bool,
    arrive_s: u64,
    duration_s: u64,
}

struct Node {
    name: String,
    cpu_millis: u32,
    memory_mb: u32,
    gpus: u32,
    model: String,
}

fn traces() -> PathBuf {
    std::env::var_os("AIRTIME_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces"))
        .join("alibaba-openb-2023")
}

fn gpu_memory_mb(model: &str) -> u32 {
    match model {
        "V100M32" => 32 * 1024,
        "A10" | "G2" | "G3" => 24 * 1024,
        _ => 16 * 1024, // P100, T4, V100M16
    }
}

fn load() -> (Vec<Node>, Vec<Pod>) {
    let dir = traces();
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{}: {e} (set AIRTIME_TRACES to the traces folder)", dir.join(file).display()))
    };
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let node_limit = env("AIRTIME_TRACE_NODES", 150) as usize;
    let speedup = env("AIRTIME_TRACE_SPEEDUP", 400).max(1);
    let nodes = read("openb_node_list_gpu_node.csv")
        .lines()
        .skip(1)
        .take(node_limit)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            Node {
                name: f[0].to_owned(),
                cpu_millis: f[1].parse().unwrap(),
                memory_mb: f[2].parse().unwrap(),
                gpus: f[3].parse().unwrap(),
                model: f[4].to_owned(),
            }
        })
        .collect();
    let limit = env("AIRTIME_TRACE_PODS", 3_000) as usize;
    let mut pods: Vec<Pod> = read("openb_pod_list_default.csv")
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            let (created, deleted): (u64, u64) = (f[8].parse().ok()?, f[9].parse().ok()?);
            let gpus: u32 = f[3].parse().ok()?;
            Some(Pod {
                name: f[0].to_owned(),
                cpu_millis: f[1].parse().ok()?,
                memory_mb: f[2].parse().ok()?,
                gpus: if gpus == 0 && f[4].parse::<u32>().ok()? > 0 { 1 } else { gpus },
                ls: f[6] == "LS",
                arrive_s: created / speedup,
                duration_s: deleted.saturating_sub(created).max(1),
            })
        })
        .collect();
    pods.sort_by_key(|p| p.arrive_s);
    pods.truncate(limit);
    (nodes, pods)
}

#[derive(Clone, Copy)]
enum Phase {
    Waiting,
    Running { node: u32, end_s: u64 },
    Done,
}

struct Tracked {
    phase: Phase,
    remaining_s: u64,
    first_start_s: Option<u64>,
    gpus: Vec<u32>,
}

struct Report {
    gpu_busy: f64,
    ls_wait: (f64, f64),
    be_wait: (f64, f64),
    preemptions: u32,
    unfinished: usize,
    cycles: u32,
    policy_ms: f64,
    refusals: u32,
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn replay(policy: &dyn Policy, nodes: &[Node], pods: &[Pod]) -> Report {
    let gpu_first: Vec<u32> = nodes
        .iter()
        .scan(0, |acc, n| {
            let f = *acc;
            *acc += n.gpus;
            Some(f)
        })
        .collect();
    let total_gpus: u32 = nodes.iter().map(|n| n.gpus).sum();
    let mut holder: Vec<Option<u32>> = vec![None; total_gpus as usize];
    let mut cpu_used = vec![0u32; nodes.len()];
    let mut mem_used = vec![0u32; nodes.len()];
    let mut tracked: Vec<Tracked> = pods
        .iter()
        .map(|p| Tracked { phase: Phase::Waiting, remaining_s: p.duration_s, first_start_s: None, gpus: Vec::new() })
        .collect();
    let (mut now, mut arrived) = (pods.first().map_or(0, |p| p.arrive_s), 0usize);
    let (mut busy_gpu_s, mut span_s) = (0f64, 0f64);
    let (mut preemptions, mut cycles, mut refusals, mut policy_s) = (0u32, 0u32, 0u32, 0f64);
    let settings =
        Settings { realtime_first: true, grace_period_s: 30, max_preemptions_per_hour: 4, ..Settings::default() };
    loop {
        // Work that ends by now releases its GPUs.
        for (i, t) in tracked.iter_mut().enumerate() {
            if let Phase::Running { node, end_s } = t.phase
                && end_s <= now
            {
                for &g in &t.gpus {
                    holder[g as usize] = None;
                }
                cpu_used[node as usize] -= pods[i].cpu_millis;
                mem_used[node as usize] -= pods[i].memory_mb;
                t.gpus.clear();
                t.phase = Phase::Done;
            }
        }
        while arrived < pods.len() && pods[arrived].arrive_s <= now {
            arrived += 1;
        }
        let active: Vec<usize> = (0..arrived).filter(|&i| !matches!(tracked[i].phase, Phase::Done)).collect();
        if active.iter().any(|&i| matches!(tracked[i].phase, Phase::Waiting)) {
            cycles += 1;
            let index_of: std::collections::HashMap<usize, u32> =
                active.iter().enumerate().map(|(k, &i)| (i, k as u32)).collect();
            let doc = OwnedSnapshot {
                now_ms: now * 1000,
                tenants: vec![OwnedTenant {
                    name: "openb".into(),
                    weight: 1,
                    may_borrow: true,
                    ..OwnedTenant::default()
                }],
                nodes: nodes
                    .iter()
                    .enumerate()
                    .map(|(n, node)| OwnedNode {
                        name: node.name.clone(),
                        state: NodeState::Ready,
                        cpu_millis: node.cpu_millis,
                        cpu_millis_free: node.cpu_millis - cpu_used[n],
                        memory_mb: node.memory_mb,
                        memory_mb_free: node.memory_mb - mem_used[n],
                        gpu_first: gpu_first[n],
                        gpu_count: node.gpus,
                        cost_per_hour: 2.0 * node.gpus as f32,
                        ..OwnedNode::default()
                    })
                    .collect(),
                gpus: nodes
                    .iter()
                    .enumerate()
                    .flat_map(|(n, node)| (0..node.gpus).map(move |d| (n, d, node)))
                    .map(|(n, d, node)| {
                        let g = (gpu_first[n] + d) as usize;
                        OwnedGpu {
                            node: n as u32,
                            device_index: d,
                            model: node.model.clone(),
                            memory_mb: gpu_memory_mb(&node.model),
                            holder: holder[g].and_then(|p| index_of.get(&(p as usize)).copied()),
                            ..OwnedGpu::default()
                        }
                    })
                    .collect(),
                workloads: active
                    .iter()
                    .map(|&i| {
                        let p = &pods[i];
                        let (state, node, started_ms) = match tracked[i].phase {
                            Phase::Running { node, .. } => (WorkloadState::Running, Some(node), now * 1000),
                            _ => (WorkloadState::Pending, None, 0),
                        };
                        OwnedWorkload {
                            id: format!("00000000-0000-4000-8000-{i:012}"),
                            name: p.name.clone(),
                            class: if p.ls { WorkloadClass::RealtimeInference } else { WorkloadClass::BatchInference },
                            state,
                            gpu_count: p.gpus,
                            cpu_millis: p.cpu_millis,
                            memory_mb: p.memory_mb,
                            submitted_ms: p.arrive_s * 1000,
                            started_ms,
                            node,
                            preemptible: !p.ls,
                            checkpointable: !p.ls,
                            expected_duration_s: p.duration_s.min(u64::from(u32::MAX)) as u32,
                            ..OwnedWorkload::default()
                        }
                    })
                    .collect(),
                settings: Some(settings),
                params: "{}".into(),
                scope_tenant: None,
            };
            let clock = Instant::now();
            let outcome = SnapshotFixture::from_document(doc).evaluate(policy);
            policy_s += clock.elapsed().as_secs_f64();
            match outcome {
                Ok(outcome) => {
                    for d in &outcome.decisions {
                        let i = active[d.workload as usize];
                        match &d.action {
                            Action::Place { node, gpus } => {
                                for &g in gpus {
                                    holder[g as usize] = Some(i as u32);
                                }
                                cpu_used[*node as usize] += pods[i].cpu_millis;
                                mem_used[*node as usize] += pods[i].memory_mb;
                                let t = &mut tracked[i];
                                t.gpus = gpus.clone();
                                t.first_start_s.get_or_insert(now);
                                t.phase = Phase::Running { node: *node, end_s: now + t.remaining_s };
                            }
                            Action::Preempt => {
                                let t = &mut tracked[i];
                                if let Phase::Running { node, end_s } = t.phase {
                                    for &g in &t.gpus {
                                        holder[g as usize] = None;
                                    }
                                    cpu_used[node as usize] -= pods[i].cpu_millis;
                                    mem_used[node as usize] -= pods[i].memory_mb;
                                    t.gpus.clear();
                                    t.remaining_s = end_s.saturating_sub(now).max(1);
                                    t.phase = Phase::Waiting;
                                    preemptions += 1;
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Err(_) => refusals += 1,
            }
        }
        // Advance to the next minute boundary at which something arrives or ends.
        let next_end = tracked.iter().filter_map(|t| match t.phase {
            Phase::Running { end_s, .. } => Some(end_s),
            _ => None,
        });
        let next_arrival = pods.get(arrived).map(|p| p.arrive_s);
        // Nothing runs and nothing more arrives: what still waits can never be placed.
        let Some(next) = next_end.chain(next_arrival).min() else { break };
        let next = next.max(now + 1).div_ceil(CYCLE_S) * CYCLE_S;
        // Busy GPUs are counted while work still arrives; after the last arrival only the trace's
        // months-long tail remains, which says nothing about a policy.
        let last_arrival = pods.last().map_or(0, |p| p.arrive_s);
        if now < last_arrival {
            let held = holder.iter().filter(|h| h.is_some()).count() as f64;
            let step = (next.min(last_arrival) - now) as f64;
            busy_gpu_s += held * step;
            span_s += step;
        }
        now = next;
    }
    let waits = |ls: bool| -> Vec<f64> {
        pods.iter()
            .zip(&tracked)
            .filter(|(p, _)| p.ls == ls)
            .filter_map(|(p, t)| t.first_start_s.map(|s| (s - p.arrive_s) as f64))
            .collect()
    };
    let (ls, be) = (waits(true), waits(false));
    Report {
        gpu_busy: busy_gpu_s / (span_s.max(1.0) * f64::from(total_gpus)),
        ls_wait: (percentile(ls.clone(), 0.5), percentile(ls, 0.95)),
        be_wait: (percentile(be.clone(), 0.5), percentile(be, 0.95)),
        preemptions,
        unfinished: tracked.iter().filter(|t| !matches!(t.phase, Phase::Done)).count(),
        cycles,
        policy_ms: policy_s * 1000.0 / f64::from(cycles.max(1)),
        refusals,
    }
}

fn main() {
    let (nodes, pods) = load();
    let gpus: u32 = nodes.iter().map(|n| n.gpus).sum();
    println!(
        "Alibaba openb trace: {} GPU nodes, {gpus} GPUs, first {} pods ({} LS), arrivals compressed, a cycle per {CYCLE_S} s",
        nodes.len(),
        pods.len(),
        pods.iter().filter(|p| p.ls).count()
    );
    println!(
        "{:<18} {:>9} {:>16} {:>16} {:>11} {:>10} {:>7} {:>12}",
        "policy", "GPU busy", "LS wait p50/p95", "BE wait p50/p95", "preempted", "unplaced", "cycles", "ms/cycle"
    );
    let policies: [(&str, &dyn Policy); 4] = [
        ("slo-first", &slo_first::SloFirst),
        ("priority-best-fit", &priority_best_fit::PriorityBestFit),
        ("fair-share", &fair_share::FairShare),
        ("cost-aware", &cost_aware::CostAware),
    ];
    for (name, policy) in policies {
        let r = replay(policy, &nodes, &pods);
        println!(
            "{name:<18} {:>8.1}% {:>7.0}s/{:>6.0}s {:>7.0}s/{:>6.0}s {:>11} {:>10} {:>7} {:>12.2}{}",
            r.gpu_busy * 100.0,
            r.ls_wait.0,
            r.ls_wait.1,
            r.be_wait.0,
            r.be_wait.1,
            r.preemptions,
            r.unfinished,
            r.cycles,
            r.policy_ms,
            if r.refusals > 0 { format!("  ({} cycles refused)", r.refusals) } else { String::new() }
        );
    }
}
