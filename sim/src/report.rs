//! The comparison a person reads (a table, each policy's mean and spread over the seeds, and with
//! services a table of each service), the JSON a program reads (every run's scores with its time
//! series) and a plot of allocated and busy GPUs over time, one line per policy (`plotters`, SVG).

use std::path::Path;

use anyhow::Context;
use comfy_table::{Cell, CellAlignment, Table, presets::UTF8_FULL_CONDENSED};
use plotters::prelude::*;
use serde::Serialize;

use airtime_protocol::workload::WorkloadClass;

use crate::score::Scores;

/// A metric's mean over the seeds, with its smallest and largest value.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return Spread { mean: 0.0, min: 0.0, max: 0.0 };
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Spread { mean, min, max }
    }

    fn show(&self, digits: usize, scale: f64, suffix: &str) -> String {
        let mean = format!("{:.*}{suffix}", digits, self.mean * scale);
        if (self.max - self.min) * scale < 0.5 * 10f64.powi(-(digits as i32)) {
            mean
        } else {
            format!("{mean} ±{:.*}", digits, (self.max - self.min) * scale / 2.0)
        }
    }
}

/// One policy's scores over the seeds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub policy: String,
    /// How the services were run; empty without services.
    pub mode: String,
    pub seeds: Vec<u64>,
    pub busy_share: Spread,
    pub allocated_share: Spread,
    pub idle_gpu_hours: Spread,
    pub idle_cost: Spread,
    pub fragmented_share_of_free: Spread,
    pub realtime_slo_attainment: Spread,
    pub realtime_start_delay_p95_s: Spread,
    /// The p95 start delay of the other classes' work, the worst class.
    pub worst_class_delay_p95_s: Spread,
    pub completed_gpu_hours: Spread,
    pub preemptions: Spread,
    pub wasted_gpu_hours: Spread,
    pub fairness: Spread,
    pub decisions_per_s: Spread,
    /// The real-time services' SLO attainment (time their capacity carried their demand).
    pub service_slo_attainment: Spread,
    pub gpu_replica_hours: Spread,
    pub cpu_replica_hours: Spread,
    /// Completed GPU-hours of training (training and fine-tuning) and of batch inference.
    pub completed_training_gpu_hours: Spread,
    pub completed_batch_gpu_hours: Spread,
    /// Each service's scores over the seeds, in trace order.
    pub services: Vec<ServiceSummary>,
}

/// One service's scores over the seeds of one policy and mode.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServiceSummary {
    pub name: String,
    pub slo_attainment: Spread,
    pub demand_served: Spread,
    pub gpu_replica_hours: Spread,
    pub cpu_replica_hours: Spread,
    pub peak_gpu_replicas: Spread,
    pub peak_cpu_replicas: Spread,
    pub start_delay_p95_s: Spread,
}

/// The completed GPU-hours of these classes in a run.
pub fn completed_of(run: &Scores, classes: &[WorkloadClass]) -> f64 {
    run.completed_by_class.iter().filter(|c| classes.contains(&c.class)).map(|c| c.gpu_hours).sum()
}

/// The classes counted as training in the tables.
pub const TRAINING: [WorkloadClass; 2] = [WorkloadClass::Training, WorkloadClass::FineTuning];

/// A run's label in the tables: the policy, and how the services ran.
fn label(policy: &str, mode: &str) -> String {
    if mode.is_empty() { policy.to_owned() } else { format!("{policy} · {mode}") }
}

pub fn summarise(runs: &[Scores]) -> Vec<Summary> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in runs {
        if !groups.contains(&(r.policy.as_str(), r.mode.as_str())) {
            groups.push((&r.policy, &r.mode));
        }
    }
    groups
        .into_iter()
        .map(|(policy, mode)| {
            let mine: Vec<&Scores> = runs.iter().filter(|r| r.policy == policy && r.mode == mode).collect();
            let spread = |f: &dyn Fn(&Scores) -> f64| Spread::of(mine.iter().map(|r| f(r)));
            let services = mine[0]
                .services
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let of = |f: &dyn Fn(&crate::score::ServiceScore) -> f64| {
                        Spread::of(mine.iter().filter_map(|r| r.services.get(i)).map(f))
                    };
                    ServiceSummary {
                        name: s.name.clone(),
                        slo_attainment: of(&|s| s.slo_attainment),
                        demand_served: of(&|s| s.demand_served),
                        gpu_replica_hours: of(&|s| s.gpu_replica_hours),
                        cpu_replica_hours: of(&|s| s.cpu_replica_hours),
                        peak_gpu_replicas: of(&|s| f64::from(s.peak_gpu_replicas)),
                        peak_cpu_replicas: of(&|s| f64::from(s.peak_cpu_replicas)),
                        start_delay_p95_s: of(&|s| s.start_delay_s.p95),
                    }
                })
                .collect();
            Summary {
                policy: policy.to_owned(),
                mode: mode.to_owned(),
                seeds: mine.iter().map(|r| r.seed).collect(),
                busy_share: spread(&|r| r.busy_share),
                allocated_share: spread(&|r| r.allocated_share),
                idle_gpu_hours: spread(&|r| r.idle_gpu_hours),
                idle_cost: spread(&|r| r.idle_cost),
                fragmented_share_of_free: spread(&|r| r.fragmented_share_of_free),
                realtime_slo_attainment: spread(&|r| r.realtime_slo_attainment),
                realtime_start_delay_p95_s: spread(&|r| r.realtime_start_delay_s.p95),
                worst_class_delay_p95_s: spread(&|r| {
                    r.queue_delay
                        .iter()
                        .filter(|d| d.class != airtime_protocol::workload::WorkloadClass::RealtimeInference)
                        .map(|d| d.start_delay_s.p95)
                        .fold(0.0, f64::max)
                }),
                completed_gpu_hours: spread(&|r| r.completed_gpu_hours),
                preemptions: spread(&|r| r.preemptions as f64),
                wasted_gpu_hours: spread(&|r| r.wasted_gpu_hours),
                fairness: spread(&|r| r.fairness),
                decisions_per_s: spread(&|r| r.decisions_per_s),
                service_slo_attainment: spread(&|r| r.service_slo_attainment),
                gpu_replica_hours: spread(&|r| r.gpu_replica_hours),
                cpu_replica_hours: spread(&|r| r.cpu_replica_hours),
                completed_training_gpu_hours: spread(&|r| completed_of(r, &TRAINING)),
                completed_batch_gpu_hours: spread(&|r| completed_of(r, &[WorkloadClass::BatchInference])),
                services,
            }
        })
        .collect()
}

/// The comparison as a table: one row per policy (and way of running the services), mean (± half
/// the spread) over the seeds. With services, their columns come after the policy's, and a second
/// table gives each service.
pub fn table(summaries: &[Summary]) -> String {
    let with_services = summaries.iter().any(|s| !s.services.is_empty());
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![
        "policy",
        "GPU busy",
        "allocated",
        "idle GPU-h",
        "idle cost $",
        "fragmented",
        "real-time SLO",
        "RT start p95 s",
        "worst queue p95 s",
        "done GPU-h",
        "preempted",
        "wasted GPU-h",
        "fairness",
        "decisions/s",
    ];
    if with_services {
        header.extend([
            "services' RT SLO",
            "GPU replica-h",
            "CPU replica-h",
            "done training GPU-h",
            "done batch GPU-h",
        ]);
    }
    table.set_header(header);
    for s in summaries {
        let mut cells = vec![
            Cell::new(label(&s.policy, &s.mode)),
            Cell::new(s.busy_share.show(1, 100.0, "%")),
            Cell::new(s.allocated_share.show(1, 100.0, "%")),
            Cell::new(s.idle_gpu_hours.show(0, 1.0, "")),
            Cell::new(s.idle_cost.show(0, 1.0, "")),
            Cell::new(s.fragmented_share_of_free.show(1, 100.0, "%")),
            Cell::new(s.realtime_slo_attainment.show(2, 100.0, "%")),
            Cell::new(s.realtime_start_delay_p95_s.show(0, 1.0, "")),
            Cell::new(s.worst_class_delay_p95_s.show(0, 1.0, "")),
            Cell::new(s.completed_gpu_hours.show(0, 1.0, "")),
            Cell::new(s.preemptions.show(0, 1.0, "")),
            Cell::new(s.wasted_gpu_hours.show(1, 1.0, "")),
            Cell::new(s.fairness.show(3, 1.0, "")),
            Cell::new(s.decisions_per_s.show(0, 1.0, "")),
        ];
        if with_services {
            cells.extend([
                Cell::new(s.service_slo_attainment.show(2, 100.0, "%")),
                Cell::new(s.gpu_replica_hours.show(0, 1.0, "")),
                Cell::new(s.cpu_replica_hours.show(0, 1.0, "")),
                Cell::new(s.completed_training_gpu_hours.show(0, 1.0, "")),
                Cell::new(s.completed_batch_gpu_hours.show(0, 1.0, "")),
            ]);
        }
        table.add_row(
            cells.into_iter().enumerate().map(|(i, c)| if i == 0 { c } else { c.set_alignment(CellAlignment::Right) }),
        );
    }
    if !with_services {
        return table.to_string();
    }
    format!("{table}\n{}", services_table(summaries))
}

/// Each service under each policy and mode: its SLO attainment, the share of its demand carried,
/// its replica-hours and peak replicas by variant, and how long its replicas waited to start.
pub fn services_table(summaries: &[Summary]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(vec![
        "policy",
        "service",
        "SLO (time)",
        "demand served",
        "GPU replica-h",
        "CPU replica-h",
        "peak GPU replicas",
        "peak CPU replicas",
        "replica start p95 s",
    ]);
    for s in summaries {
        for v in &s.services {
            let cells = vec![
                Cell::new(label(&s.policy, &s.mode)),
                Cell::new(&v.name),
                Cell::new(v.slo_attainment.show(2, 100.0, "%")),
                Cell::new(v.demand_served.show(2, 100.0, "%")),
                Cell::new(v.gpu_replica_hours.show(0, 1.0, "")),
                Cell::new(v.cpu_replica_hours.show(0, 1.0, "")),
                Cell::new(v.peak_gpu_replicas.show(0, 1.0, "")),
                Cell::new(v.peak_cpu_replicas.show(0, 1.0, "")),
                Cell::new(v.start_delay_p95_s.show(0, 1.0, "")),
            ];
            table.add_row(
                cells
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| if i < 2 { c } else { c.set_alignment(CellAlignment::Right) }),
            );
        }
    }
    table.to_string()
}

/// Everything a program needs: the summaries and every run with its time series.
#[derive(Serialize)]
pub struct Report<'a> {
    pub summaries: &'a [Summary],
    pub runs: &'a [Scores],
}

pub fn write_json(path: &Path, summaries: &[Summary], runs: &[Scores]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    serde_json::to_writer_pretty(std::io::BufWriter::new(file), &Report { summaries, runs })?;
    Ok(())
}

/// Allocated (top) and busy (bottom) share of the GPUs over time, one line per policy, from each
/// policy's first seed.
pub fn plot(path: &Path, runs: &[Scores], title: &str) -> anyhow::Result<()> {
    let mut firsts: Vec<&Scores> = Vec::new();
    for r in runs {
        if !firsts.iter().any(|f| f.policy == r.policy && f.mode == r.mode) {
            firsts.push(r);
        }
    }
    let Some(first) = firsts.first() else { return Ok(()) };
    let hours = (first.span_s as f64 / 3600.0).max(1.0 / 60.0);
    let (x_scale, x_label) = if hours > 72.0 { (1.0 / 86_400.0, "days") } else { (1.0 / 3600.0, "hours") };
    let x_end = first.span_s as f64 * x_scale;
    let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((2, 1));
    for (panel, (name, pick)) in panels.iter().zip([
        (
            "allocated GPUs (% of owned)",
            (|s: &crate::score::Sample| s.allocated_gpus) as fn(&crate::score::Sample) -> f64,
        ),
        ("busy GPUs (% of owned)", |s: &crate::score::Sample| s.busy_gpus),
    ]) {
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .caption(name, ("sans-serif", 16))
            .build_cartesian_2d(0.0..x_end, 0.0..100.0)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart.configure_mesh().x_desc(x_label).y_desc("%").draw().map_err(|e| anyhow::anyhow!("{e}"))?;
        for (i, run) in firsts.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            let gpus = run.gpus.max(1) as f64;
            let points = run.series.iter().map(|s| (s.t_s as f64 * x_scale, pick(s) / gpus * 100.0));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(label(&run.policy, &run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
