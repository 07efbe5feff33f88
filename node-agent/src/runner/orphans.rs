//! Workloads left running by an earlier agent process that ended without stopping them (killed,
//! crashed, OOM). Workloads live no longer than their agent, so a starting agent ends them before
//! it reports anything; otherwise the desired state would start a second copy next to the first.
//!
//! A workload process is recognised by the variables the runner gives it: `AIRTIME_NODE_NAME`
//! (this node's name), `AIRTIME_AGENT_PID` (the agent that started it), `AIRTIME_WORKLOAD_ID` and
//! `AIRTIME_ATTEMPT`. It is an orphan when it still leads its own process group (it is the main
//! process — its tether, or the command itself when untethered — not something it started) and
//! its parent is no longer the agent that started it; or, when its group's leader is gone, when
//! the agent that started it is gone too (what a leader that died first left behind). An orphan
//! is named by its process group, once per group.
//! Workloads of a live agent, and of other nodes' agents on the same host, are never touched.
//! Linux only: it reads `/proc`.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::time::{Instant, sleep};
use uuid::Uuid;

use super::signal_group;
use crate::procfs::parent_and_group;

/// A workload's process group found running without its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The process group (its leader's pid, even when the leader is gone).
    pub pid: u32,
    pub workload_id: Uuid,
    pub attempt: u32,
    /// The agent process that started it and is gone.
    pub agent_pid: u32,
}

/// Lists this node's orphaned workloads.
pub fn find(node_name: &str) -> Vec<Orphan> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| orphan(pid, node_name))
        .fold(Vec::new(), |mut found: Vec<Orphan>, o| {
            if !found.iter().any(|f| f.pid == o.pid) {
                found.push(o);
            }
            found
        })
}

fn orphan(pid: u32, node_name: &str) -> Option<Orphan> {
    // Unreadable for other users' processes: those are not ours anyway.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let vars: HashMap<&[u8], &[u8]> = environ
        .split(|b| *b == 0)
        .filter_map(|var| {
            let eq = var.iter().position(|b| *b == b'=')?;
            Some((&var[..eq], &var[eq + 1..]))
        })
        .collect();
    let text = |key: &str| std::str::from_utf8(vars.get(key.as_bytes())?).ok();
    if text("AIRTIME_NODE_NAME")? != node_name {
        return None;
    }
    let workload_id = text("AIRTIME_WORKLOAD_ID")?.parse().ok()?;
    let attempt = text("AIRTIME_ATTEMPT")?.parse().ok()?;
    let agent_pid: u32 = text("AIRTIME_AGENT_PID")?.parse().ok()?;
    let (parent, group) = parent_and_group(pid)?;
    let orphaned = if group == pid { parent != agent_pid } else { !running(group) && !running(agent_pid) };
    orphaned.then_some(Orphan { pid: group, workload_id, attempt, agent_pid })
}

fn running(pid: u32) -> bool {
    parent_and_group(pid).is_some()
}

/// Ends the orphans' process groups: SIGTERM, then SIGKILL for whatever is left after `grace`.
pub async fn end(orphans: &[Orphan], grace: Duration) {
    if orphans.is_empty() {
        return;
    }
    let group = |o: &Orphan| Pid::from_raw(i32::try_from(o.pid).unwrap_or(i32::MAX));
    for orphan in orphans {
        tracing::warn!(
            pid = orphan.pid,
            workload_id = %orphan.workload_id,
            attempt = orphan.attempt,
            agent_pid = orphan.agent_pid,
            "stopping a workload left running by an earlier agent process"
        );
        signal_group(group(orphan), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    // Signal 0 to a group: does any process of it remain?
    let group_alive = |o: &Orphan| nix::sys::signal::killpg(group(o), None).is_ok();
    while orphans.iter().any(group_alive) && Instant::now() < deadline {
        sleep(Duration::from_millis(50)).await;
    }
    for orphan in orphans {
        // Also reaches what the orphan started, even when the orphan itself has exited.
        signal_group(group(orphan), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    use std::process::{Command, Stdio};

    fn workload_like(node_name: &str, agent_pid: u32, script: &str) -> std::io::Result<std::process::Child> {
        Command::new("sh")
            .args(["-c", script])
            .env("AIRTIME_NODE_NAME", node_name)
            .env("AIRTIME_AGENT_PID", agent_pid.to_string())
            .env("AIRTIME_WORKLOAD_ID", "0190a6a4-0000-7000-8000-000000000001")
            .env("AIRTIME_ATTEMPT", "2")
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
    }

    #[tokio::test]
    async fn finds_and_ends_only_this_nodes_orphans() -> std::io::Result<()> {
        let node = format!("orphan-test-{}", Uuid::new_v4());
        let gone_agent = u32::MAX - 1;
        // Its recorded agent is not its parent (this test is): an orphan.
        let mut orphaned = workload_like(&node, gone_agent, "exec sleep 30")?;
        // Started by this process, which is alive: a live agent's workload.
        let mut adopted = workload_like(&node, std::process::id(), "exec sleep 30")?;
        // Another node's orphan.
        let mut other = workload_like("another-node", gone_agent, "exec sleep 30")?;

        let deadline = Instant::now() + Duration::from_secs(5);
        let found = loop {
            let found = find(&node);
            if !found.is_empty() || Instant::now() > deadline {
                break found;
            }
            sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(
            found,
            vec![Orphan {
                pid: orphaned.id(),
                workload_id: Uuid::from_u128(0x0190a6a4_0000_7000_8000_000000000001),
                attempt: 2,
                agent_pid: gone_agent,
            }]
        );

        end(&found, Duration::from_secs(5)).await;
        let status = orphaned.wait()?;
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
        assert!(find(&node).is_empty());

        for child in [&mut adopted, &mut other] {
            assert!(child.try_wait()?.is_none(), "a non-orphan was stopped");
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }
}
