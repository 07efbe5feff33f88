//! Process workloads: the command itself, in its own process group, under its tether.
//!
//! The command runs under the agent's binary: as a tether ([`crate::tether`]) that outlives the
//! agent while the node's lease lasts, or, untethered, as a launcher that only drops to the
//! workload's user. Its environment reaches the tether as a file only the agent can read, which
//! the tether applies to the command alone; without either, the command is the agent's child and
//! gets its environment directly. Stopping it is signalling its process group: SIGTERM, SIGKILL
//! after the grace period, and after its exit SIGKILL for whatever it left in the group. A
//! process that leaves its group (`setsid`) escapes this. Leftovers are the orphans of earlier
//! agents ([`super::orphans`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::Command;

use super::executor::{BoxFuture, Execution, Executor, LEFTOVER_GRACE, Launch, Launched, Leftover};
use super::records::Record;
use super::{RunningWorkload, SpawnError, orphans, signal_group};
use crate::isolation::ProcessUser;
use crate::tether::Orphaned;

/// Runs process workloads.
#[derive(Debug, Clone)]
pub struct Processes {
    /// The agent's own binary as a launcher when the workload is not tethered: it reads the
    /// workload's environment file and drops to its user.
    pub launcher: Option<PathBuf>,
    /// Who process workloads run as.
    pub user: ProcessUser,
}

impl Default for Processes {
    /// Commands run as the agent's own user, as its children (no launcher).
    fn default() -> Self {
        Self { launcher: None, user: ProcessUser::Agent }
    }
}

impl Executor for Processes {
    fn launch(&self, l: &mut Launch<'_>) -> Result<Launched, SpawnError> {
        let spec = l.spec;
        let (program, args) = spec.command.split_first().ok_or(SpawnError::EmptyCommand)?;
        let mut vars = std::mem::take(&mut l.env);
        vars.extend(l.accelerator.process_environment(&l.gpus));
        let own = l.identity_and_agent();
        vars.extend(own.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        // What the command will search: the assignment's PATH, else the agent's.
        let search_path = spec.env.get("PATH").map(OsString::from).or_else(|| std::env::var_os("PATH"));
        let launcher = l.node.tether.clone().map(|(b, orphaned)| (b, std::process::id(), orphaned)).or_else(|| {
            self.launcher.clone().filter(|_| self.user != ProcessUser::Agent).map(|b| (b, 0, Orphaned::Fence))
        });
        let work_dir = &l.node.work_dir;
        let command = match launcher {
            Some((binary, tethered_to, orphaned)) => {
                crate::tether::check_program(program.as_ref(), search_path.as_deref(), work_dir)
                    .map_err(|source| SpawnError::Io { program: program.clone(), source })?;
                let user = l.uids.take(&self.user).map_err(SpawnError::NotAccepted)?;
                let mut dir = work_dir.clone();
                if let Some((uid, gid)) = user {
                    l.cleanup.uid = Some(uid);
                    dir = crate::isolation::workload_dir(work_dir, l.name, uid, gid)
                        .map_err(|e| SpawnError::Io { program: program.clone(), source: e })?;
                    l.cleanup.dir = Some(dir.clone());
                    // Its home is its own directory, unless its env says otherwise.
                    vars.insert(0, ("HOME".into(), dir.display().to_string()));
                }
                // The environment goes to the tether as data: the tether is the agent's binary
                // (root, maybe) and applies it to the command alone.
                let file =
                    crate::isolation::write_tether_env_file(&l.node.private_dir, &format!("{}.env", l.name), &vars)
                        .map_err(SpawnError::NotAccepted)?;
                l.cleanup.files.push(file.clone());
                let launch = crate::tether::Launch {
                    env_file: Some(file),
                    user,
                    orphaned,
                    exit_file: Some(l.exit_file.clone()),
                };
                let argv = spec.command.iter().map(OsString::from);
                let mut command = Command::new(binary);
                command.args(crate::tether::arguments(tethered_to, spec.grace_period, &launch, argv));
                command.current_dir(dir);
                l.strip_agent_variables(&mut command);
                // The tether carries the identity, so a later agent finds it.
                command.envs(own.iter().map(|(k, v)| (*k, v.as_str())));
                command
            }
            None => {
                // The command itself is the workload's process: its env is its own.
                let mut command = Command::new(program);
                command.args(args).current_dir(work_dir);
                l.strip_agent_variables(&mut command);
                command.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                command
            }
        };
        Ok(Launched { command, program: program.clone(), captures_output: false, container: None })
    }

    fn attach(&self, record: &Record) -> Arc<dyn Execution> {
        Arc::new(ProcessGroup::of(record.pid))
    }

    fn end_leftovers<'a>(&'a self, node_name: &'a str, adopted: &'a [RunningWorkload]) -> BoxFuture<'a, Vec<Leftover>> {
        Box::pin(async move {
            let adopted: HashSet<u32> = adopted.iter().map(|w| w.pid).collect();
            let found: Vec<orphans::Orphan> =
                orphans::find(node_name).into_iter().filter(|o| !adopted.contains(&o.pid)).collect();
            orphans::end(&found, LEFTOVER_GRACE).await;
            found
                .into_iter()
                .map(|orphan| Leftover {
                    workload_id: orphan.workload_id,
                    attempt: orphan.attempt,
                    message: format!(
                        "stopped: left running by an earlier node agent process (pid {}) that ended without stopping it",
                        orphan.agent_pid
                    ),
                })
                .collect()
        })
    }
}

/// A process workload's process group, led by its main process.
#[derive(Debug, Clone, Copy)]
pub struct ProcessGroup(Pid);

impl ProcessGroup {
    pub fn of(pid: u32) -> Self {
        Self(Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)))
    }

    pub fn signal(self, signal: Signal) {
        signal_group(self.0, signal);
    }
}

impl Execution for ProcessGroup {
    fn stop(&self, grace: Duration) -> Duration {
        self.signal(Signal::SIGTERM);
        grace
    }

    fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }

    fn clear(&self) -> BoxFuture<'_, ()> {
        // Whatever the workload left running in its group goes with it.
        self.signal(Signal::SIGKILL);
        Box::pin(std::future::ready(()))
    }

    fn failure(&self, _exit_code: i32, _last_stderr: Option<&str>) -> Option<String> {
        None
    }
}
