//! Container workloads: the node's engine ([`crate::containers`]) runs the image, its `run`
//! client in the foreground under the workload's tether.
//!
//! The container's environment — the workload's own, its GPUs' as the accelerator gives them to
//! a container, its identity — reaches the engine as a file only the engine reads: never on the
//! client's own environment, where `LD_PRELOAD` or `PATH` would steer the host. The client (and
//! its tether) run with a fixed environment and the workload's identity. A stop goes through the
//! engine (`stop --time ⌈grace⌉`), and the container is removed (`rm --force`) if that has not
//! ended it [`CONTAINER_KILL_MARGIN`] after the grace period, and after every exit: signalling
//! the client alone would leave the container running. The engine's own exit codes (125–127) are
//! reported with the client's last line on stderr. Leftovers are the containers labelled with
//! this node that no adopted attempt runs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Command;

use super::executor::{BoxFuture, Execution, Executor, LEFTOVER_GRACE, Launch, Launched, Leftover};
use super::process::ProcessGroup;
use super::records::Record;
use super::{ResolvedMount, RunningWorkload, SpawnError};
use crate::containers::{Engine, RunRequest, container_name};
use crate::isolation::engine_environment;

/// How long after a container's grace period the agent removes it itself, if the engine's own
/// stop has not ended it by then.
const CONTAINER_KILL_MARGIN: Duration = Duration::from_secs(5);

/// Runs container workloads with the node's engine.
#[derive(Debug, Clone)]
pub struct Containers {
    engine: Arc<Engine>,
    /// The host directories containers may mount (the node's `--container-mount-prefix`; empty:
    /// those the control plane allowed, still resolved without symbolic links).
    mount_prefixes: Vec<std::path::PathBuf>,
}

impl Containers {
    pub fn new(engine: Arc<Engine>, mount_prefixes: Vec<std::path::PathBuf>) -> Self {
        Self { engine, mount_prefixes }
    }
}

impl Executor for Containers {
    fn launch(&self, l: &mut Launch<'_>) -> Result<Launched, SpawnError> {
        let spec = l.spec;
        let Some(image) = &spec.container else {
            return Err(SpawnError::NotAccepted("a process workload is not a container".into()));
        };
        let mounts = image
            .mounts
            .iter()
            .map(|m| {
                crate::isolation::check_mount_target(&m.target)?;
                let source = crate::isolation::resolve_mount_source(&m.source, &self.mount_prefixes)?;
                Ok(ResolvedMount { source, target: m.target.clone(), read_only: m.read_only })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(SpawnError::NotAccepted)?;
        let gpus = l.accelerator.container_access(&l.gpus);
        let mut vars = std::mem::take(&mut l.env);
        vars.extend(gpus.env.iter().cloned());
        vars.extend(l.identity().into_iter().map(|(k, v)| (k.to_owned(), v)));
        let env_file = crate::isolation::write_engine_env_file(&l.node.private_dir, &format!("{}.env", l.name), &vars)
            .map_err(SpawnError::NotAccepted)?;
        l.cleanup.files.push(env_file.clone());
        let request = RunRequest {
            workload_id: spec.workload_id,
            attempt: spec.attempt,
            node_name: &l.node.name,
            container: image,
            mounts: &mounts,
            args: &spec.command,
            env_file: &env_file,
            gpus: &gpus,
            cpu_millis: spec.cpu_millis,
            memory_mb: spec.memory_mb,
        };
        let argv = self.engine.run_argv(&request);
        let mut command = match l.node.tether.clone() {
            Some((binary, orphaned)) => {
                let launch = crate::tether::Launch {
                    orphaned,
                    exit_file: Some(l.exit_file.clone()),
                    ..crate::tether::Launch::default()
                };
                let mut command = Command::new(binary);
                command.args(crate::tether::arguments(std::process::id(), spec.grace_period, &launch, argv));
                command
            }
            None => {
                let mut argv = argv.into_iter();
                let mut command = Command::new(argv.next().unwrap_or_default());
                command.args(argv);
                command
            }
        };
        // The engine client (and its tether) run with a fixed environment and the workload's
        // identity, nothing of the workload's own.
        command.env_clear().envs(engine_environment());
        command.envs(l.identity_and_agent().iter().map(|(k, v)| (*k, v.as_str())));
        command.current_dir(&l.node.work_dir);
        Ok(Launched {
            command,
            program: format!("{} run {}", self.engine.kind.as_str(), image.image),
            // The engine's errors are told on stderr.
            captures_output: true,
            container: Some(l.name.to_owned()),
        })
    }

    fn attach(&self, record: &Record) -> Arc<dyn Execution> {
        let name = record.container.clone().unwrap_or_else(|| container_name(record.workload_id, record.attempt));
        Arc::new(Container { engine: Arc::clone(&self.engine), name, client: ProcessGroup::of(record.pid) })
    }

    fn end_leftovers<'a>(&'a self, node_name: &'a str, adopted: &'a [RunningWorkload]) -> BoxFuture<'a, Vec<Leftover>> {
        Box::pin(async move {
            let adopted: HashSet<String> = adopted.iter().map(|w| container_name(w.workload_id, w.attempt)).collect();
            let ended = self.engine.end_leftovers(node_name, &adopted, LEFTOVER_GRACE).await;
            ended
                .into_iter()
                .map(|(workload_id, attempt)| Leftover {
                    workload_id,
                    attempt,
                    message: "stopped: its container was left running by an earlier node agent process".to_owned(),
                })
                .collect()
        })
    }
}

/// A container workload's container, and the engine client's process group that stands for it.
struct Container {
    engine: Arc<Engine>,
    name: String,
    client: ProcessGroup,
}

impl Container {
    /// Removes the container whatever it is doing, in the background.
    fn remove_soon(&self) {
        let (engine, name) = (Arc::clone(&self.engine), self.name.clone());
        tokio::spawn(async move {
            if let Err(why) = engine.remove(&name).await {
                tracing::warn!(container = %name, %why, "cannot remove the container");
            }
        });
    }
}

impl Execution for Container {
    /// The engine sends SIGTERM, then SIGKILL after the grace period; the agent removes the
    /// container itself if that has not ended it shortly after.
    fn stop(&self, grace: Duration) -> Duration {
        let (engine, name) = (Arc::clone(&self.engine), self.name.clone());
        tokio::spawn(async move {
            if let Err(why) = engine.stop(&name, grace).await {
                tracing::warn!(container = %name, %why, "cannot stop the container");
            }
        });
        grace + CONTAINER_KILL_MARGIN
    }

    fn kill(&self) {
        self.remove_soon();
        self.client.signal(Signal::SIGKILL);
    }

    fn clear(&self) -> BoxFuture<'_, ()> {
        self.client.signal(Signal::SIGKILL);
        // `run --rm` removes a container that ended; one whose client died first is removed here.
        Box::pin(async move {
            if let Err(why) = self.engine.remove(&self.name).await {
                tracing::warn!(container = %self.name, %why, "cannot remove the container");
            }
        })
    }

    /// A container that could not be run (no such image, a pull that failed): the engine's word.
    fn failure(&self, exit_code: i32, last_stderr: Option<&str>) -> Option<String> {
        crate::containers::engine_exit_reason(exit_code, last_stderr)
    }
}
