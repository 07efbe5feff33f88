//! The seam between the runner and the kinds of work it runs.
//!
//! The runner owns an attempt's life once for every kind: its GPU placement, its state directory
//! and record, its output spool and tails, its supervision (waiting for the end, the grace period,
//! the report of how it ended), and its adoption by the next agent process. An [`Executor`] owns
//! what differs between kinds: the command that starts an attempt, how a started or recorded one
//! is stopped, killed and cleared ([`Execution`]), and what earlier agents left of its kind.
//! Two exist: [`Processes`](super::process::Processes), the command itself under its tether, and
//! [`Containers`](super::container::Containers), the container engine's `run` client under its
//! tether, the container stopped and removed through the engine.
//!
//! Every attempt is a local process that leads its own process group — the tether, or the command
//! or engine client when untethered — which the runner waits for (as its child, or through `/proc`
//! and the tether's exit file once adopted). An executor for work that runs elsewhere (a
//! Kubernetes pod) plugs in the same way: its command is the client that lives as long as the pod
//! does, its [`Execution`] stops and deletes the pod through the cluster's API.
//!
//! What the executors share — the tether's arguments, the workload's identity and the agent's
//! variables that must not reach it — is here.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;
use uuid::Uuid;

use super::records::Record;
use super::{RunningWorkload, SpawnError, WorkloadSpec};
use crate::isolation::UidPool;
use crate::telemetry::{Accelerator, Placement};
use crate::tether::Orphaned;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How long what an earlier agent left running gets to exit after SIGTERM before SIGKILL: its own
/// grace period is unknown.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(10);

/// One kind of work this node runs.
pub trait Executor: Send + Sync {
    /// The command whose process is `launch.spec`'s attempt on this node, not yet spawned: the
    /// runner gives it its output and process group, spawns it, records it and supervises it.
    /// What the attempt leaves to clear when it ends goes in `launch.cleanup`.
    fn launch(&self, launch: &mut Launch<'_>) -> Result<Launched, SpawnError>;

    /// Control of the attempt `record` names, whose process leads group `record.pid`: one this
    /// executor started, or one an earlier agent process recorded.
    fn attach(&self, record: &Record) -> Arc<dyn Execution>;

    /// Ends what earlier agents of node `node_name` left running of this kind that `adopted` does
    /// not account for (stopped with [`LEFTOVER_GRACE`]), and says what each was.
    fn end_leftovers<'a>(&'a self, node_name: &'a str, adopted: &'a [RunningWorkload]) -> BoxFuture<'a, Vec<Leftover>>;
}

/// One attempt's control, from when it is started or adopted until the runner reports its end.
pub trait Execution: Send + Sync {
    /// Asks it to stop: SIGTERM (the checkpoint signal) now, SIGKILL after `grace`. Returns how
    /// long from now the runner waits before it [kills](Execution::kill) it.
    fn stop(&self, grace: Duration) -> Duration;

    /// Ends it now (SIGKILL).
    fn kill(&self);

    /// Clears what is left once its process has ended: what it started in its process group,
    /// what stands for it elsewhere.
    fn clear(&self) -> BoxFuture<'_, ()>;

    /// Why it ended with `exit_code` when the code is the executor's own rather than the
    /// workload's, from the last line it wrote on stderr.
    fn failure(&self, exit_code: i32, last_stderr: Option<&str>) -> Option<String>;
}

/// Something an earlier agent left running, which this one ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub workload_id: Uuid,
    pub attempt: u32,
    /// Why its attempt ended, as its `exited` event says.
    pub message: String,
}

/// What the executors launch with, whatever the kind: the node's name and directories, and the
/// tether.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    /// Where workloads run (each in a directory of its own when run as a user of their own).
    pub work_dir: PathBuf,
    /// Where the agent keeps workloads' environment files: a directory only it can read.
    pub private_dir: PathBuf,
    /// The agent's own binary, which runs each workload tethered (`crate::tether`), and what a
    /// tether does when the agent is gone. `None` (an agent run as a library, in tests): workloads
    /// are the agent's children alone and die with its runtime.
    pub tether: Option<(PathBuf, Orphaned)>,
}

/// One attempt to launch.
pub struct Launch<'a> {
    pub spec: &'a WorkloadSpec,
    /// Its name on this node: its container's, its environment file's.
    pub name: &'a str,
    /// Its environment so far: the assignment's own variables, less those the agent owns, then
    /// Airtime's GPU share and mode. The executor adds its GPUs' and the workload's identity.
    pub env: Vec<(String, String)>,
    pub gpus: Placement<'a>,
    pub accelerator: &'a dyn Accelerator,
    pub node: &'a Node,
    /// Where its tether writes how it ended.
    pub exit_file: PathBuf,
    /// The uids of the process-user range, for a workload that runs as one.
    pub uids: &'a mut UidPool,
    pub cleanup: &'a mut super::Cleanup,
}

impl Launch<'_> {
    /// What the workload's own process sees of its identity; a later agent recognises the
    /// process by these if this one dies first (`orphans`).
    pub fn identity(&self) -> [(&'static str, String); 3] {
        [
            ("AIRTIME_WORKLOAD_ID", self.spec.workload_id.to_string()),
            ("AIRTIME_ATTEMPT", self.spec.attempt.to_string()),
            ("AIRTIME_NODE_NAME", self.node.name.clone()),
        ]
    }

    /// [`Launch::identity`] and the agent that started it: what the attempt's own process (its
    /// tether, its command or client) carries.
    pub fn identity_and_agent(&self) -> Vec<(&'static str, String)> {
        let mut vars = self.identity().to_vec();
        vars.push(("AIRTIME_AGENT_PID", std::process::id().to_string()));
        vars
    }

    /// Removes from a command's environment what the agent inherited and a workload must not:
    /// its configuration (`AIRTIME_…`: its enrolment token, control plane, state directory) and
    /// its settings of the vendor's runtime (MPS's). A workload gets only the AIRTIME_ variables
    /// set for it.
    pub fn strip_agent_variables(&self, command: &mut Command) {
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("AIRTIME_") || self.accelerator.is_agent_setting(n)) {
                command.env_remove(name);
            }
        }
    }
}

/// What an executor launches.
pub struct Launched {
    pub command: Command,
    /// What starts, for errors: the program, or `<engine> run <image>`.
    pub program: String,
    /// Its output is captured whatever the agent's output mode: its executor reads its errors
    /// there ([`Execution::failure`]).
    pub captures_output: bool,
    /// Its container's name, for the record.
    pub container: Option<String>,
}
