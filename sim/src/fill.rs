//! Weng et al.'s fill experiment ("Beware of Fragmentation", USENIX ATC '23, §6; their simulator is
//! `hkust-adsl/kubernetes-scheduler-simulator`), the published yardstick of GPU placement, run
//! through Airtime's scheduling core with any policy.
//!
//! The protocol, as their simulator runs it (`pkg/simulator/core.go`, `simulator.go`):
//! - the cluster is the trace's GPU nodes (6,212 GPUs), GPUs shared (MPS here), host CPU and memory
//!   counted (their scheduler keeps Kubernetes' resource-fit filter);
//! - the pod list is shuffled with the seed, then pods sampled from it with replacement are
//!   appended until their GPU request would pass `tune` (1.3) × the cluster's GPUs (a list already
//!   past it loses random pods instead); a sample stops the appending when its GPUs per device
//!   would pass the target, as theirs does;
//! - pods arrive one a second in that order and never leave; each arrival gets a cycle;
//! - the score is the share of GPU capacity placed pods hold when the arrived GPU request reaches
//!   each 1% of the cluster (0–130%).
//!
//! One difference is named: a pod that found no place is dropped there and stays pending here (as
//! Airtime never drops work), so later cycles retry it. Nothing ever leaves and capacity only
//! shrinks, so without preemption a retry never places it and the curves compare as they are; a
//! policy that preempts shows it in the curve (allocation that falls as arrivals continue).
//! Randomness is Airtime's own (ChaCha8 seeded by the seed), not Go's `math/rand`: seed 42 here is
//! not their seed 42's order, so runs compare as means over seeds.

use std::ops::ControlFlow;
use std::path::Path;

use airtime_policy_sdk::frag::Workmix;
use airtime_protocol::sharing::GpuSharing;
use airtime_scheduler::fleet::ArrivalEntry;
use anyhow::Context;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::alibaba;
use crate::engine::{self, World};
use crate::format::{FleetSpec, Trace, TraceWorkload};
use crate::policy::{Catalog, SimPolicy};

/// The arrived demand the curve is read at: 0% to 130% of the cluster's GPUs, in 1% steps.
pub const STEPS: usize = 131;

/// A pod list and the cluster it fills.
pub struct Protocol {
    /// The pod list's file name (`openb_pod_list_default.csv`).
    pub pods_file: String,
    pub fleet: FleetSpec,
    /// The list in file order.
    pub pods: Vec<TraceWorkload>,
    /// The cluster's GPU capacity, thousandths.
    pub capacity_milli: u64,
}

impl Protocol {
    /// The trace's GPU nodes and `pods_file`, GPUs shared by MPS.
    pub fn load(dir: &Path, pods_file: &str) -> anyhow::Result<Protocol> {
        let options = alibaba::Options {
            pod_file: pods_file.to_owned(),
            gpu_sharing: GpuSharing::Mps,
            fill: true,
            ..alibaba::Options::default()
        };
        let (fleet, trace) = alibaba::load(dir, &options)?;
        let capacity_milli = fleet.gpu_count() * 1000;
        Ok(Protocol { pods_file: pods_file.to_owned(), fleet, pods: trace.workloads, capacity_milli })
    }

    /// The arrivals for `seed`: the list shuffled, tuned to `tune` × the cluster's GPUs, one a
    /// second from 0.
    pub fn arrivals(&self, seed: u64, tune: f64) -> Trace {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut pods = self.pods.clone();
        pods.shuffle(&mut rng);
        let target = tune * self.capacity_milli as f64;
        let mut total: u64 = pods.iter().map(demand_milli).sum();
        if total as f64 > target {
            while total as f64 > target && !pods.is_empty() {
                let gone = pods.remove(rng.random_range(0..pods.len()));
                total -= demand_milli(&gone);
            }
        } else {
            for i in 0.. {
                let mut pod = self.pods[rng.random_range(0..self.pods.len())].clone();
                // Their check adds one device's thousandths, their total the whole request.
                if (total + u64::from(per_device_milli(&pod))) as f64 > target {
                    break;
                }
                total += demand_milli(&pod);
                pod.id = format!("{}-tuned-{i}", pod.id);
                pods.push(pod);
            }
        }
        for (i, pod) in pods.iter_mut().enumerate() {
            pod.arrive_s = i as u64;
            pod.duration_s = alibaba::FILL_LIFETIME_S;
        }
        Trace { workloads: pods, ..Trace::default() }
    }

    /// The pod list as the control plane counts arrivals: each shape and how many pods have it.
    fn history(&self) -> Vec<ArrivalEntry> {
        engine::Arrivals::history_of(&self.pods)
    }

    /// The mix of the pod list (its typical kinds): what fragmentation is measured against.
    fn mix(&self) -> (Vec<String>, Vec<(u32, u32, u32)>) {
        let models = self.pods.iter().map(|p| p.gpu_models.join(",")).collect();
        let shapes = self
            .pods
            .iter()
            .map(|p| {
                let share = p.gpus == 1 && p.gpu_milli < 1000;
                (if share { p.gpu_milli } else { 1000 }, p.gpus, p.cpu_millis)
            })
            .collect();
        (models, shapes)
    }
}

/// GPU thousandths a pod asks for in all.
fn demand_milli(pod: &TraceWorkload) -> u64 {
    u64::from(pod.gpus) * u64::from(per_device_milli(pod))
}

fn per_device_milli(pod: &TraceWorkload) -> u32 {
    if pod.gpus == 0 { 0 } else { pod.gpu_milli.min(1000) }
}

/// One policy's fill with one seed.
#[derive(Debug, Clone, Serialize)]
pub struct FillRun {
    pub pods_file: String,
    pub policy: String,
    pub seed: u64,
    /// Allocated GPU capacity (% of the cluster) when arrived demand reached 0%, 1%, … 130%.
    pub allocated_pct: Vec<f64>,
    /// Pods still without a place at the end.
    pub unplaced: usize,
    pub arrived: usize,
    /// Expected free GPU capacity the pod list's typical kinds could not use at the end, as a share
    /// of the cluster and of its free capacity (Weng et al.'s fragmentation).
    pub fragmented_pct_of_cluster: f64,
    pub fragmented_pct_of_free: f64,
    pub preemptions: usize,
    pub cycles: usize,
    pub wall_s: f64,
}

impl FillRun {
    /// Allocation at `pct`% arrived.
    pub fn at(&self, pct: usize) -> f64 {
        self.allocated_pct.get(pct).or(self.allocated_pct.last()).copied().unwrap_or(0.0)
    }
}

/// Fills the cluster with `policy` for `seed`.
pub fn run(
    catalog: &Catalog,
    protocol: &Protocol,
    policy: &SimPolicy,
    seed: u64,
    tune: f64,
) -> anyhow::Result<FillRun> {
    let trace = protocol.arrivals(seed, tune);
    let last = trace.workloads.len().saturating_sub(1) as u64;
    let config = engine::Config {
        min_cycle_interval_s: 1,
        retry_s: 3600,
        // One sample, at 0: the curve comes from the cycles.
        sample_s: last + 2,
        jitter_s: 0,
        seed,
        window_s: last + 1,
        until_s: last + 1,
        usage_half_life_hours: 24.0,
        // The pod list as the week of submissions before the experiment: Weng et al. give FGD the
        // typical pods of the whole list, and Airtime's hosts give policies the last week's.
        history: protocol.history(),
    };
    // (time, held thousandths) after each cycle.
    let mut held: Vec<(u64, u64)> = Vec::with_capacity(trace.workloads.len());
    let (scores, world) = engine::replay(
        catalog,
        &protocol.fleet,
        &trace,
        policy,
        &[],
        &config,
        &mut |_| ControlFlow::Continue(()),
        &mut |world: &World| held.push((world.now, held_milli(world))),
    )
    .with_context(|| format!("filling with {} (seed {seed})", policy.name))?;

    // The curve: at the arrival that takes demand to each step, what the cycle after it left held.
    let capacity = protocol.capacity_milli as f64;
    let mut allocated_pct = Vec::with_capacity(STEPS);
    let mut arrived_milli = 0u64;
    let mut cursor = 0usize;
    let mut step = 0usize;
    for pod in &trace.workloads {
        arrived_milli += demand_milli(pod);
        while cursor + 1 < held.len() && held[cursor + 1].0 <= pod.arrive_s {
            cursor += 1;
        }
        let now = held.get(cursor).filter(|(t, _)| *t <= pod.arrive_s).map_or(0, |(_, h)| *h);
        while step < STEPS && arrived_milli as f64 >= step as f64 / 100.0 * capacity {
            allocated_pct.push(now as f64 / capacity * 100.0);
            step += 1;
        }
    }
    let end = held.last().map_or(0, |(_, h)| *h) as f64 / capacity * 100.0;
    while allocated_pct.len() < STEPS {
        allocated_pct.push(end);
    }

    let (models, shapes) = protocol.mix();
    let mix = Workmix::typical(shapes.iter().zip(&models).map(|(&(m, c, cpu), models)| (m, c, cpu, models.as_str())));
    let (fragmented, free) = fragmentation(&world, &mix);
    let unplaced = world.jobs.iter().filter(|j| j.phase == engine::Phase::Waiting).count();
    Ok(FillRun {
        pods_file: protocol.pods_file.clone(),
        policy: policy.name.clone(),
        seed,
        allocated_pct,
        unplaced,
        arrived: trace.workloads.len(),
        fragmented_pct_of_cluster: fragmented / capacity * 100.0,
        fragmented_pct_of_free: if free > 0.0 { fragmented / free * 100.0 } else { 0.0 },
        preemptions: scores.preemptions,
        cycles: scores.cycles,
        wall_s: scores.wall_s,
    })
}

/// Thousandths of GPUs held by placed work.
fn held_milli(world: &World) -> u64 {
    world.gpus.iter().map(|g| g.holders.iter().map(|h| u64::from(h.billed)).sum::<u64>()).sum()
}

/// (Expected fragmented, free) GPU thousandths over the cluster's nodes for `mix`.
fn fragmentation(world: &World, mix: &Workmix<'_>) -> (f64, f64) {
    let mut fragmented = 0.0;
    let mut free = 0.0;
    for node in &world.nodes {
        let gpus = &world.gpus[node.gpu_first..node.gpu_first + node.gpu_count];
        let state: Vec<(u32, &str)> = gpus.iter().map(|g| (g.free_milli(), &*g.model)).collect();
        free += state.iter().map(|(f, _)| f64::from(*f)).sum::<f64>();
        fragmented += mix.node_fragmentation(state.into_iter(), node.cpu_free);
    }
    (fragmented, free)
}

/// Weng et al.'s published allocation at 100% arrived (% of GPUs; the mean, least and most of their
/// seeds 42–51), from `experiments/analysis/expected_results/analysis_allo_discrete.csv` of their
/// simulator's repository: (pod list, method, mean, min, max).
pub const PUBLISHED: &[(&str, &str, f64, f64, f64)] = &[
    ("openb_pod_list_default.csv", "Random", 86.30, 85.87, 86.79),
    ("openb_pod_list_default.csv", "DotProd", 90.62, 90.34, 91.00),
    ("openb_pod_list_default.csv", "GpuClustering", 91.65, 90.62, 92.75),
    ("openb_pod_list_default.csv", "GpuPacking", 91.78, 91.07, 92.58),
    ("openb_pod_list_default.csv", "BestFit", 92.86, 92.64, 93.04),
    ("openb_pod_list_default.csv", "FGD", 95.23, 95.06, 95.38),
    ("openb_pod_list_gpushare40.csv", "Random", 84.86, 84.28, 85.25),
    ("openb_pod_list_gpushare40.csv", "DotProd", 89.30, 89.09, 89.54),
    ("openb_pod_list_gpushare40.csv", "GpuClustering", 89.76, 88.40, 90.57),
    ("openb_pod_list_gpushare40.csv", "GpuPacking", 89.77, 88.70, 90.48),
    ("openb_pod_list_gpushare40.csv", "BestFit", 91.44, 90.95, 91.72),
    ("openb_pod_list_gpushare40.csv", "FGD", 93.96, 93.82, 94.08),
    ("openb_pod_list_multigpu20.csv", "Random", 86.92, 86.16, 87.89),
    ("openb_pod_list_multigpu20.csv", "DotProd", 91.85, 91.46, 92.43),
    ("openb_pod_list_multigpu20.csv", "GpuClustering", 93.34, 92.54, 94.25),
    ("openb_pod_list_multigpu20.csv", "GpuPacking", 93.50, 92.66, 94.35),
    ("openb_pod_list_multigpu20.csv", "BestFit", 93.73, 93.35, 94.12),
    ("openb_pod_list_multigpu20.csv", "FGD", 95.53, 95.32, 95.82),
    ("openb_pod_list_gpuspec10.csv", "Random", 86.26, 85.67, 86.59),
    ("openb_pod_list_gpuspec10.csv", "DotProd", 90.17, 89.64, 90.68),
    ("openb_pod_list_gpuspec10.csv", "GpuClustering", 91.96, 90.81, 92.79),
    ("openb_pod_list_gpuspec10.csv", "GpuPacking", 92.24, 91.01, 93.08),
    ("openb_pod_list_gpuspec10.csv", "BestFit", 93.10, 92.76, 93.46),
    ("openb_pod_list_gpuspec10.csv", "FGD", 94.66, 94.32, 94.92),
];

/// One policy on one pod list over its seeds: mean and spread.
#[derive(Debug, Clone, Serialize)]
pub struct FillSummary {
    pub pods_file: String,
    pub policy: String,
    pub seeds: usize,
    pub at_100: (f64, f64, f64),
    pub at_130: (f64, f64, f64),
    pub fragmented_pct_of_free: f64,
    pub unplaced: f64,
    pub preemptions: f64,
    pub wall_s: f64,
    /// The mean curve, 0–130%.
    pub curve: Vec<f64>,
}

fn spread(values: &[f64]) -> (f64, f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}

/// The runs grouped by pod list and policy, in the order they first appear.
pub fn summarise(runs: &[FillRun]) -> Vec<FillSummary> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in runs {
        if !keys.contains(&(r.pods_file.as_str(), r.policy.as_str())) {
            keys.push((&r.pods_file, &r.policy));
        }
    }
    keys.into_iter()
        .map(|(pods, policy)| {
            let group: Vec<&FillRun> = runs.iter().filter(|r| r.pods_file == pods && r.policy == policy).collect();
            let n = group.len().max(1) as f64;
            let mean = |f: &dyn Fn(&FillRun) -> f64| group.iter().map(|r| f(r)).sum::<f64>() / n;
            FillSummary {
                pods_file: pods.to_owned(),
                policy: policy.to_owned(),
                seeds: group.len(),
                at_100: spread(&group.iter().map(|r| r.at(100)).collect::<Vec<_>>()),
                at_130: spread(&group.iter().map(|r| r.at(130)).collect::<Vec<_>>()),
                fragmented_pct_of_free: mean(&|r| r.fragmented_pct_of_free),
                unplaced: mean(&|r| r.unplaced as f64),
                preemptions: mean(&|r| r.preemptions as f64),
                wall_s: mean(&|r| r.wall_s),
                curve: (0..STEPS).map(|s| group.iter().map(|r| r.at(s)).sum::<f64>() / n).collect(),
            }
        })
        .collect()
}

/// The Markdown table: per pod list, each policy run here, then the published figures.
pub fn table(summaries: &[FillSummary]) -> String {
    let mut out = String::new();
    let mut lists: Vec<&str> = Vec::new();
    for s in summaries {
        if !lists.contains(&s.pods_file.as_str()) {
            lists.push(&s.pods_file);
        }
    }
    for list in lists {
        out.push_str(&format!("\n### {list}\n\n"));
        out.push_str("| placement | seeds | allocated at 100% arrived | at 130% | fragmented (% of free) | pods without a place | preemptions | s per run |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for s in summaries.iter().filter(|s| s.pods_file == list) {
            let (m, lo, hi) = s.at_100;
            let (m130, lo130, hi130) = s.at_130;
            out.push_str(&format!(
                "| {} | {} | {m:.2}% ({lo:.2}–{hi:.2}) | {m130:.2}% ({lo130:.2}–{hi130:.2}) | {:.1}% | {:.0} | {:.0} | {:.0} |\n",
                s.policy, s.seeds, s.fragmented_pct_of_free, s.unplaced, s.preemptions, s.wall_s
            ));
        }
        for (_, method, mean, min, max) in PUBLISHED.iter().filter(|p| p.0 == list) {
            out.push_str(&format!("| *{method}* (published) | 10 | {mean:.2}% ({min:.2}–{max:.2}) | | | | | |\n"));
        }
    }
    out
}

/// Allocation against arrived demand, one line per policy (mean over seeds), one panel per pod list.
pub fn plot(path: &Path, summaries: &[FillSummary]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let mut lists: Vec<&str> = Vec::new();
    for s in summaries {
        if !lists.contains(&s.pods_file.as_str()) {
            lists.push(&s.pods_file);
        }
    }
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    let height = 380 * lists.len().max(1) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((lists.len().max(1), 1));
    for (panel, list) in panels.iter().zip(&lists) {
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .caption(format!("{list}: allocated GPUs as demand arrives"), ("sans-serif", 16))
            .build_cartesian_2d(0.0..130.0, 0.0..100.0)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("arrived GPU demand (% of the cluster)")
            .y_desc("allocated (%)")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, s) in summaries.iter().filter(|s| s.pods_file == *list).enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            let points = s.curve.iter().enumerate().map(|(x, y)| (x as f64, *y));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(format!("{} ({:.2}% at 100%)", s.policy, s.at_100.0))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(id: &str, gpus: u32, milli: u32) -> TraceWorkload {
        TraceWorkload {
            id: id.to_owned(),
            tenant: "batch".into(),
            class: airtime_protocol::workload::WorkloadClass::BatchInference,
            arrive_s: 0,
            duration_s: 1,
            gpus,
            gpu_milli: milli,
            gpu_memory_mb: 0,
            gpu_models: Vec::new(),
            cpu_millis: 1000,
            memory_mb: 1024,
            priority: 0,
            preemptible: false,
            checkpointable: false,
            cpu_capable: false,
            mig_profile: None,
        }
    }

    fn protocol(pods: Vec<TraceWorkload>, gpus: u64) -> Protocol {
        let fleet = FleetSpec { tenants: Vec::new(), node_types: Vec::new(), settings: Default::default() };
        Protocol { pods_file: "list.csv".into(), fleet, pods, capacity_milli: gpus * 1000 }
    }

    #[test]
    fn arrivals_are_the_list_shuffled_then_samples_up_to_the_tuned_demand() {
        let pods = vec![pod("a", 1, 1000), pod("b", 1, 500), pod("c", 0, 1000), pod("d", 2, 1000)];
        let p = protocol(pods, 4);
        let trace = p.arrivals(42, 1.3);
        // The list itself (3.5 GPUs), then samples until the next would pass 5.2 GPUs.
        let originals: Vec<&str> = trace.workloads.iter().take(4).map(|w| w.id.as_str()).collect();
        for id in ["a", "b", "c", "d"] {
            assert!(originals.contains(&id), "{originals:?}");
        }
        let total: u64 = trace.workloads.iter().map(demand_milli).sum();
        assert!(total as f64 <= 5200.0, "{total}");
        assert!(trace.workloads[4..].iter().all(|w| w.id.contains("-tuned-")));
        assert!(trace.workloads.iter().enumerate().all(|(i, w)| w.arrive_s == i as u64));
        // The same seed, the same arrivals; another seed, another order.
        let again: Vec<String> = p.arrivals(42, 1.3).workloads.into_iter().map(|w| w.id).collect();
        assert_eq!(again, trace.workloads.iter().map(|w| w.id.clone()).collect::<Vec<_>>());
        let orders: std::collections::BTreeSet<Vec<String>> =
            (0..8).map(|seed| p.arrivals(seed, 1.3).workloads.into_iter().take(4).map(|w| w.id).collect()).collect();
        assert!(orders.len() > 1);
    }

    #[test]
    fn a_list_past_the_target_loses_random_pods() {
        let pods = (0..10).map(|i| pod(&format!("p{i}"), 1, 1000)).collect();
        let trace = protocol(pods, 4).arrivals(7, 1.3);
        assert_eq!(trace.workloads.len(), 5);
    }
}
