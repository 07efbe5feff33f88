//! The comparison a person reads (a table, each policy's mean and spread over the seeds), the JSON
//! a program reads (every run's scores with its time series) and a plot of allocated and busy GPUs
//! over time, one line per policy (`plotters`, SVG).

use std::path::Path;

use anyhow::Context;
use comfy_table::{Cell, CellAlignment, Table, presets::UTF8_FULL_CONDENSED};
use plotters::prelude::*;
use serde::Serialize;

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
}

pub fn summarise(runs: &[Scores]) -> Vec<Summary> {
    let mut policies: Vec<&str> = Vec::new();
    for r in runs {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    policies
        .into_iter()
        .map(|policy| {
            let mine: Vec<&Scores> = runs.iter().filter(|r| r.policy == policy).collect();
            let spread = |f: &dyn Fn(&Scores) -> f64| Spread::of(mine.iter().map(|r| f(r)));
            Summary {
                policy: policy.to_owned(),
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
            }
        })
        .collect()
}

/// The comparison as a table: one row per policy, mean (± half the spread) over the seeds.
pub fn table(summaries: &[Summary]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(vec![
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
    ]);
    for s in summaries {
        let cells = vec![
            Cell::new(&s.policy),
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
        table.add_row(
            cells.into_iter().enumerate().map(|(i, c)| if i == 0 { c } else { c.set_alignment(CellAlignment::Right) }),
        );
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
        if !firsts.iter().any(|f| f.policy == r.policy) {
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
                .label(run.policy.clone())
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
