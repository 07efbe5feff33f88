//! `airtime-sim`: convert real traces, generate synthetic ones, and replay them through the
//! production scheduling core with every policy compared (`docs/simulator.md`).

use std::path::PathBuf;

use airtime_protocol::sharing::GpuSharing;
use airtime_protocol::workload::WorkloadClass;
use airtime_sim::format::{CpuVariantSpec, FleetSpec, ReplicaTemplate, Trace};
use airtime_sim::policy::{self, Catalog};
use airtime_sim::services::ServiceMode;
use airtime_sim::{alibaba, azure, engine, generate, report};
use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "airtime-sim",
    version,
    about = "Replay workload traces through Airtime's scheduling core and compare policies"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a trace on a fleet with each policy and compare their scores.
    Run(RunArgs),
    /// Convert a real trace to the simulator's formats.
    #[command(subcommand)]
    Convert(Convert),
    /// Write a synthetic fleet and trace from a seed.
    Generate(GenerateArgs),
    /// Weng et al.'s fill experiment (USENIX ATC '23) on the Alibaba trace: pods arrive one a
    /// second and never leave; allocation against arrived demand, per policy, beside the published
    /// figures.
    Fill(FillArgs),
    /// The cost of a token over a diurnal week of Azure's LLM arrivals: GPU replicas only, a fixed
    /// CPU pool with GPUs for the rest, and Airtime's mix, at the same prices.
    Tokens(TokensArgs),
    /// List the policies a run can name.
    Policies,
}

#[derive(Args)]
struct TokensArgs {
    /// An Azure LLM inference trace (TIMESTAMP,ContextTokens,GeneratedTokens).
    #[arg(long, default_value = "../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv")]
    trace: PathBuf,
    #[arg(long, default_value_t = 7)]
    days: u32,
    /// Traffic multiplier.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// The diurnal trough as a share below the peak (0.6: the night carries 40 % of the peak).
    #[arg(long, default_value_t = 0.6)]
    amplitude: f64,
    /// Weekends carry this share of a weekday.
    #[arg(long, default_value_t = 0.6)]
    weekend: f64,
    /// Tokens per second (prompt and generated) a GPU replica serves at the objective.
    #[arg(long, default_value_t = 6000.0)]
    gpu_tokens_per_s: f64,
    /// What a GPU replica costs an hour (its share of GPUs, as billed).
    #[arg(long, default_value_t = 2.0)]
    gpu_cost_per_hour: f64,
    #[arg(long, default_value_t = 120)]
    gpu_startup_s: u64,
    /// Tokens per second a CPU replica serves at the objective.
    #[arg(long, default_value_t = 900.0)]
    cpu_tokens_per_s: f64,
    /// What a CPU replica costs an hour (its cores).
    #[arg(long, default_value_t = 0.2)]
    cpu_cost_per_hour: f64,
    #[arg(long, default_value_t = 30)]
    cpu_startup_s: u64,
    /// CPU replicas the CPU nodes hold.
    #[arg(long, default_value_t = 6)]
    cpu_slots: u32,
    /// The fixed hybrid's always-on CPU replicas.
    #[arg(long, default_value_t = 3)]
    fixed_cpu: u32,
    #[arg(long, default_value_t = 64)]
    max_replicas: u32,
    #[arg(long, default_value_t = 300)]
    scale_down_window_s: u32,
}

#[derive(Args)]
struct FillArgs {
    /// The alibaba-openb-2023 folder.
    #[arg(long, default_value = "../shared/traces/alibaba-openb-2023")]
    dir: PathBuf,
    /// Pod lists of that folder (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "openb_pod_list_default.csv")]
    pods: Vec<String>,
    /// A policy as `run` takes it; repeat to compare (default: slo-first, priority-best-fit and the
    /// reimplemented weng-best-fit and weng-random).
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// Seeds (comma-separated): each shuffles the list and samples its own extra pods.
    #[arg(long, value_delimiter = ',', default_value = "42,43,44,45,46,47,48,49,50,51")]
    seeds: Vec<u64>,
    /// Pods are added until their GPU request reaches this many times the cluster's GPUs.
    #[arg(long, default_value_t = 1.3)]
    tune: f64,
    /// Runs at once (each its own thread and policy runtime).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Write every run's curve and numbers here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the allocation curves (SVG) here.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
struct RunArgs {
    /// The fleet (JSON).
    #[arg(long)]
    fleet: PathBuf,
    /// A trace (JSON Lines); several are merged.
    #[arg(long, required = true)]
    trace: Vec<PathBuf>,
    /// A platform policy: a built-in or baseline name or a .wasm path, optionally `=PARAMS` (JSON).
    /// Repeat to compare; all built-ins and baselines when none is given.
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// Seeds (comma-separated): each delays every arrival by a uniform 0..--jitter-s of its own.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    seeds: Vec<u64>,
    #[arg(long, default_value_t = 0)]
    jitter_s: u64,
    /// The least virtual time between two cycles.
    #[arg(long, default_value_t = 5)]
    min_cycle_interval_s: u64,
    /// Virtual seconds before a retry cycle while work stays pending (doubling while nothing changes).
    #[arg(long, default_value_t = 60)]
    retry_s: u64,
    /// Seconds between samples of the time series (default: the window / 240).
    #[arg(long, default_value_t = 0)]
    sample_s: u64,
    /// The scored window in seconds from the start (default: up to the trace's last arrival).
    #[arg(long, default_value_t = 0)]
    window_s: u64,
    /// Stop at this virtual time (default: the window, then as long again — at least the longest
    /// workload, up to a day — for the queue to drain).
    #[arg(long, default_value_t = 0)]
    until_s: u64,
    /// Write every run's scores and time series here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the utilisation plot (SVG) here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Share every GPU node type's GPUs this way (none, time-slicing, mps), whatever the fleet
    /// file says: the same fleet compared with and without sharing.
    #[arg(long, value_parser = GpuSharing::parse)]
    gpu_sharing: Option<GpuSharing>,
    /// How the trace's services run (comma-separated to compare): as-given, fixed-peak (a fixed
    /// reserve of the replicas the peak needs), fixed-mean, elastic (GPU replicas only),
    /// cpu-first (the CPU variant first).
    #[arg(long, value_delimiter = ',', value_parser = ServiceMode::parse, default_value = "as-given")]
    services_mode: Vec<ServiceMode>,
}

#[derive(Subcommand)]
enum Convert {
    /// Alibaba's cluster-trace-gpu-v2023 (openb): its node list as the fleet, its pods as the trace.
    Alibaba {
        /// The alibaba-openb-2023 folder.
        #[arg(long, default_value = "../shared/traces/alibaba-openb-2023")]
        dir: PathBuf,
        /// The pod list (a variant such as openb_pod_list_gpushare40.csv).
        #[arg(long, default_value = "openb_pod_list_default.csv")]
        pods: String,
        /// Arrival times divided by this (lifetimes kept), to make the pods contend.
        #[arg(long, default_value_t = 1.0)]
        compress: f64,
        /// Start the replay at this second of the trace: pods gone by then are dropped, pods alive
        /// then are there at 0 with the rest of their lifetime (the real pods arrive from day 115).
        #[arg(long, default_value_t = 0)]
        start_s: u64,
        #[arg(long)]
        max_pods: Option<usize>,
        /// Only the first GPU nodes (pods no remaining node could hold are dropped).
        #[arg(long)]
        max_nodes: Option<usize>,
        /// Include the CPU-only nodes.
        #[arg(long)]
        cpu_nodes: bool,
        /// With --cpu-nodes, only the first CPU-only nodes.
        #[arg(long)]
        max_cpu_nodes: Option<usize>,
        /// How the GPU nodes share their GPUs: none (a fractional pod holds a whole GPU),
        /// time-slicing or mps.
        #[arg(long, value_parser = GpuSharing::parse, default_value = "none")]
        gpu_sharing: GpuSharing,
        /// Fill the cluster (Weng et al.'s evaluation): pods arrive one a second in file order and
        /// never leave. Pod lists without times (multigpu20) are always read this way.
        #[arg(long)]
        fill: bool,
        #[arg(long)]
        fleet_out: PathBuf,
        #[arg(long)]
        trace_out: PathBuf,
    },
    /// Azure's LLM inference arrivals as real-time replica demand, or (--as-service) as an elastic
    /// inference service's demand.
    Azure {
        /// AzureLLMInferenceTrace_conv.csv or _code.csv.
        #[arg(long)]
        file: PathBuf,
        /// Requests per second one (GPU) replica serves.
        #[arg(long, default_value_t = 1.0)]
        rps_per_replica: f64,
        #[command(flatten)]
        service: ServiceFlags,
        #[arg(long, default_value_t = 0.2)]
        headroom: f64,
        #[arg(long, default_value_t = 1)]
        days: u32,
        /// Rates multiplied by this.
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// The diurnal trough is 1 − amplitude of the peak.
        #[arg(long, default_value_t = 0.5)]
        amplitude: f64,
        #[arg(long, default_value = "serving")]
        tenant: String,
        /// GPU models a replica may use (comma-separated; any when empty).
        #[arg(long, value_delimiter = ',')]
        gpu_models: Vec<String>,
        #[arg(long, default_value = "azure")]
        id_prefix: String,
        #[arg(long)]
        trace_out: PathBuf,
    },
}

/// The service `convert azure --as-service` writes.
#[derive(Args)]
struct ServiceFlags {
    /// Write one service record of this name (its demand the arrivals per report interval)
    /// instead of replica lives.
    #[arg(long, value_name = "NAME")]
    as_service: Option<String>,
    /// realtime_inference or batch_inference.
    #[arg(long, default_value = "realtime_inference")]
    class: String,
    /// Seconds between two load reports.
    #[arg(long, default_value_t = 15)]
    every_s: u32,
    #[arg(long, default_value_t = 1)]
    min_replicas: u32,
    /// The most replicas (default: half again the replicas the peak needs).
    #[arg(long, default_value_t = 0)]
    max_replicas: u32,
    /// GPUs of a main replica.
    #[arg(long, default_value_t = 1)]
    gpus: u32,
    /// Host CPU and memory of a main replica.
    #[arg(long, default_value_t = 4000)]
    replica_cpu_millis: u32,
    #[arg(long, default_value_t = 16384)]
    replica_memory_mb: u64,
    /// Requests per second one CPU replica serves: gives the service a CPU variant.
    #[arg(long)]
    cpu_rps_per_replica: Option<f64>,
    #[arg(long, default_value_t = 32000)]
    cpu_variant_cpu_millis: u32,
    #[arg(long, default_value_t = 65536)]
    cpu_variant_memory_mb: u64,
    #[arg(long, default_value_t = 0)]
    scale_up_window_s: u32,
    #[arg(long, default_value_t = 300)]
    scale_down_window_s: u32,
    #[arg(long, default_value_t = 60)]
    stale_after_s: u32,
    /// Seconds a placed replica takes before it serves (loading the model).
    #[arg(long, default_value_t = 0)]
    startup_s: u32,
}

#[derive(Args)]
struct GenerateArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 24)]
    hours: u32,
    #[arg(long, default_value_t = 16)]
    gpu_nodes: u32,
    #[arg(long, default_value_t = 4)]
    cpu_nodes: u32,
    /// Offered GPU-hours as a share of the fleet's.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    #[arg(long)]
    fleet_out: PathBuf,
    #[arg(long)]
    trace_out: PathBuf,
}

fn main() {
    if let Err(err) = run(Cli::parse()) {
        eprintln!("airtime-sim: {err:#}");
        std::process::exit(1);
    }
}

#[allow(clippy::print_stdout)]
fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Policies => {
            for (name, _) in policy::known() {
                let kind = if airtime_builtin_policies::BASELINES.iter().any(|(n, _)| *n == name) {
                    "baseline"
                } else if airtime_builtin_policies::FILL_BASELINES.iter().any(|(n, _)| *n == name) {
                    "fill baseline"
                } else {
                    "built-in"
                };
                println!("{name:<20} {kind}");
            }
        }
        Command::Generate(a) => {
            let options = generate::Options {
                seed: a.seed,
                hours: a.hours,
                gpu_nodes: a.gpu_nodes,
                cpu_nodes: a.cpu_nodes,
                load: a.load,
            };
            let (fleet, trace) = generate::generate(&options);
            fleet.save(&a.fleet_out)?;
            trace.save(&a.trace_out)?;
            println!(
                "{} workloads on {} GPUs → {} and {}",
                trace.workloads.len(),
                fleet.gpu_count(),
                a.fleet_out.display(),
                a.trace_out.display()
            );
        }
        Command::Convert(Convert::Alibaba {
            dir,
            pods,
            compress,
            start_s,
            max_pods,
            max_nodes,
            cpu_nodes,
            max_cpu_nodes,
            gpu_sharing,
            fill,
            fleet_out,
            trace_out,
        }) => {
            if gpu_sharing == GpuSharing::Mig {
                bail!(
                    "--gpu-sharing mig needs a MIG layout per node type: write it in the fleet file (docs/simulator.md)"
                );
            }
            let options = alibaba::Options {
                pod_file: pods,
                cpu_nodes,
                compress,
                start_s,
                max_pods,
                max_nodes,
                max_cpu_nodes,
                gpu_sharing,
                fill,
            };
            let (fleet, trace) = alibaba::load(&dir, &options)?;
            fleet.save(&fleet_out)?;
            trace.save(&trace_out)?;
            println!(
                "{} workloads on {} GPUs → {} and {}",
                trace.workloads.len(),
                fleet.gpu_count(),
                fleet_out.display(),
                trace_out.display()
            );
        }
        Command::Convert(Convert::Azure {
            file,
            rps_per_replica,
            service,
            headroom,
            days,
            scale,
            amplitude,
            tenant,
            gpu_models,
            id_prefix,
            trace_out,
        }) => {
            if !(rps_per_replica.is_finite() && rps_per_replica > 0.0) {
                bail!("--rps-per-replica must be more than 0");
            }
            if !(scale.is_finite() && scale > 0.0 && headroom.is_finite() && headroom >= 0.0) {
                bail!("--scale must be more than 0 and --headroom 0 or more");
            }
            if !(0.0..=1.0).contains(&amplitude) || days == 0 {
                bail!("--amplitude must be between 0 and 1 and --days at least 1");
            }
            if let Some(name) = service.as_service {
                let class: WorkloadClass = serde_json::from_value(serde_json::Value::String(service.class.clone()))
                    .map_err(|_| anyhow::anyhow!("--class {:?} is not a workload class", service.class))?;
                let options = azure::ServiceOptions {
                    name,
                    tenant,
                    class,
                    every_s: service.every_s,
                    days,
                    amplitude,
                    scale,
                    capacity: rps_per_replica,
                    min_replicas: service.min_replicas,
                    max_replicas: service.max_replicas,
                    replica: ReplicaTemplate {
                        gpus: service.gpus,
                        gpu_milli: 1000,
                        gpu_memory_mb: 0,
                        gpu_models,
                        cpu_millis: service.replica_cpu_millis,
                        memory_mb: service.replica_memory_mb,
                        priority: 100,
                    },
                    cpu_variant: service.cpu_rps_per_replica.map(|capacity| CpuVariantSpec {
                        capacity,
                        cpu_millis: service.cpu_variant_cpu_millis,
                        memory_mb: service.cpu_variant_memory_mb,
                    }),
                    scale_up_window_s: service.scale_up_window_s,
                    scale_down_window_s: service.scale_down_window_s,
                    stale_after_s: service.stale_after_s,
                    startup_s: service.startup_s,
                    ..azure::ServiceOptions::default()
                };
                let counts = azure::arrivals(&file, u64::from(options.every_s.max(1)))?;
                let record = azure::to_service(&counts, &options);
                record.check().map_err(|m| anyhow::anyhow!("the service would be refused: {m}"))?;
                let (peak, mean) = record.peak_and_mean();
                let trace = Trace { services: vec![record], ..Trace::default() };
                trace.save(&trace_out)?;
                println!(
                    "service {} over {days} day(s): mean {mean:.1} req/s, peak {peak:.1} req/s → {}",
                    trace.services[0].name,
                    trace_out.display()
                );
                return Ok(());
            }
            let options = azure::Options {
                rps_per_replica,
                headroom,
                days,
                scale,
                amplitude,
                tenant,
                gpu_models,
                id_prefix,
                ..azure::Options::default()
            };
            let counts = azure::arrivals(&file, options.window_s)?;
            let trace = azure::to_trace(&counts, &options);
            trace.save(&trace_out)?;
            println!("{} replica lives over {} day(s) → {}", trace.workloads.len(), days, trace_out.display());
        }
        Command::Run(a) => replay(a)?,
        Command::Fill(a) => fill(a)?,
        Command::Tokens(a) => tokens(a)?,
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn tokens(a: TokensArgs) -> anyhow::Result<()> {
    use airtime_sim::tokens::{self, Options, Strategy, Variant};
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if ![a.scale, a.gpu_tokens_per_s, a.cpu_tokens_per_s, a.gpu_cost_per_hour, a.cpu_cost_per_hour]
        .into_iter()
        .all(positive)
    {
        bail!("--scale, the capacities and the costs must be above 0");
    }
    if !(0.0..=1.0).contains(&a.amplitude) || !(0.0..=1.0).contains(&a.weekend) || a.days == 0 || a.max_replicas == 0 {
        bail!("--amplitude and --weekend must be between 0 and 1, --days and --max-replicas at least 1");
    }
    let o = Options {
        days: a.days,
        amplitude: a.amplitude,
        peak_hour: 14.0,
        weekend: a.weekend,
        scale: a.scale,
        gpu: Variant {
            tokens_per_s: a.gpu_tokens_per_s,
            cost_per_hour: a.gpu_cost_per_hour,
            startup_s: a.gpu_startup_s,
        },
        cpu: Variant {
            tokens_per_s: a.cpu_tokens_per_s,
            cost_per_hour: a.cpu_cost_per_hour,
            startup_s: a.cpu_startup_s,
        },
        cpu_slots: a.cpu_slots,
        fixed_cpu: a.fixed_cpu.min(a.cpu_slots),
        min_replicas: 1,
        max_replicas: a.max_replicas,
        scale_down_window_s: a.scale_down_window_s,
    };
    let arrivals = tokens::token_arrivals(&a.trace)?;
    let demand = tokens::week(&arrivals, &o);
    let peak = demand.iter().copied().fold(0.0, f64::max);
    let mean = demand.iter().sum::<f64>() / demand.len() as f64;
    println!(
        "{} over {} days: {:.0} tokens/s on average, {:.0} at the peak; GPU replica {:.0} tokens/s at {}/h, CPU replica \
         {:.0} tokens/s at {}/h ({} CPU slots, fixed hybrid {} CPU replicas)",
        a.trace.display(),
        a.days,
        mean,
        peak,
        o.gpu.tokens_per_s,
        o.gpu.cost_per_hour,
        o.cpu.tokens_per_s,
        o.cpu.cost_per_hour,
        o.cpu_slots,
        o.fixed_cpu
    );
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED).set_header([
        "strategy",
        "cost per 1M tokens",
        "tokens at the objective",
        "intervals held",
        "GPU replica-hours",
        "CPU replica-hours",
        "cost",
    ]);
    for strategy in Strategy::ALL {
        let out = tokens::serve(&demand, &o, strategy);
        table.add_row([
            out.strategy.to_owned(),
            format!("{:.4}", out.cost_per_million_tokens()),
            format!("{:.3}%", out.attainment() * 100.0),
            format!("{:.3}%", out.intervals_held * 100.0),
            format!("{:.1}", out.gpu_replica_hours),
            format!("{:.1}", out.cpu_replica_hours),
            format!("{:.2}", out.cost),
        ]);
    }
    println!("{table}");
    Ok(())
}

#[allow(clippy::print_stdout)]
fn fill(a: FillArgs) -> anyhow::Result<()> {
    use airtime_sim::fill;
    if !(a.tune.is_finite() && a.tune > 0.0 && a.tune <= 10.0) {
        bail!("--tune must be more than 0 and at most 10 (the published experiment uses 1.3)");
    }
    if a.seeds.is_empty() || a.threads == 0 {
        bail!("give at least one seed and one thread");
    }
    let names = if a.policies.is_empty() {
        ["slo-first", "priority-best-fit", "weng-best-fit", "weng-random"].map(String::from).to_vec()
    } else {
        a.policies.clone()
    };
    // Every name must load before hours of runs start.
    let catalog = Catalog::new()?;
    for name in &names {
        catalog.load(name)?;
    }
    let protocols = a.pods.iter().map(|p| fill::Protocol::load(&a.dir, p)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut jobs: Vec<(usize, &str, u64)> = Vec::new();
    for (l, _) in protocols.iter().enumerate() {
        for name in &names {
            for &seed in &a.seeds {
                jobs.push((l, name, seed));
            }
        }
    }
    eprintln!(
        "filling {} GPUs: {} pod list(s) × {} policies × {} seeds on {} threads",
        protocols.first().map_or(0, |p| p.capacity_milli / 1000),
        protocols.len(),
        names.len(),
        a.seeds.len(),
        a.threads
    );
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..a.threads.min(jobs.len()))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    let catalog = Catalog::new()?;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(l, name, seed)) = jobs.get(i) else { return Ok(()) };
                        let policy = catalog.load(name)?;
                        let run = fill::run(&catalog, &protocols[l], &policy, seed, a.tune)?;
                        eprintln!(
                            "  {:<32} {:<20} seed {seed:<4} {:>6.2}% at 100% arrived, {:>6.2}% at 130%, {} without a place, {} preemptions, {:.0} s",
                            run.pods_file,
                            run.policy,
                            run.at(100),
                            run.at(130),
                            run.unplaced,
                            run.preemptions,
                            run.wall_s
                        );
                        results.lock().map_err(|_| anyhow::anyhow!("a fill thread panicked"))?.push((i, run));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("a fill thread panicked"))??;
        }
        Ok(())
    })?;
    let mut runs = results.into_inner().map_err(|_| anyhow::anyhow!("a fill thread panicked"))?;
    runs.sort_by_key(|(i, _)| *i);
    let runs: Vec<fill::FillRun> = runs.into_iter().map(|(_, r)| r).collect();
    let summaries = fill::summarise(&runs);
    println!("{}", fill::table(&summaries));
    if let Some(path) = &a.json {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(
            std::io::BufWriter::new(file),
            &serde_json::json!({"summaries": summaries, "runs": runs}),
        )?;
    }
    if let Some(path) = &a.plot {
        fill::plot(path, &summaries)?;
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn replay(a: RunArgs) -> anyhow::Result<()> {
    let mut fleet = FleetSpec::read(&a.fleet)?;
    if let Some(sharing) = a.gpu_sharing {
        airtime_sim::share_gpus(&mut fleet, sharing)?;
    }
    let traces = a.trace.iter().map(|p| Trace::read(p)).collect::<Result<Vec<_>, _>>()?;
    let trace = airtime_sim::merge(traces);
    let catalog = Catalog::new()?;
    let names = if a.policies.is_empty() { policy::default_names() } else { a.policies.clone() };
    let policies = names.iter().map(|n| catalog.load(n)).collect::<anyhow::Result<Vec<_>>>()?;
    let config = engine::Config {
        min_cycle_interval_s: a.min_cycle_interval_s,
        retry_s: a.retry_s,
        sample_s: a.sample_s,
        jitter_s: a.jitter_s,
        seed: 0,
        window_s: a.window_s,
        until_s: a.until_s,
        usage_half_life_hours: 24.0,
        history: Vec::new(),
    };
    eprintln!(
        "replaying {} workloads on {} GPUs with {} policies × {} seeds",
        trace.workloads.len(),
        fleet.gpu_count(),
        policies.len(),
        a.seeds.len()
    );
    let runs = airtime_sim::compare(&catalog, &fleet, &trace, &policies, &a.seeds, &a.services_mode, &config, |s| {
        eprintln!(
            "  {:<20} {:<10} seed {:<4} {:>7} cycles in {:>6.1} s ({:.0} decisions/s)",
            s.policy, s.mode, s.seed, s.cycles, s.wall_s, s.decisions_per_s
        );
    })?;
    let summaries = report::summarise(&runs);
    println!("{}", report::table(&summaries));
    if let Some(path) = &a.json {
        report::write_json(path, &summaries, &runs)?;
    }
    if let Some(path) = &a.plot {
        let title = format!("{} workloads, {} GPUs", trace.workloads.len(), fleet.gpu_count());
        report::plot(path, &runs, &title).context("drawing the plot")?;
    }
    Ok(())
}
