//! The command line: every command, flag and environment variable, with the help text `airtime
//! --help` prints (the exit codes included, which scripts rely on).

use std::path::PathBuf;

use airtime_protocol::agent::LogStream;
use airtime_protocol::workload::{WorkloadClass, WorkloadState};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

pub const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the API refused the request (a 4xx answer other than 404; its message is printed), or a local
     step failed (writing the config file)
  2  usage: bad arguments, an unreadable or invalid input file, no server or token configured
  3  the control plane could not be reached, or it failed (a 5xx answer): retrying may help
  4  not found (404): no such workload, service, policy or node, or one the caller may not see

Configuration: --url/--token, else AIRTIME_URL/AIRTIME_TOKEN, else the config file written by
`airtime login` ($AIRTIME_CONFIG, else $XDG_CONFIG_HOME/airtime/config.toml, else
~/.config/airtime/config.toml; mode 0600).";

#[derive(Debug, Parser)]
#[command(
    name = "airtime",
    version,
    about = "Airtime's command line: workloads, logs, services, the fleet, policies and priorities over the control plane's API.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// The control plane, e.g. http://airtime:8080 (`/api/v1` is added).
    #[arg(long, global = true, help_heading = "Global options", env = "AIRTIME_URL", value_name = "URL")]
    pub url: Option<String>,
    /// A session or API token (overrides the config file's); with `login`, the token to store.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "AIRTIME_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/airtime/config.toml or ~/.config/airtime/config.toml).
    #[arg(long, global = true, help_heading = "Global options", env = "AIRTIME_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// `table` for people, `json` for scripts (the API's JSON as it answered).
    #[arg(short = 'o', long, global = true, help_heading = "Global options", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Log in with a login name and password (a session, or with --api-token a long-lived API
    /// token), or store an existing token (--token); checked against the API before it is saved.
    Login(LoginArgs),
    /// Forget the stored token (the URL stays).
    Logout,
    /// Who the configured credential acts as.
    Whoami,
    /// Submit a workload, from flags (the command after `--`) or a spec file (-f spec.yaml|spec.json).
    Submit(SubmitArgs),
    /// One workload: its state, resources, history and decisions.
    Get {
        /// Workload id.
        id: String,
    },
    /// Workloads, most recent first, with their state and why pending ones wait.
    #[command(alias = "ls")]
    List(ListArgs),
    /// What a workload printed; -f follows it until it ends.
    Logs(LogsArgs),
    /// Cancel a workload (a running one gets SIGTERM, then SIGKILL after the grace period).
    Cancel {
        /// Workload id.
        id: String,
    },
    /// The fleet's nodes and their GPUs (the default); one node; cordon, drain and uncordon a
    /// node for maintenance (platform admins).
    Nodes(NodesArgs),
    /// Tenants with their quota and standing (the default); create one, change its quota or
    /// preview what the change would do, set its budgets, archive it (platform admins).
    Tenants(TenantsArgs),
    /// Elastic inference services (the default lists them); one with its replicas, scale events
    /// and, priced per token, its serving; create one from a spec file.
    Services(ServicesArgs),
    /// Scheduling policies: list, upload, try, shadow, activate, roll back.
    #[command(subcommand, alias = "policy")]
    Policies(PolicyCommand),
    /// The platform's priority settings (preemption rules, burst reserve, night window).
    #[command(subcommand)]
    Priorities(PriorityCommand),
    /// GPU-hours owned, allocated, busy and idle, and what the idle ones cost, by group.
    Usage(UsageArgs),
}

#[derive(Debug, Args)]
pub struct ServicesArgs {
    #[command(subcommand)]
    pub command: Option<ServiceCommand>,
}

/// A service, by id or by name (a name several visible services share is refused: use the id).
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Every service with its replicas, running and desired by variant, its load and why it has
    /// the replicas it has (what `airtime services` alone shows).
    #[command(alias = "ls")]
    List,
    /// One service: its definition, replicas, demand, latest scale events and, for a service
    /// priced per token, its serving (objective, variants, learned capacity, cost per 1M tokens).
    #[command(alias = "get")]
    Show {
        /// Service name or id.
        service: String,
    },
    /// Create a service from a spec file: the service as the API takes it (`POST /services`).
    Create {
        /// The spec file (YAML or JSON; `-` reads standard input).
        #[arg(short = 'f', long, value_name = "FILE")]
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct TenantsArgs {
    #[command(subcommand)]
    pub command: Option<TenantCommand>,
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Every tenant with its quota, what it runs and waits for, and its standing.
    #[command(alias = "ls")]
    List,
    /// Create a tenant with its quota.
    Create {
        /// Its name: lowercase letters, digits and dashes.
        name: String,
        #[command(flatten)]
        quota: QuotaArgs,
    },
    /// Change a tenant's quota (the flags given change; audited; applied at the next cycle).
    Set {
        /// Tenant name or id.
        tenant: String,
        #[command(flatten)]
        quota: QuotaArgs,
        /// Show what the next scheduling cycle would do differently, and change nothing.
        #[arg(long)]
        preview: bool,
    },
    /// Archive a tenant: its pending work is cancelled, its running work stopped with its grace
    /// period, its services drained; it admits nothing new. Its history and accounting remain.
    Archive {
        /// Tenant name or id.
        tenant: String,
    },
    /// Budgets and what each tenant used of them this period (one tenant's with a name).
    Budgets {
        /// Tenant name or id.
        tenant: Option<String>,
    },
    /// Set (or with --remove, remove) a tenant's GPU-hour budget for a week or a month.
    Budget {
        /// Tenant name or id.
        tenant: String,
        /// The period: week (from Monday 00:00 UTC) or month (from the 1st).
        #[arg(long, default_value = "month")]
        period: String,
        /// GPU-hours per period, counted as billed (a quarter GPU for an hour is 0.25).
        #[arg(long, required_unless_present = "remove")]
        gpu_hours: Option<f64>,
        /// What happens to new work once it is used up: warn, best-effort or stop.
        #[arg(long, default_value = "warn")]
        action: String,
        /// Remove the budget instead.
        #[arg(long, conflicts_with_all = ["gpu_hours"])]
        remove: bool,
    },
}

#[derive(Debug, Args)]
pub struct QuotaArgs {
    /// GPUs the tenant is guaranteed.
    #[arg(long)]
    pub guaranteed_gpus: Option<u32>,
    /// Its share of what is left over, against the other tenants' weights.
    #[arg(long)]
    pub weight: Option<u32>,
    /// Its rank when guarantees cannot all be met (higher first).
    #[arg(long, allow_hyphen_values = true)]
    pub tier: Option<i32>,
    /// Whether it may borrow idle GPUs beyond its guarantee.
    #[arg(long, value_name = "BOOL")]
    pub may_borrow: Option<bool>,
    /// The most GPUs its work may hold at once, borrowed or not (0 removes the limit).
    #[arg(long)]
    pub gpu_limit: Option<u32>,
    /// Stop its work that holds GPUs all idle this many seconds, after a warning (0 removes it).
    #[arg(long, value_name = "SECONDS")]
    pub idle_reclaim_after_s: Option<u32>,
}

#[derive(Debug, Args)]
pub struct NodesArgs {
    #[command(subcommand)]
    pub command: Option<NodeCommand>,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Every node with its state and GPUs (what `airtime nodes` alone shows).
    #[command(alias = "ls")]
    List,
    /// One node: its state, its operator's hold, and what runs on it.
    Get {
        /// Node name or id.
        node: String,
    },
    /// Stop new placements on a node; what runs there runs on. Survives agent and control-plane
    /// restarts.
    Cordon {
        /// Node name or id.
        node: String,
        /// Why (kept on the node and in the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Cordon a node and move its work off: checkpointable and preemptible work is stopped with
    /// the checkpoint signal and requeued, service replicas are replaced elsewhere before they
    /// stop, other work is left to finish (or stopped and requeued at --deadline).
    Drain {
        /// Node name or id.
        node: String,
        /// Why (kept on the node and in the audit log).
        #[arg(long)]
        reason: Option<String>,
        /// After this long (`90s`, `10m`, `2h`, `1d`), the work left on the node is stopped and
        /// requeued too; without it, that work is left to finish.
        #[arg(long, value_parser = parse_duration)]
        deadline: Option<u32>,
        /// Wait until nothing is left on the node, printing what still runs as it changes.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up (exit 1) after this long.
        #[arg(long, value_parser = parse_duration, default_value = "1h", requires = "wait")]
        timeout: u32,
    },
    /// Lift a cordon or drain: the node takes work again.
    Uncordon {
        /// Node name or id.
        node: String,
    },
    /// Lift a GPU's quarantine after its repair: work is placed on it again (a fault that
    /// persists quarantines it again at the agent's next report).
    ClearFault {
        /// Node name or id.
        node: String,
        /// The GPU's index on the node (as `airtime nodes get` lists it).
        gpu: u32,
        /// Why (kept in the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
}

/// `90s`, `10m`, `2h`, `1d` (or plain seconds) as seconds, up to a week.
fn parse_duration(text: &str) -> Result<u32, String> {
    match seconds(text)? {
        s if s <= 7 * 86_400 => Ok(s as u32),
        _ => Err(format!("{text:?} is longer than a week")),
    }
}

/// A number of seconds with an optional unit (`s`, `m`, `h`, `d`).
fn seconds(text: &str) -> Result<u64, String> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 90s, 10m, 2h or 1d"))?;
    let factor = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    n.checked_mul(factor).ok_or_else(|| format!("{text:?} is too long"))
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// How far back from now (`90m`, `24h`, `7d`).
    #[arg(long, default_value = "24h", value_parser = parse_since)]
    pub since: u64,
    /// Group by `tenant`, `class`, `node`, `gpu_model`, or `none`.
    #[arg(long, default_value = "tenant", value_parser = ["none", "tenant", "class", "node", "gpu_model"])]
    pub by: String,
}

/// `90m`, `24h`, `7d` (or plain seconds) as seconds, at least a minute.
fn parse_since(text: &str) -> Result<u64, String> {
    match seconds(text)? {
        s if s >= 60 => Ok(s),
        _ => Err(format!("{text:?} must be at least a minute")),
    }
}

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The login name (an email address or a user name); prompted for when absent and no --token.
    #[arg(long)]
    pub email: Option<String>,
    /// Read the password from the first line of standard input instead of prompting.
    #[arg(long)]
    pub password_stdin: bool,
    /// The tenant to act in, by name (for a user of several tenants).
    #[arg(long)]
    pub tenant: Option<String>,
    /// After logging in, create a long-lived API token of this name and store it instead of the
    /// one-hour session.
    #[arg(long, value_name = "NAME")]
    pub api_token: Option<String>,
    /// With --api-token: days until it expires (the API's default when absent).
    #[arg(long, requires = "api_token", value_name = "DAYS")]
    pub expires_in_days: Option<u32>,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A spec file (YAML or JSON; `-` reads standard input): the submission as the API takes it.
    /// Flags given beside it replace the file's fields.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The workload's name.
    #[arg(long, required_unless_present = "file")]
    pub name: Option<String>,
    /// What kind of work it is: how policies treat it.
    #[arg(long, value_parser = class_parser(), required_unless_present = "file")]
    pub class: Option<WorkloadClass>,
    /// The tenant, by name (platform admins; others submit into their own).
    #[arg(long)]
    pub tenant: Option<String>,
    /// -1000 to 1000.
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// GPUs, all on one node (with --nodes: on each node).
    #[arg(long, visible_alias = "gpus-per-node", value_name = "N")]
    pub gpus: Option<u32>,
    /// A gang across nodes: this many members, each on a node of its own with the resources
    /// given, started together (MASTER_ADDR, RANK, WORLD_SIZE, …) and requeued together.
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// GPU memory per GPU: MiB, or with a unit (20Gi, 512Mi).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_mib)]
    pub gpu_memory: Option<u64>,
    /// An allowed GPU model (repeatable); any when absent.
    #[arg(long, value_name = "MODEL")]
    pub gpu_model: Vec<String>,
    /// A share of one GPU in thousandths (250: a quarter), with --gpus 1.
    #[arg(long, value_name = "MILLI")]
    pub gpu_milli: Option<u32>,
    /// A MIG profile (1g.10gb), with --gpus 1.
    #[arg(long, value_name = "PROFILE")]
    pub mig_profile: Option<String>,
    /// CPU: cores (2, 0.5) or thousandths of a core (500m).
    #[arg(long, value_name = "CPU", value_parser = crate::units::parse_cpu_millis)]
    pub cpu: Option<u32>,
    /// Host memory: MiB, or with a unit (4Gi, 512Mi).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_mib)]
    pub memory: Option<u64>,
    /// May run on CPU alone (--cpu, --memory) instead of GPUs.
    #[arg(long)]
    pub cpu_capable: bool,
    /// May be preempted for more urgent work.
    #[arg(long)]
    pub preemptible: bool,
    /// Checkpoints on SIGTERM and resumes when requeued.
    #[arg(long)]
    pub checkpointable: bool,
    /// How long it is expected to run, seconds.
    #[arg(long, value_name = "SECONDS")]
    pub expected_duration: Option<u32>,
    /// Target latency of a request, ms (real-time inference).
    #[arg(long, value_name = "MS")]
    pub latency_ms: Option<u32>,
    /// When the work must be done (RFC 3339, e.g. 2026-12-01T06:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub deadline: Option<String>,
    /// An environment variable for the workload, NAME=VALUE (repeatable).
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE", value_parser = crate::units::parse_env)]
    pub env: Vec<(String, String)>,
    /// Run it in this OCI image (the command after `--` is then the image's arguments).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Makes a retry safe: the same key returns the workload the first submission created. A random
    /// one per invocation when absent.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The API's workload classes, as the API spells them (a unit test keeps the list complete).
pub const CLASSES: [&str; 7] =
    ["realtime_inference", "batch_inference", "training", "fine_tuning", "quantization", "embeddings", "evaluation"];

/// A value of one of the protocol's enums, by its name on the wire: the flag offers exactly the
/// names the API takes, and the value is the protocol's own type.
fn wire_enum<T>(names: impl IntoIterator<Item = &'static str>) -> impl TypedValueParser<Value = T>
where
    T: serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).try_map(|name| serde_json::from_value::<T>(serde_json::Value::String(name)))
}

fn class_parser() -> impl TypedValueParser<Value = WorkloadClass> {
    wire_enum(CLASSES)
}

fn state_parser() -> impl TypedValueParser<Value = WorkloadState> {
    wire_enum(WorkloadState::ALL.map(WorkloadState::as_str))
}

fn stream_parser() -> impl TypedValueParser<Value = LogStream> {
    wire_enum(["stdout", "stderr"])
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_parser = state_parser())]
    pub state: Option<WorkloadState>,
    #[arg(long, value_parser = class_parser())]
    pub class: Option<WorkloadClass>,
    /// A tenant, by name (platform admins).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Workloads on this node (its id).
    #[arg(long, value_name = "ID")]
    pub node: Option<String>,
    /// A service's replicas (its id).
    #[arg(long, value_name = "ID")]
    pub service: Option<String>,
    /// At most this many (the API's default is 100, its most 1000).
    #[arg(long)]
    pub limit: Option<u32>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Workload id.
    pub id: String,
    /// Follow the output as it comes, until the workload has ended.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines (at most 10,000).
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
    /// One attempt (1, 2, …); every attempt when absent.
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// One stream; both when absent (stderr's lines go to standard error).
    #[arg(long, value_parser = stream_parser())]
    pub stream: Option<LogStream>,
}

/// A policy, by id or by name (a name must be unambiguous among the policies the caller sees).
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// The platform's policies and the caller's tenant's own.
    List,
    /// One policy with its versions.
    Get { policy: String },
    /// Upload a module as the next version of a policy (named after the file unless --name).
    Push {
        /// The `.wasm` module.
        file: PathBuf,
        /// The policy's name: lowercase letters, digits and '-'.
        #[arg(long)]
        name: Option<String>,
    },
    /// What a policy would decide on the live fleet now; nothing is applied (platform admins).
    DryRun {
        /// A stored policy; or --file for a module that is not stored.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        policy: Option<String>,
        /// A `.wasm` module to try without storing it.
        #[arg(long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        version: VersionArgs,
    },
    /// Make a version (the latest by default) the one that decides.
    Activate {
        policy: String,
        #[command(flatten)]
        version: VersionArgs,
    },
    /// Stop a tenant's own policy deciding (the platform's decides its work again).
    Deactivate { policy: String },
    /// Activate the version before the active one.
    Rollback { policy: String },
    /// Evaluate a version beside the active policy every cycle, never applied; --stop ends it,
    /// --results shows how they compared.
    Shadow {
        policy: String,
        #[command(flatten)]
        version: VersionArgs,
        #[arg(long, conflicts_with = "results")]
        stop: bool,
        #[arg(long)]
        results: bool,
    },
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    /// The version; the latest when absent.
    #[arg(long)]
    pub version: Option<i32>,
    /// The policy's parameters: a JSON object, or @FILE.
    #[arg(long, value_name = "JSON")]
    pub params: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum PriorityCommand {
    /// The current settings.
    Get,
    /// Change some settings (the others keep their values; platform admins).
    Set(PrioritySetArgs),
}

#[derive(Debug, Args)]
pub struct PrioritySetArgs {
    /// GPUs kept free for real-time inference bursts.
    #[arg(long)]
    pub burst_reserve_gpus: Option<i32>,
    /// Customer-facing inference outranks internal training.
    #[arg(long, value_name = "BOOL")]
    pub realtime_first: Option<bool>,
    /// Seconds a workload runs before it may be preempted.
    #[arg(long)]
    pub min_runtime_s: Option<i32>,
    /// Seconds between SIGTERM and SIGKILL.
    #[arg(long)]
    pub grace_period_s: Option<i32>,
    /// Most preemptions of one workload in an hour.
    #[arg(long)]
    pub max_preemptions_per_hour: Option<i32>,
    /// Only checkpointable work may be preempted.
    #[arg(long, value_name = "BOOL")]
    pub checkpointable_only: Option<bool>,
    /// Priority added to training in the night window.
    #[arg(long, allow_hyphen_values = true)]
    pub night_training_bonus: Option<i32>,
    /// The night window's first hour, UTC.
    #[arg(long)]
    pub night_start_hour: Option<i32>,
    /// The night window's end hour, UTC.
    #[arg(long)]
    pub night_end_hour: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_class_names_are_the_protocols() {
        let names: Vec<WorkloadClass> =
            CLASSES.iter().map(|n| serde_json::from_value(serde_json::Value::String((*n).into())).unwrap()).collect();
        assert_eq!(names, WorkloadClass::ALL);
    }

    #[test]
    fn a_submission_takes_its_command_after_the_double_dash() {
        let cli = Cli::try_parse_from([
            "airtime",
            "submit",
            "--name",
            "n",
            "--class",
            "fine_tuning",
            "--cpu",
            "500m",
            "--priority",
            "-5",
            "--",
            "sh",
            "-c",
            "echo --hi",
        ])
        .unwrap();
        let Command::Submit(s) = cli.command else { panic!("not submit") };
        assert_eq!(s.class, Some(WorkloadClass::FineTuning));
        assert_eq!(s.cpu, Some(500));
        assert_eq!(s.priority, Some(-5));
        assert_eq!(s.command, ["sh", "-c", "echo --hi"]);
        assert!(Cli::try_parse_from(["airtime", "submit", "--name", "n", "--class", "gaming"]).is_err());
        assert!(Cli::try_parse_from(["airtime", "submit", "--name", "n"]).is_err(), "a class or a file");
    }
}
