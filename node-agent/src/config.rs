//! The agent's configuration: command-line flags, each with an `AIRTIME_…` environment variable.
//!
//! Parsing is two pure steps so tests never touch the process environment: [`Cli`] (clap, from an
//! argument list) and [`Config::resolve`] (checks that span flags, and the hostname default, given
//! as an argument rather than read from the system).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use airtime_protocol::sharing::{GpuSharing, MigProfile};
use clap::builder::Resettable;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use reqwest::Url;
use thiserror::Error;

use crate::containers::{CdiChoice, ContainerConfig, EngineChoice, PullPolicy};
use crate::credential::Secret;
use crate::isolation::{ProcessUser, WorkloadKinds};

/// Command-line flags as given. Turn them into a [`Config`] with [`Config::resolve`].
#[derive(Debug, Clone, Parser)]
#[command(
    name = "airtime-node-agent",
    version,
    about = "Airtime node agent: registers this server with the control plane, reports its \
             telemetry, and runs and stops the workloads assigned to it."
)]
pub struct Cli {
    /// Base URL of the control plane, e.g. http://airtime:8080.
    #[arg(long, env = "AIRTIME_CONTROL_PLANE", value_parser = parse_control_plane_url)]
    pub control_plane: Url,

    /// Node name, unique in the fleet [default: the hostname].
    #[arg(long, env = "AIRTIME_NODE_NAME")]
    pub name: Option<String>,

    /// A label KEY=VALUE; repeat the flag, or separate with commas.
    #[arg(
        long = "label",
        value_name = "KEY=VALUE",
        env = "AIRTIME_LABELS",
        value_delimiter = ',',
        value_parser = parse_label
    )]
    pub labels: Vec<(String, String)>,

    /// What an hour of this node costs, in USD.
    #[arg(long, env = "AIRTIME_COST_PER_HOUR", value_parser = parse_cost)]
    pub cost_per_hour: Option<f64>,

    /// Where the other members of a gang reach this node (an IP address or a host name): a gang's
    /// rank-0 member's node is its MASTER_ADDR [default: the hostname].
    #[arg(long, env = "AIRTIME_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<String>,

    /// Advertise simulated GPUs, COUNT:MODEL:MEMORY_MIB (e.g. 8:H100-SXM:81920); repeat the flag, or
    /// separate with commas. Their telemetry is synthetic. Appended after any real GPUs.
    #[arg(
        long = "simulate-gpus",
        value_name = "COUNT:MODEL:MEMORY_MIB",
        env = "AIRTIME_SIMULATE_GPUS",
        value_delimiter = ','
    )]
    pub simulate_gpus: Vec<SimulatedGpuSpec>,

    /// A file naming faults of simulated GPUs, read at every heartbeat: one `SLOT KIND [CODE]` per
    /// line, KIND one of `xid`, `ecc_uncorrectable`, `retired_pages_pending`, `fallen_off_bus`
    /// (`0 xid 79`). For tests and drills of the GPU-health path; real GPUs report what NVML says.
    #[arg(long, value_name = "PATH", env = "AIRTIME_SIMULATED_GPU_FAULTS")]
    pub simulated_gpu_faults: Option<PathBuf>,

    /// Do not load NVML: the node advertises only simulated GPUs, if any.
    #[arg(long, env = "AIRTIME_NO_NVML")]
    pub no_nvml: bool,

    /// Path or file name of the NVML library [default: libnvidia-ml.so.1].
    #[arg(long, env = "AIRTIME_NVML_LIBRARY", conflicts_with = "no_nvml")]
    pub nvml_library: Option<PathBuf>,

    /// Heartbeat interval in milliseconds, overriding the one the control plane answers.
    #[arg(
        long = "heartbeat-ms",
        visible_alias = "heartbeat",
        value_name = "MS",
        env = "AIRTIME_HEARTBEAT_MS",
        value_parser = clap::value_parser!(u64).range(100..=60_000)
    )]
    pub heartbeat_ms: Option<u64>,

    /// Working directory of the workload processes.
    #[arg(long, env = "AIRTIME_WORK_DIR", default_value = ".")]
    pub work_dir: PathBuf,

    /// Where workload stdout/stderr go: into the agent's log, one record per line, or straight
    /// to the agent's own stdout/stderr.
    #[arg(long, env = "AIRTIME_WORKLOAD_OUTPUT", value_enum, default_value_t = WorkloadOutput::Log)]
    pub workload_output: WorkloadOutput,

    /// Log format. The level comes from RUST_LOG (default: info).
    #[arg(long, env = "AIRTIME_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// One-time enrolment token from the control plane (`POST /api/v1/enrolment-tokens`), exchanged
    /// at the first start for the node's own credential. Not needed once the credential is stored.
    #[arg(long, env = "AIRTIME_ENROLMENT_TOKEN", hide_env_values = true)]
    pub enrolment_token: Option<Secret>,

    /// Where the agent keeps its state: the node's credential (`node-credential`, mode 0600), and
    /// the MPS daemon's directories unless they are given.
    #[arg(long, env = "AIRTIME_STATE_DIR", default_value = ".airtime-agent")]
    pub state_dir: PathBuf,

    /// How this node shares its GPUs among workloads: none, time-slicing, mps or mig.
    #[arg(
        long,
        value_name = "MODE",
        env = "AIRTIME_GPU_SHARING",
        default_value = "none",
        value_parser = GpuSharing::parse
    )]
    pub gpu_sharing: GpuSharing,

    /// The MIG instances each simulated GPU is carved into (with --gpu-sharing mig and
    /// --simulate-gpus), e.g. 3g.40gb,2g.20gb,1g.10gb,1g.10gb [default: that shape, scaled to each
    /// GPU's memory]. Real GPUs' MIG instances are read from NVML.
    #[arg(
        long,
        value_name = "PROFILE,...",
        env = "AIRTIME_MIG_LAYOUT",
        value_delimiter = ',',
        value_parser = MigProfile::parse
    )]
    pub mig_layout: Vec<MigProfile>,

    /// The MPS control program, for --gpu-sharing mps on real GPUs.
    #[arg(long, value_name = "PATH", env = "AIRTIME_MPS_CONTROL", default_value = DEFAULT_MPS_CONTROL)]
    pub mps_control: PathBuf,

    /// The MPS pipe directory (CUDA_MPS_PIPE_DIRECTORY) of the daemon the agent joins or starts
    /// [default: <state-dir>/mps/pipe].
    #[arg(long, value_name = "DIR", env = "AIRTIME_MPS_PIPE_DIRECTORY")]
    pub mps_pipe_directory: Option<PathBuf>,

    /// The MPS log directory (CUDA_MPS_LOG_DIRECTORY) of a daemon the agent starts
    /// [default: <state-dir>/mps/log].
    #[arg(long, value_name = "DIR", env = "AIRTIME_MPS_LOG_DIRECTORY")]
    pub mps_log_directory: Option<PathBuf>,

    /// The node's lease when the control plane does not say (it does, at registration): after
    /// this long without a delivered heartbeat the node counts as lost and the agent fences its
    /// work (see --on-lost-contact).
    #[arg(long, env = "AIRTIME_LEASE_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub lease_ms: u64,

    /// What the agent does with its workloads when the control plane has not answered past the
    /// lease: `stop` them (SIGTERM, then SIGKILL after their grace period; the control plane
    /// requeues them after the lease and the grace period, so no workload runs twice) or `keep`
    /// them running (stateless work that may run twice for a while rather than stop).
    #[arg(long, value_enum, env = "AIRTIME_ON_LOST_CONTACT", default_value_t = OnLostContact::Stop)]
    pub on_lost_contact: OnLostContact,

    /// What a stopped agent (SIGTERM: `systemctl restart`, an upgrade, a reboot) does with its
    /// workloads: `leave` them running under their tethers for the next agent process, which
    /// adopts them (they are stopped only if none comes back before the node's lease runs out),
    /// or `requeue` them (stopped with their grace periods and handed back to the scheduler, never
    /// counted failed).
    #[arg(long, value_enum, env = "AIRTIME_ON_STOP", default_value_t = OnStop::Leave)]
    pub on_stop: OnStop,

    /// The container engine for container workloads: `auto` (Podman if it answers, else Docker,
    /// else none), `podman`, `docker`, or `none` (the node takes no container work). An engine
    /// named here that does not answer stops the agent at start.
    #[arg(long, value_enum, env = "AIRTIME_CONTAINER_ENGINE", default_value_t = EngineChoice::Auto)]
    pub container_engine: EngineChoice,

    /// The engine's program, when it is not `podman` or `docker` on `PATH`.
    #[arg(long, value_name = "PATH", env = "AIRTIME_CONTAINER_ENGINE_PATH")]
    pub container_engine_path: Option<PathBuf>,

    /// An argument given to the engine before every subcommand; repeat for several (e.g.
    /// `--container-engine-arg=--runtime=runc --container-engine-arg=--cgroup-manager=cgroupfs`).
    #[arg(long = "container-engine-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub container_engine_args: Vec<String>,

    /// An argument added to every container's `run`; repeat for several (e.g.
    /// `--container-run-arg=--network=none`).
    #[arg(long = "container-run-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub container_run_args: Vec<String>,

    /// When a workload's image is pulled: `missing` (when the node lacks it), `always`, `never`.
    #[arg(long, value_enum, env = "AIRTIME_CONTAINER_PULL", default_value_t = PullPolicy::Missing)]
    pub container_pull: PullPolicy,

    /// GPUs reach containers through CDI (`--device nvidia.com/gpu=…`): `auto` when the NVIDIA
    /// container toolkit's CDI specification is in /etc/cdi or /var/run/cdi, `on`, `off`.
    #[arg(long, value_enum, env = "AIRTIME_CONTAINER_CDI", default_value_t = CdiChoice::Auto)]
    pub container_cdi: CdiChoice,

    /// A host directory containers may mount, checked on this node after the source is resolved
    /// (no symbolic link in any component is ever followed); repeat or comma-separate for several
    /// [default: what the control plane's --container-mount-prefix allowed].
    #[arg(
        long = "container-mount-prefix",
        value_name = "DIR",
        env = "AIRTIME_CONTAINER_MOUNT_PREFIXES",
        value_delimiter = ','
    )]
    pub container_mount_prefixes: Vec<PathBuf>,

    /// Which workloads this node runs: `containers` (no tenant code on the host outside a
    /// container: what a multi-tenant fleet should run), `processes`, or `all`.
    #[arg(long, value_enum, env = "AIRTIME_WORKLOADS", default_value_t = WorkloadKinds::All)]
    pub workloads: WorkloadKinds,

    /// The user process workloads run as: a name or uid (`nobody`, `65534`, `65534:65534`), or a
    /// range of uids, each running workload then holding one of its own (`200000-200999`). Never
    /// root nor the agent's own user; the agent must run as root to switch. Each process runs with
    /// no new privileges, in a directory of its own under --work-dir [default: the agent's own
    /// user, for a single-tenant node].
    #[arg(long, value_name = "USER", env = "AIRTIME_PROCESS_USER", value_parser = ProcessUser::parse)]
    pub process_user: Option<ProcessUser>,
}

/// The MPS control program's usual name, looked up in `PATH`.
pub const DEFAULT_MPS_CONTROL: &str = "nvidia-cuda-mps-control";

impl Cli {
    /// Parses an argument list (the first item is the program name) and ignores the `AIRTIME_…`
    /// environment variables, so the result depends on the arguments alone.
    pub fn try_parse_args_only<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let command = Self::command().mut_args(|arg| arg.env(Resettable::Reset));
        let matches = command.try_get_matches_from(args)?;
        Self::from_arg_matches(&matches)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadOutput {
    Log,
    Inherit,
}

/// Whether and from where to load NVML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlMode {
    Disabled,
    /// Load NVML; `None` means the default library name.
    Enabled {
        library: Option<PathBuf>,
    },
}

/// The validated configuration the agent runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub control_plane: Url,
    pub name: String,
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    pub cost_per_hour: Option<f64>,
    /// `--advertise-address`.
    pub advertise_address: Option<String>,
    pub simulated_gpus: Vec<SimulatedGpuSpec>,
    /// `--simulated-gpu-faults`.
    pub simulated_gpu_faults: Option<PathBuf>,
    pub nvml: NvmlMode,
    pub heartbeat_override: Option<Duration>,
    pub work_dir: PathBuf,
    pub workload_output: WorkloadOutput,
    pub log_format: LogFormat,
    pub enrolment_token: Option<Secret>,
    pub state_dir: PathBuf,
    /// How the node shares its GPUs (`--gpu-sharing`).
    pub gpu_sharing: GpuSharing,
    /// The MIG layout given for simulated GPUs (`--mig-layout`), checked against each of them;
    /// `None`: each simulated GPU gets [`MigLayout::default_for`] its memory.
    pub mig_layout: Option<MigLayout>,
    /// Where the MPS daemon is, for `--gpu-sharing mps` on real GPUs.
    pub mps: MpsConfig,
    pub containers: ContainerConfig,
    /// The lease when the control plane does not give one.
    pub lease: Duration,
    pub on_lost_contact: OnLostContact,
    pub on_stop: OnStop,
    /// The agent's own binary, to run workloads tethered to the agent (`crate::tether`); set by
    /// the binary's `main` (its path is not configuration). `None`: workloads are untethered.
    pub tether_binary: Option<PathBuf>,
    /// The host directories containers may mount, resolved (`--container-mount-prefix`).
    pub container_mount_prefixes: Vec<PathBuf>,
    /// Which workloads this node runs (`--workloads`).
    pub workloads: WorkloadKinds,
    /// Who process workloads run as (`--process-user`).
    pub process_user: ProcessUser,
}

/// What the agent does with its work when its lease runs out (`--on-lost-contact`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLostContact {
    Stop,
    Keep,
}

/// What a stopped agent does with its work (`--on-stop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnStop {
    Leave,
    Requeue,
}

/// The MPS control daemon the agent joins or starts for `--gpu-sharing mps` on real GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsConfig {
    /// The control program (`nvidia-cuda-mps-control`).
    pub control: PathBuf,
    /// `CUDA_MPS_PIPE_DIRECTORY`: where the daemon listens, and where workloads find it.
    pub pipe_directory: PathBuf,
    /// `CUDA_MPS_LOG_DIRECTORY` of a daemon the agent starts.
    pub log_directory: PathBuf,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("label {key:?} is given more than once")]
    DuplicateLabel { key: String },
    #[error("the hostname could not be read; pass --name")]
    NoName,
    #[error("--name must not be empty")]
    EmptyName,
    #[error("{0}")]
    Args(String),
    #[error("--mig-layout describes MIG instances: it needs --gpu-sharing mig (this node's mode is {mode})")]
    MigLayoutWithoutMig { mode: GpuSharing },
    #[error(
        "--mig-layout describes simulated GPUs: pass --simulate-gpus too (real GPUs' MIG instances are read \
         from NVML, as `nvidia-smi mig` created them)"
    )]
    MigLayoutWithoutSimulation,
    #[error("--mig-layout {layout}: {reason}")]
    MigLayout { layout: String, reason: String },
    #[error(
        "--gpu-sharing mig: the simulated {model} GPUs ({memory_mb} MiB) are too small for the default MIG \
         layout (it needs at least {min_mb} MiB); pass --mig-layout"
    )]
    NoDefaultMigLayout { model: String, memory_mb: u64, min_mb: u64 },
}

impl Config {
    /// Parses an argument list alone (see [`Cli::try_parse_args_only`]).
    pub fn from_args<I, T>(args: I, hostname: Option<String>) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = Cli::try_parse_args_only(args).map_err(|e| ConfigError::Args(e.to_string()))?;
        Self::resolve(cli, hostname)
    }

    /// Applies the checks that span flags. `hostname` is the system's, when it could be read.
    pub fn resolve(cli: Cli, hostname: Option<String>) -> Result<Self, ConfigError> {
        let mut labels = BTreeMap::new();
        for (key, value) in cli.labels {
            if labels.insert(key.clone(), value).is_some() {
                return Err(ConfigError::DuplicateLabel { key });
            }
        }
        let hostname = hostname.filter(|h| !h.trim().is_empty());
        let name = match cli.name {
            Some(name) if name.trim().is_empty() => return Err(ConfigError::EmptyName),
            Some(name) => name.trim().to_owned(),
            None => hostname.clone().ok_or(ConfigError::NoName)?,
        };
        let nvml = if cli.no_nvml { NvmlMode::Disabled } else { NvmlMode::Enabled { library: cli.nvml_library } };
        let mig_layout = check_mig_layout(cli.gpu_sharing, cli.mig_layout, &cli.simulate_gpus)?;
        let mps = MpsConfig {
            control: cli.mps_control,
            pipe_directory: cli.mps_pipe_directory.unwrap_or_else(|| cli.state_dir.join("mps").join("pipe")),
            log_directory: cli.mps_log_directory.unwrap_or_else(|| cli.state_dir.join("mps").join("log")),
        };
        Ok(Self {
            control_plane: cli.control_plane,
            hostname: hostname.unwrap_or_else(|| name.clone()),
            name,
            labels,
            cost_per_hour: cli.cost_per_hour,
            advertise_address: cli.advertise_address.filter(|a| !a.trim().is_empty()),
            simulated_gpus: cli.simulate_gpus,
            simulated_gpu_faults: cli.simulated_gpu_faults,
            nvml,
            heartbeat_override: cli.heartbeat_ms.map(Duration::from_millis),
            work_dir: cli.work_dir,
            workload_output: cli.workload_output,
            log_format: cli.log_format,
            enrolment_token: cli.enrolment_token.filter(|t| !t.expose().trim().is_empty()),
            state_dir: cli.state_dir,
            gpu_sharing: cli.gpu_sharing,
            mig_layout,
            mps,
            lease: Duration::from_millis(cli.lease_ms),
            on_lost_contact: cli.on_lost_contact,
            on_stop: cli.on_stop,
            tether_binary: None,
            container_mount_prefixes: cli.container_mount_prefixes,
            workloads: cli.workloads,
            process_user: cli.process_user.unwrap_or(ProcessUser::Agent),
            containers: ContainerConfig {
                choice: cli.container_engine,
                program: cli.container_engine_path,
                engine_args: cli.container_engine_args,
                run_args: cli.container_run_args,
                pull: cli.container_pull,
                cdi: cli.container_cdi,
                ..ContainerConfig::default()
            },
        })
    }
}

/// Checks `--mig-layout` against the mode and the simulated GPUs, and that every simulated GPU of
/// a MIG node has a layout that fits it.
fn check_mig_layout(
    sharing: GpuSharing,
    profiles: Vec<MigProfile>,
    simulated: &[SimulatedGpuSpec],
) -> Result<Option<MigLayout>, ConfigError> {
    if profiles.is_empty() {
        if sharing == GpuSharing::Mig {
            for spec in simulated {
                if MigLayout::default_for(spec.memory_mb).is_none() {
                    return Err(ConfigError::NoDefaultMigLayout {
                        model: spec.model.clone(),
                        memory_mb: spec.memory_mb,
                        min_mb: MigLayout::MIN_DEFAULT_MEMORY_MB,
                    });
                }
            }
        }
        return Ok(None);
    }
    if sharing != GpuSharing::Mig {
        return Err(ConfigError::MigLayoutWithoutMig { mode: sharing });
    }
    if simulated.is_empty() {
        return Err(ConfigError::MigLayoutWithoutSimulation);
    }
    let layout = MigLayout::new(profiles)?;
    for spec in simulated {
        layout.check_fits(spec)?;
    }
    Ok(Some(layout))
}

/// The MIG instances one simulated GPU is carved into (`--mig-layout`), in order. A simulated
/// instance has 1024 MiB for each GB its profile names (`1g.10gb`: 10240 MiB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigLayout(Vec<MigProfile>);

impl MigLayout {
    /// Compute slices of a MIG-capable GPU (A100, H100, H200): no layout may use more.
    pub const COMPUTE_SLICES: u32 = 7;
    /// Memory slices of those GPUs; the default layout uses all of them.
    const MEMORY_SLICES: u64 = 8;
    /// The smallest GPU memory the default layout fits: one GiB per memory slice.
    pub const MIN_DEFAULT_MEMORY_MB: u64 = Self::MEMORY_SLICES * 1024;

    /// A layout of `profiles`: at least one, with at most [`Self::COMPUTE_SLICES`] compute slices
    /// in all.
    pub fn new(profiles: Vec<MigProfile>) -> Result<Self, ConfigError> {
        let layout = Self(profiles);
        let refuse = |reason: String| ConfigError::MigLayout { layout: layout.to_string(), reason };
        if layout.0.is_empty() {
            return Err(refuse("name at least one MIG profile".into()));
        }
        let slices = layout.compute_slices();
        if slices > Self::COMPUTE_SLICES {
            return Err(refuse(format!(
                "the compute slices add up to {slices}, more than the {} of a GPU",
                Self::COMPUTE_SLICES
            )));
        }
        Ok(layout)
    }

    /// NVIDIA's mixed layout of an 80 GB H100 — `3g.40gb,2g.20gb,1g.10gb,1g.10gb` — scaled to a GPU
    /// of `memory_mb` MiB: a memory slice is an eighth of its memory in whole GiB. `None` when the
    /// GPU has less than [`Self::MIN_DEFAULT_MEMORY_MB`].
    pub fn default_for(memory_mb: u64) -> Option<Self> {
        let slice_gb = memory_mb / 1024 / Self::MEMORY_SLICES;
        if slice_gb == 0 {
            return None;
        }
        let profile =
            |slices: u64, memory_slices: u64| MigProfile::parse(&format!("{slices}g.{}gb", memory_slices * slice_gb));
        [profile(3, 4), profile(2, 2), profile(1, 1), profile(1, 1)]
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .map(Self)
    }

    pub fn profiles(&self) -> &[MigProfile] {
        &self.0
    }

    /// Compute slices the layout uses.
    pub fn compute_slices(&self) -> u32 {
        self.0.iter().map(MigProfile::compute_slices).sum()
    }

    /// Memory the layout's simulated instances have in all, MiB.
    pub fn memory_mb(&self) -> u64 {
        self.0.iter().map(simulated_instance_memory_mb).sum()
    }

    /// Refuses a layout whose instances need more memory than each GPU of `spec` has.
    pub fn check_fits(&self, spec: &SimulatedGpuSpec) -> Result<(), ConfigError> {
        let needed = self.memory_mb();
        if needed > spec.memory_mb {
            return Err(ConfigError::MigLayout {
                layout: self.to_string(),
                reason: format!(
                    "its instances need {needed} MiB ({} GB × 1024 MiB), more than the {} MiB of each simulated {} GPU",
                    needed / 1024,
                    spec.memory_mb,
                    spec.model
                ),
            });
        }
        Ok(())
    }
}

impl fmt::Display for MigLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(MigProfile::as_str).collect();
        f.write_str(&names.join(","))
    }
}

/// The memory of a simulated MIG instance of `profile`: 1024 MiB per GB of its name.
pub fn simulated_instance_memory_mb(profile: &MigProfile) -> u64 {
    u64::from(profile.memory_gb()).saturating_mul(1024)
}

/// One `--simulate-gpus` value: `COUNT` GPUs of model `MODEL` with `MEMORY_MIB` MiB each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedGpuSpec {
    pub count: u32,
    pub model: String,
    pub memory_mb: u64,
}

/// Bounds that catch typos (a memory size in bytes or GiB) rather than limit real hardware.
const MAX_SIMULATED_PER_SPEC: u32 = 256;
const MAX_GPU_MEMORY_MIB: u64 = 4 * 1024 * 1024;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SimulatedGpuSpecError {
    #[error("expected COUNT:MODEL:MEMORY_MIB (e.g. 8:H100-SXM:81920), got {fields} field(s)")]
    Shape { fields: usize },
    #[error("COUNT {0:?} is not a whole number from 1 to {MAX_SIMULATED_PER_SPEC}")]
    Count(String),
    #[error("MODEL is empty")]
    EmptyModel,
    #[error("MEMORY_MIB {0:?} is not a whole number of MiB from 1 to {MAX_GPU_MEMORY_MIB}")]
    Memory(String),
}

impl FromStr for SimulatedGpuSpec {
    type Err = SimulatedGpuSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = spec.trim().split(':').collect();
        let [count, model, memory] = fields.as_slice() else {
            return Err(SimulatedGpuSpecError::Shape { fields: fields.len() });
        };
        let count = count
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|c| (1..=MAX_SIMULATED_PER_SPEC).contains(c))
            .ok_or_else(|| SimulatedGpuSpecError::Count((*count).to_owned()))?;
        let model = model.trim();
        if model.is_empty() {
            return Err(SimulatedGpuSpecError::EmptyModel);
        }
        let memory_mb = memory
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|m| (1..=MAX_GPU_MEMORY_MIB).contains(m))
            .ok_or_else(|| SimulatedGpuSpecError::Memory((*memory).to_owned()))?;
        Ok(Self { count, model: model.to_owned(), memory_mb })
    }
}

impl fmt::Display for SimulatedGpuSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.count, self.model, self.memory_mb)
    }
}

fn parse_control_plane_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw.trim()).map_err(|e| format!("not a URL: {e}"))?;
    match url.scheme() {
        "http" => {}
        // The agent's HTTP client is built without TLS; say so now rather than fail every request.
        "https" => {
            return Err(
                "https is not supported by this build; use http:// (e.g. behind a TLS-terminating proxy)".into()
            );
        }
        other => return Err(format!("scheme {other:?} is not http")),
    }
    if url.host_str().is_none() {
        return Err("the URL has no host".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("the URL must not have a query or fragment".into());
    }
    Ok(url)
}

fn parse_label(raw: &str) -> Result<(String, String), String> {
    let (key, value) = raw.split_once('=').ok_or_else(|| "expected KEY=VALUE".to_owned())?;
    let key = key.trim();
    if key.is_empty() {
        return Err("the label key is empty".into());
    }
    if key.chars().any(char::is_whitespace) {
        return Err(format!("the label key {key:?} contains whitespace"));
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

fn parse_cost(raw: &str) -> Result<f64, String> {
    let cost: f64 = raw.trim().parse().map_err(|_| format!("{raw:?} is not a number"))?;
    if !cost.is_finite() || cost < 0.0 {
        return Err(format!("{raw:?} is not a cost: expected a number ≥ 0"));
    }
    Ok(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://cp:8080";

    fn parse(extra: &[&str]) -> Result<Config, ConfigError> {
        let mut args = vec!["airtime-node-agent", "--control-plane", URL];
        args.extend_from_slice(extra);
        Config::from_args(args, Some("host-a".into()))
    }

    fn args_error(result: Result<Config, ConfigError>) -> String {
        match result {
            Err(ConfigError::Args(message)) => message,
            other => panic!("expected an argument error, got {other:?}"),
        }
    }

    #[test]
    fn defaults() -> Result<(), ConfigError> {
        let config = parse(&[])?;
        assert_eq!(config.control_plane.as_str(), "http://cp:8080/");
        assert_eq!(config.name, "host-a");
        assert_eq!(config.hostname, "host-a");
        assert!(config.labels.is_empty());
        assert_eq!(config.cost_per_hour, None);
        assert!(config.simulated_gpus.is_empty(), "simulation is never the default");
        assert_eq!(config.nvml, NvmlMode::Enabled { library: None });
        assert_eq!(config.heartbeat_override, None);
        assert_eq!(config.work_dir, PathBuf::from("."));
        assert_eq!(config.workload_output, WorkloadOutput::Log);
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.gpu_sharing, GpuSharing::None);
        assert_eq!(config.mig_layout, None);
        assert_eq!(
            config.mps,
            MpsConfig {
                control: PathBuf::from("nvidia-cuda-mps-control"),
                pipe_directory: PathBuf::from(".airtime-agent/mps/pipe"),
                log_directory: PathBuf::from(".airtime-agent/mps/log"),
            }
        );
        Ok(())
    }

    fn layout(names: &[&str]) -> MigLayout {
        let profiles = names.iter().map(|n| MigProfile::parse(n)).collect::<Result<Vec<_>, _>>();
        match profiles.map_err(|e| e.to_string()).and_then(|p| MigLayout::new(p).map_err(|e| e.to_string())) {
            Ok(layout) => layout,
            Err(error) => panic!("{names:?}: {error}"),
        }
    }

    #[test]
    fn gpu_sharing_modes() -> Result<(), ConfigError> {
        for (flag, mode) in [
            ("none", GpuSharing::None),
            ("time-slicing", GpuSharing::TimeSlicing),
            ("time_slicing", GpuSharing::TimeSlicing),
            ("mps", GpuSharing::Mps),
            ("MIG", GpuSharing::Mig),
        ] {
            assert_eq!(parse(&["--gpu-sharing", flag])?.gpu_sharing, mode, "{flag}");
        }
        let message = args_error(parse(&["--gpu-sharing", "vgpu"]));
        assert!(message.contains("--gpu-sharing"), "{message}");
        assert!(message.contains("expected none, time-slicing, mps or mig"), "{message}");

        let mps = parse(&[
            "--gpu-sharing",
            "mps",
            "--state-dir",
            "/var/lib/airtime",
            "--mps-log-directory",
            "/var/log/mps",
            "--mps-control",
            "/opt/cuda/bin/nvidia-cuda-mps-control",
        ])?;
        assert_eq!(mps.mps.pipe_directory, PathBuf::from("/var/lib/airtime/mps/pipe"));
        assert_eq!(mps.mps.log_directory, PathBuf::from("/var/log/mps"));
        assert_eq!(mps.mps.control, PathBuf::from("/opt/cuda/bin/nvidia-cuda-mps-control"));
        let joined = parse(&["--gpu-sharing", "mps", "--mps-pipe-directory", "/tmp/nvidia-mps"])?;
        assert_eq!(joined.mps.pipe_directory, PathBuf::from("/tmp/nvidia-mps"));
        Ok(())
    }

    #[test]
    fn a_mig_layout_is_checked_against_the_simulated_gpus() -> Result<(), ConfigError> {
        let mig = ["--gpu-sharing", "mig", "--simulate-gpus", "1:H100:81920"];
        let given =
            parse(&[&mig[..], &["--mig-layout", "3g.40gb,2g.20gb,1g.10gb", "--mig-layout", "1G.10GB"]].concat())?;
        assert_eq!(given.mig_layout, Some(layout(&["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])));
        // Without one, each simulated GPU gets the default for its memory.
        assert_eq!(parse(&mig)?.mig_layout, None);
        assert_eq!(MigLayout::default_for(81920), Some(layout(&["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])));
        assert_eq!(MigLayout::default_for(8191), None);

        let refused = |extra: &[&str]| parse(&[&mig[..], extra].concat()).err().map(|e| e.to_string());
        assert_eq!(
            refused(&["--mig-layout", "4g.40gb,3g.20gb,1g.10gb"]).as_deref(),
            Some("--mig-layout 4g.40gb,3g.20gb,1g.10gb: the compute slices add up to 8, more than the 7 of a GPU")
        );
        assert_eq!(
            refused(&["--mig-layout", "3g.40gb,3g.40gb,1g.10gb"]).as_deref(),
            Some(
                "--mig-layout 3g.40gb,3g.40gb,1g.10gb: its instances need 92160 MiB (90 GB × 1024 MiB), more than \
                 the 81920 MiB of each simulated H100 GPU"
            )
        );
        // Every simulated GPU must hold it.
        let two = parse(&[
            "--gpu-sharing",
            "mig",
            "--simulate-gpus",
            "1:H100:81920,1:A30:24576",
            "--mig-layout",
            "1g.10gb,1g.10gb,1g.10gb",
        ]);
        assert!(two.is_err_and(|e| e.to_string().contains("more than the 24576 MiB of each simulated A30 GPU")));
        let message = args_error(parse(&[&mig[..], &["--mig-layout", "3g.40gb,big"]].concat()));
        assert!(message.contains("--mig-layout") && message.contains("a MIG profile looks like 1g.10gb"), "{message}");

        assert_eq!(
            parse(&["--gpu-sharing", "mps", "--simulate-gpus", "1:H100:81920", "--mig-layout", "7g.80gb"]),
            Err(ConfigError::MigLayoutWithoutMig { mode: GpuSharing::Mps })
        );
        assert_eq!(
            parse(&["--gpu-sharing", "mig", "--mig-layout", "7g.80gb"]),
            Err(ConfigError::MigLayoutWithoutSimulation)
        );
        assert_eq!(
            parse(&["--gpu-sharing", "mig", "--simulate-gpus", "1:T4:4096"]),
            Err(ConfigError::NoDefaultMigLayout { model: "T4".into(), memory_mb: 4096, min_mb: 8192 })
        );
        Ok(())
    }

    #[test]
    fn every_flag() -> Result<(), ConfigError> {
        let config = parse(&[
            "--name",
            "gpu-7",
            "--label",
            "zone=a",
            "--label",
            "rack=r1,pool=",
            "--cost-per-hour",
            "32.5",
            "--simulate-gpus",
            "8:H100-SXM:81920",
            "--simulate-gpus",
            "2:L4:23034",
            "--no-nvml",
            "--heartbeat",
            "500",
            "--work-dir",
            "/tmp",
            "--workload-output",
            "inherit",
            "--log-format",
            "json",
        ])?;
        assert_eq!(config.name, "gpu-7");
        assert_eq!(config.hostname, "host-a");
        assert_eq!(
            config.labels,
            BTreeMap::from(
                [("zone".into(), "a".into()), ("rack".into(), "r1".into()), ("pool".into(), String::new()),]
            )
        );
        assert_eq!(config.cost_per_hour, Some(32.5));
        assert_eq!(
            config.simulated_gpus,
            vec![
                SimulatedGpuSpec { count: 8, model: "H100-SXM".into(), memory_mb: 81920 },
                SimulatedGpuSpec { count: 2, model: "L4".into(), memory_mb: 23034 },
            ]
        );
        assert_eq!(config.nvml, NvmlMode::Disabled);
        assert_eq!(config.heartbeat_override, Some(Duration::from_millis(500)));
        assert_eq!(config.work_dir, PathBuf::from("/tmp"));
        assert_eq!(config.workload_output, WorkloadOutput::Inherit);
        assert_eq!(config.log_format, LogFormat::Json);
        Ok(())
    }

    #[test]
    fn simulate_gpus_specs() {
        let good = [
            ("8:H100-SXM:81920", SimulatedGpuSpec { count: 8, model: "H100-SXM".into(), memory_mb: 81920 }),
            (
                " 1 : NVIDIA H200 : 143771 ",
                SimulatedGpuSpec { count: 1, model: "NVIDIA H200".into(), memory_mb: 143771 },
            ),
        ];
        for (raw, expected) in good {
            assert_eq!(raw.parse::<SimulatedGpuSpec>(), Ok(expected), "{raw}");
        }

        let bad = [
            ("8:H100", SimulatedGpuSpecError::Shape { fields: 2 }),
            ("8:H100:80:1", SimulatedGpuSpecError::Shape { fields: 4 }),
            ("", SimulatedGpuSpecError::Shape { fields: 1 }),
            ("0:H100:81920", SimulatedGpuSpecError::Count("0".into())),
            ("-1:H100:81920", SimulatedGpuSpecError::Count("-1".into())),
            ("eight:H100:81920", SimulatedGpuSpecError::Count("eight".into())),
            ("257:H100:81920", SimulatedGpuSpecError::Count("257".into())),
            ("8: :81920", SimulatedGpuSpecError::EmptyModel),
            ("8:H100:0", SimulatedGpuSpecError::Memory("0".into())),
            ("8:H100:80GiB", SimulatedGpuSpecError::Memory("80GiB".into())),
            ("8:H100:85899345920", SimulatedGpuSpecError::Memory("85899345920".into())),
        ];
        for (raw, expected) in bad {
            assert_eq!(raw.parse::<SimulatedGpuSpec>(), Err(expected), "{raw:?}");
        }
    }

    #[test]
    fn bad_simulate_gpus_flag_names_the_flag_and_the_shape() {
        let message = args_error(parse(&["--simulate-gpus", "8:H100"]));
        assert!(message.contains("--simulate-gpus"), "{message}");
        assert!(message.contains("8:H100"), "{message}");
        assert!(
            message.contains("expected COUNT:MODEL:MEMORY_MIB (e.g. 8:H100-SXM:81920), got 2 field(s)"),
            "{message}"
        );
    }

    #[test]
    fn control_plane_is_required_and_checked() {
        let missing = Config::from_args(["airtime-node-agent"], Some("h".into()));
        assert!(args_error(missing).contains("--control-plane"));
        for (url, needle) in [
            ("https://cp", "https is not supported"),
            ("ftp://cp", "is not http"),
            ("cp:8080", "is not http"),
            ("http://cp/?a=1", "query"),
            ("not a url", "not a URL"),
        ] {
            let result = Config::from_args(["airtime-node-agent", "--control-plane", url], None);
            let message = args_error(result);
            assert!(message.contains(needle), "{url}: {message}");
        }
    }

    #[test]
    fn labels_and_cost_are_checked() {
        assert!(args_error(parse(&["--label", "zone"])).contains("expected KEY=VALUE"));
        assert!(args_error(parse(&["--label", "=a"])).contains("key is empty"));
        assert_eq!(
            parse(&["--label", "zone=a", "--label", "zone=b"]),
            Err(ConfigError::DuplicateLabel { key: "zone".into() })
        );
        assert!(args_error(parse(&["--cost-per-hour=-1"])).contains("≥ 0"));
        assert!(args_error(parse(&["--cost-per-hour", "NaN"])).contains("≥ 0"));
        assert!(args_error(parse(&["--heartbeat-ms", "10"])).contains("10"));
        assert!(args_error(parse(&["--log-format", "xml"])).contains("xml"));
    }

    #[test]
    fn name_falls_back_to_hostname_and_must_exist() {
        let cli = |extra: &[&str]| {
            let mut args = vec!["airtime-node-agent", "--control-plane", URL];
            args.extend_from_slice(extra);
            Cli::try_parse_args_only(args)
        };
        let Ok(no_name) = cli(&[]) else { panic!("flags parse") };
        assert_eq!(Config::resolve(no_name.clone(), None), Err(ConfigError::NoName));
        assert_eq!(Config::resolve(no_name, Some("  ".into())), Err(ConfigError::NoName));
        let Ok(empty) = cli(&["--name", " "]) else { panic!("flags parse") };
        assert_eq!(Config::resolve(empty, Some("h".into())), Err(ConfigError::EmptyName));
        let Ok(named) = cli(&["--name", "n1"]) else { panic!("flags parse") };
        let Ok(config) = Config::resolve(named, None) else { panic!("resolves") };
        assert_eq!((config.name.as_str(), config.hostname.as_str()), ("n1", "n1"));
    }

    #[test]
    fn nvml_library_conflicts_with_no_nvml() {
        let message = args_error(parse(&["--no-nvml", "--nvml-library", "/x.so"]));
        assert!(message.contains("--nvml-library"), "{message}");
    }
}
