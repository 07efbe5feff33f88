//! The node's container engine: Podman or Docker, found at start, driven through its command line.
//!
//! A container workload runs as `<engine> run --rm --name airtime-<workload>-<attempt> …` in the
//! foreground: the runner supervises that client process exactly as it supervises a workload
//! process (its stdout and stderr are the container's), and stops the container through the
//! engine (`stop --time`, then `rm --force`), never by signalling the client alone — a killed client
//! would leave the container running. Every container carries the labels `airtime.node`,
//! `airtime.workload` and `airtime.attempt`, so an agent that starts after one that died finds what
//! it left behind by label and ends it (workloads live no longer than their agent, as processes do).
//!
//! GPUs: what a container is given of them is the accelerator's
//! ([`crate::telemetry::Accelerator::container_access`]: for NVIDIA, `NVIDIA_VISIBLE_DEVICES` and
//! `CUDA_VISIBLE_DEVICES` in its environment); with the vendor's CDI specification on the node,
//! each GPU slot is injected as `--device <vendor>.com/gpu=<id>`, and an MPS client gets the
//! daemon's pipe directory bound in and `--ipc=host`. The workload's CPU and memory request become the
//! container's `--cpus` and `--memory`. The container's environment reaches the engine as data: an
//! `--env-file` the agent writes (mode 0600, in its private directory) and removes when the
//! container ends, so no value appears on a command line and none is ever set on the client's own
//! environment. The client runs with a fixed environment ([`crate::isolation::engine_environment`])
//! and is found in a fixed `PATH`. Mounts are `--mount type=bind,src=…,dst=…[,ro]` of sources
//! resolved on the node ([`crate::isolation::resolve_mount_source`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use uuid::Uuid;

use airtime_protocol::container::{ContainerEngine, ContainerSpec, EngineKind};

use crate::isolation::{engine_environment, find_program};
use crate::runner::ResolvedMount;
use crate::telemetry::ContainerAccess;

/// How the agent picks its engine (`--container-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// Podman if it answers, else Docker, else none.
    Auto,
    Podman,
    Docker,
    /// Run no container work.
    None,
}

/// When the engine pulls a workload's image (`--container-pull`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PullPolicy {
    /// Pull it when the node does not have it.
    Missing,
    /// Pull it before every start.
    Always,
    /// Never pull: the image must be on the node.
    Never,
}

impl PullPolicy {
    fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Missing => "missing",
            PullPolicy::Always => "always",
            PullPolicy::Never => "never",
        }
    }
}

/// Whether GPUs reach containers through CDI (`--container-cdi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CdiChoice {
    /// When the GPU vendor's CDI specification is found (NVIDIA's container toolkit writes one).
    Auto,
    On,
    Off,
}

/// The container settings of the agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerConfig {
    pub choice: EngineChoice,
    /// The engine's program; `podman` or `docker` on `PATH` when unset.
    pub program: Option<PathBuf>,
    /// Given to the engine before every subcommand (`--runtime=runc`, `--cgroup-manager=cgroupfs`).
    pub engine_args: Vec<String>,
    /// Added to every `run` (`--network=…`, `--security-opt=…`).
    pub run_args: Vec<String>,
    pub pull: PullPolicy,
    pub cdi: CdiChoice,
    /// Where CDI specifications are looked for.
    pub cdi_spec_dirs: Vec<PathBuf>,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            choice: EngineChoice::Auto,
            program: None,
            engine_args: Vec::new(),
            run_args: Vec::new(),
            pull: PullPolicy::Missing,
            cdi: CdiChoice::Auto,
            cdi_spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
        }
    }
}

/// How long an engine's management command (version, ps, stop, rm) may take.
const MANAGEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// A container engine that answered at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    pub kind: EngineKind,
    pub version: String,
    program: PathBuf,
    engine_args: Vec<String>,
    run_args: Vec<String>,
    pull: PullPolicy,
    cdi: bool,
}

/// A container to start: its name, and what goes on the engine's command line besides.
pub struct RunRequest<'a> {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub node_name: &'a str,
    pub container: &'a ContainerSpec,
    /// Its mounts, their sources resolved on the node.
    pub mounts: &'a [ResolvedMount],
    /// The image's arguments (the workload's `command`).
    pub args: &'a [String],
    /// The container's environment, one `NAME=value` a line, readable by the agent alone.
    pub env_file: &'a Path,
    /// Its GPUs: CDI devices, bind mounts, the host's IPC namespace (its environment is in
    /// `env_file` already).
    pub gpus: &'a ContainerAccess,
    pub cpu_millis: Option<u32>,
    pub memory_mb: Option<u64>,
}

/// The name of a workload attempt's container.
pub fn container_name(workload_id: Uuid, attempt: u32) -> String {
    format!("airtime-{workload_id}-{attempt}")
}

/// The workload and attempt a container's name encodes.
fn parse_container_name(name: &str) -> Option<(Uuid, u32)> {
    let rest = name.trim().trim_start_matches('/').strip_prefix("airtime-")?;
    let (id, attempt) = rest.rsplit_once('-')?;
    Some((id.parse().ok()?, attempt.parse().ok()?))
}

impl Engine {
    /// Finds the configured engine, and with `--container-cdi auto` whether the CDI specification
    /// of `cdi_vendor` (the node's GPUs') is installed. `Ok(None)`: the node runs no container work
    /// (`none`, or `auto` and neither engine answers). An engine named explicitly that does not
    /// answer is an error.
    pub async fn detect(config: &ContainerConfig, cdi_vendor: &str) -> Result<Option<Engine>, String> {
        let candidates: &[EngineKind] = match config.choice {
            EngineChoice::None => return Ok(None),
            EngineChoice::Auto => &[EngineKind::Podman, EngineKind::Docker],
            EngineChoice::Podman => &[EngineKind::Podman],
            EngineChoice::Docker => &[EngineKind::Docker],
        };
        let mut failures = Vec::new();
        for &kind in candidates {
            // Found in the fixed PATH, never the agent's or a workload's.
            let program = find_program(&config.program.clone().unwrap_or_else(|| PathBuf::from(kind.as_str())));
            let mut engine = Engine {
                kind,
                version: String::new(),
                program,
                engine_args: config.engine_args.clone(),
                run_args: config.run_args.clone(),
                pull: config.pull,
                cdi: false,
            };
            match engine.query_version().await {
                Ok(version) => {
                    engine.version = version;
                    engine.cdi = match config.cdi {
                        CdiChoice::On => true,
                        CdiChoice::Off => false,
                        CdiChoice::Auto => cdi_spec(&config.cdi_spec_dirs, cdi_vendor).is_some(),
                    };
                    return Ok(Some(engine));
                }
                Err(why) => failures.push(format!("{}: {why}", kind.as_str())),
            }
        }
        if config.choice == EngineChoice::Auto {
            tracing::info!(tried = %failures.join("; "), "no container engine answered: this node takes no container work");
            return Ok(None);
        }
        Err(failures.join("; "))
    }

    /// What the registration reports.
    pub fn describe(&self) -> ContainerEngine {
        ContainerEngine { kind: self.kind, version: self.version.clone(), cdi: self.cdi }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.env_clear().envs(engine_environment());
        command.args(&self.engine_args).stdin(Stdio::null()).kill_on_drop(true);
        command
    }

    async fn query_version(&self) -> Result<String, String> {
        let format = match self.kind {
            EngineKind::Podman => "{{.Client.Version}}",
            // Docker's client answers without a daemon; the server's version proves one is there.
            EngineKind::Docker => "{{.Server.Version}}",
        };
        let out = self.management(&["version", "--format", format]).await?;
        let version =
            out.trim().chars().take(airtime_protocol::container::MAX_ENGINE_VERSION_CHARS).collect::<String>();
        if version.is_empty() || version.chars().any(char::is_control) {
            return Err(format!("answered no version ({out:?})"));
        }
        Ok(version)
    }

    /// Runs a management subcommand and returns its stdout; an error says why, with its stderr.
    async fn management(&self, args: &[&str]) -> Result<String, String> {
        let mut command = self.command();
        command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = match tokio::time::timeout(MANAGEMENT_TIMEOUT, command.output()).await {
            Err(_) => {
                return Err(format!("`{}` did not answer within {} s", args.join(" "), MANAGEMENT_TIMEOUT.as_secs()));
            }
            Ok(Err(error)) => return Err(format!("cannot run {}: {error}", self.program.display())),
            Ok(Ok(output)) => output,
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            return Err(format!("`{}` failed ({}): {last}", args.join(" "), output.status));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The engine's `run` command line for a workload attempt, its program first: the caller
    /// runs it with [`engine_environment`] (under a tether, maybe) and supervises the process.
    pub fn run_argv(&self, request: &RunRequest<'_>) -> Vec<OsString> {
        let mut argv = vec![self.program.clone().into_os_string()];
        argv.extend(self.engine_args.iter().map(OsString::from));
        argv.extend(self.run_args_for(request).into_iter().map(OsString::from));
        argv
    }

    fn run_args_for(&self, r: &RunRequest<'_>) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "run".into(),
            "--rm".into(),
            format!("--name={}", container_name(r.workload_id, r.attempt)),
            format!("--label=airtime.node={}", r.node_name),
            format!("--label=airtime.workload={}", r.workload_id),
            format!("--label=airtime.attempt={}", r.attempt),
            format!("--pull={}", self.pull.as_str()),
        ];
        if let Some(cpu) = r.cpu_millis.filter(|&c| c > 0) {
            args.push(format!("--cpus={}.{:03}", cpu / 1000, cpu % 1000));
        }
        if let Some(memory) = r.memory_mb.filter(|&m| m > 0) {
            args.push(format!("--memory={memory}m"));
        }
        if self.cdi {
            args.extend(r.gpus.cdi_devices.iter().map(|device| format!("--device={device}")));
        }
        for bind in &r.gpus.binds {
            args.push(format!("--mount=type=bind,src={0},dst={0}", bind.display()));
        }
        if r.gpus.host_ipc {
            args.push("--ipc=host".into());
        }
        for mount in r.mounts {
            let mode = if mount.read_only { ",ro" } else { "" };
            args.push(format!("--mount=type=bind,src={},dst={}{mode}", mount.source.display(), mount.target));
        }
        if let Some(dir) = &r.container.working_dir {
            args.push(format!("--workdir={dir}"));
        }
        args.push(format!("--env-file={}", r.env_file.display()));
        args.extend(self.run_args.iter().cloned());
        let entrypoint = r.container.entrypoint.as_deref().unwrap_or(&[]);
        if let Some((program, rest)) = entrypoint.split_first() {
            args.push(format!("--entrypoint={program}"));
            args.push(r.container.image.clone());
            args.extend(rest.iter().cloned());
        } else {
            args.push(r.container.image.clone());
        }
        args.extend(r.args.iter().cloned());
        args
    }

    /// Asks the engine to stop the container: SIGTERM to its main process, SIGKILL after `grace`
    /// (rounded up to whole seconds, the engine's unit).
    pub async fn stop(&self, name: &str, grace: Duration) -> Result<(), String> {
        let seconds = grace.as_millis().div_ceil(1000).to_string();
        self.management(&["stop", "--time", &seconds, name]).await.map(drop)
    }

    /// Removes the container whatever it is doing (SIGKILL); a container already gone is fine.
    pub async fn remove(&self, name: &str) -> Result<(), String> {
        match self.management(&["rm", "--force", name]).await {
            Ok(_) => Ok(()),
            Err(why) if why.contains("no such container") || why.contains("No such container") => Ok(()),
            Err(why) => Err(why),
        }
    }

    /// The containers this node's agents started that still exist, as `(name, workload, attempt)`.
    pub async fn list_ours(&self, node_name: &str) -> Result<Vec<(String, Uuid, u32)>, String> {
        let filter = format!("label=airtime.node={node_name}");
        let out = self.management(&["ps", "--all", "--filter", &filter, "--format", "{{.Names}}"]).await?;
        Ok(out
            .lines()
            .filter_map(|name| {
                let (id, attempt) = parse_container_name(name)?;
                Some((name.trim().to_owned(), id, attempt))
            })
            .collect())
    }

    /// Ends the containers an earlier agent of this node left behind: stop with `grace`, then
    /// remove. Returns the workload attempts ended.
    pub async fn end_leftovers(
        &self,
        node_name: &str,
        adopted: &std::collections::HashSet<String>,
        grace: Duration,
    ) -> Vec<(Uuid, u32)> {
        let leftovers = match self.list_ours(node_name).await {
            Ok(list) => list,
            Err(why) => {
                tracing::warn!(%why, "cannot list the containers an earlier agent left");
                return Vec::new();
            }
        };
        let mut ended = Vec::new();
        for (name, workload_id, attempt) in leftovers.into_iter().filter(|(name, ..)| !adopted.contains(name)) {
            tracing::warn!(%workload_id, attempt, container = %name, "ending a container an earlier agent left running");
            if let Err(why) = self.stop(&name, grace).await {
                tracing::warn!(container = %name, %why, "cannot stop the container; removing it");
            }
            if let Err(why) = self.remove(&name).await {
                tracing::warn!(container = %name, %why, "cannot remove the container");
                continue;
            }
            ended.push((workload_id, attempt));
        }
        ended
    }
}

/// A GPU vendor's CDI specification, if one is installed (NVIDIA's `nvidia-ctk cdi generate`
/// writes `nvidia.yaml`; a JSON one is allowed too).
fn cdi_spec(dirs: &[PathBuf], vendor: &str) -> Option<PathBuf> {
    dirs.iter().flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten()).map(|e| e.path()).find(|path| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.starts_with(vendor) && (name.ends_with(".yaml") || name.ends_with(".json"))
    })
}

/// Why an engine's `run` ended the way it did, when the exit code is the engine's own (125: the
/// engine could not run the container; 126, 127: the command in the image cannot be run or found).
pub fn engine_exit_reason(code: i32, last_stderr: Option<&str>) -> Option<String> {
    let what = match code {
        125 => "the container engine could not run the container",
        126 => "the command in the image cannot be invoked",
        127 => "the command in the image was not found",
        _ => return None,
    };
    Some(match last_stderr.map(str::trim).filter(|l| !l.is_empty()) {
        Some(line) => format!("{what} (exit {code}): {line}"),
        None => format!("{what} (exit {code})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use airtime_protocol::container::Mount;

    fn engine(cdi: bool) -> Engine {
        Engine {
            kind: EngineKind::Podman,
            version: "4.3.1".into(),
            program: "podman".into(),
            engine_args: vec!["--runtime=runc".into()],
            run_args: vec!["--network=none".into()],
            pull: PullPolicy::Never,
            cdi,
        }
    }

    #[test]
    fn a_run_names_labels_limits_and_injects_the_gpus() {
        let id = Uuid::from_u128(7);
        let container = ContainerSpec {
            image: "localhost/eval:1".into(),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
            working_dir: Some("/work".into()),
            mounts: vec![Mount { source: "/data/set".into(), target: "/in".into(), read_only: true }],
        };
        let args = vec!["echo hi".to_owned()];
        let gpus = ContainerAccess {
            cdi_devices: vec!["nvidia.com/gpu=1".to_owned(), "nvidia.com/gpu=MIG-abc".to_owned()],
            ..ContainerAccess::default()
        };
        let mounts = [ResolvedMount { source: "/data/set".into(), target: "/in".into(), read_only: true }];
        let request = RunRequest {
            workload_id: id,
            attempt: 2,
            node_name: "gpu-1",
            container: &container,
            mounts: &mounts,
            args: &args,
            env_file: Path::new("/state/run/w.env"),
            gpus: &gpus,
            cpu_millis: Some(1500),
            memory_mb: Some(512),
        };
        let name = container_name(id, 2);
        assert_eq!(parse_container_name(&name), Some((id, 2)));
        assert_eq!(
            engine(true).run_args_for(&request),
            [
                "run",
                "--rm",
                &format!("--name={name}"),
                "--label=airtime.node=gpu-1",
                &format!("--label=airtime.workload={id}"),
                "--label=airtime.attempt=2",
                "--pull=never",
                "--cpus=1.500",
                "--memory=512m",
                "--device=nvidia.com/gpu=1",
                "--device=nvidia.com/gpu=MIG-abc",
                "--mount=type=bind,src=/data/set,dst=/in,ro",
                "--workdir=/work",
                "--env-file=/state/run/w.env",
                "--network=none",
                "--entrypoint=/bin/sh",
                "localhost/eval:1",
                "-c",
                "echo hi",
            ]
        );
        // Without CDI no device is injected; without an entrypoint the image comes right before its arguments.
        let plain = ContainerSpec { entrypoint: None, mounts: vec![], working_dir: None, ..container.clone() };
        let request = RunRequest { container: &plain, cpu_millis: None, memory_mb: None, mounts: &[], ..request };
        let args = engine(false).run_args_for(&request);
        assert!(!args.iter().any(|a| a.starts_with("--device") || a.starts_with("--cpus")), "{args:?}");
        assert_eq!(args[args.len() - 2..], ["localhost/eval:1".to_owned(), "echo hi".to_owned()]);
    }

    #[test]
    fn only_airtime_names_are_recognised() {
        assert_eq!(parse_container_name("other"), None);
        assert_eq!(parse_container_name("airtime-not-a-uuid-1"), None);
        let id = Uuid::from_u128(9);
        assert_eq!(parse_container_name(&format!("/airtime-{id}-12\n")), Some((id, 12)));
    }

    #[test]
    fn engine_exit_codes_say_why() {
        assert_eq!(
            engine_exit_reason(125, Some("Error: localhost/nope:1: image not known")).as_deref(),
            Some(
                "the container engine could not run the container (exit 125): Error: localhost/nope:1: image not known"
            )
        );
        assert_eq!(engine_exit_reason(3, Some("x")), None);
        assert!(engine_exit_reason(127, None).is_some_and(|m| m.contains("not found")));
    }

    #[test]
    fn the_cdi_spec_is_found_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(cdi_spec(&[dir.path().to_owned()], "nvidia"), None);
        std::fs::write(dir.path().join("nvidia.yaml"), "cdiVersion: 0.5.0\n").expect("write");
        assert!(cdi_spec(&[PathBuf::from("/nonexistent"), dir.path().to_owned()], "nvidia").is_some());
        assert_eq!(cdi_spec(&[dir.path().to_owned()], "amd"), None);
    }

    #[tokio::test]
    async fn an_engine_that_is_not_there_is_none_in_auto_and_an_error_when_named() {
        let config = ContainerConfig { program: Some("/nonexistent/engine".into()), ..ContainerConfig::default() };
        assert_eq!(Engine::detect(&config, "nvidia").await, Ok(None));
        let named = ContainerConfig { choice: EngineChoice::Podman, ..config };
        let error = Engine::detect(&named, "nvidia").await.expect_err("named engine missing");
        assert!(error.contains("podman: cannot run /nonexistent/engine"), "{error}");
    }
}
