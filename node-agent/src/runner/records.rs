//! What the agent keeps on disk of each attempt it runs, so that the next agent process can adopt
//! it: `<state>/workloads/<name>/record.json` beside the attempt's output spool and, once the
//! workload has ended, the exit its tether wrote. The record names the process (its pid and
//! the kernel's start time for it, so a reused pid is never taken for the workload), the GPUs
//! and share it holds, its grace period, its container and its uid: everything the runner
//! tracks of a workload it started, so an adopted workload is supervised, stopped, reported and
//! cleared exactly as one it started. The directory goes when the workload's exit is reaped.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One attempt, as the agent that started it recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub workload_id: Uuid,
    pub attempt: u32,
    /// The workload's main process (its tether), the leader of its process group.
    pub pid: u32,
    /// The kernel's start time of `pid` (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub pid_started: u64,
    /// When it started, ms on `CLOCK_BOOTTIME` (its runtime counts from there).
    pub started_boot_ms: u64,
    pub gpu_indices: Vec<u32>,
    pub gpu_milli: u32,
    pub gpu_memory_mb: Option<u64>,
    pub simulated_busy_milli: Option<u32>,
    pub grace_period_ms: u64,
    /// Its container's name, for a container workload.
    pub container: Option<String>,
    /// The uid it runs as, from the process-user range.
    pub uid: Option<u32>,
    /// Its own directory under the work directory, removed when it ends.
    pub work_dir: Option<PathBuf>,
    /// Whether its output is spooled (captured output); otherwise it goes where the agent's went.
    pub spooled: bool,
    /// A serving replica: the port the agent gave it and the endpoints it reads there (absent in
    /// records of agents before protocol 1.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServeRecord>,
}

/// Where a serving replica answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeRecord {
    pub port: u16,
    pub endpoints: airtime_protocol::serving::ServingEndpoints,
}

const RECORD: &str = "record.json";

/// The file its tether writes the exit to.
pub fn exit_file(dir: &Path) -> PathBuf {
    dir.join("exit")
}

/// Writes `record` into its attempt's directory (whole, then renamed into place).
pub fn write(dir: &Path, record: &Record) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
    let partial = dir.join("record.partial");
    std::fs::write(&partial, json)?;
    std::fs::rename(&partial, dir.join(RECORD))
}

/// Every attempt directory under `workloads` with the record in it; a directory without a
/// readable record (an attempt that failed to start, a crash mid-write) is removed.
pub fn read_all(workloads: &Path) -> Vec<(PathBuf, Record)> {
    let Ok(entries) = std::fs::read_dir(workloads) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for dir in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        match std::fs::read(dir.join(RECORD)).ok().and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok()) {
            Some(record) => found.push((dir, record)),
            None => {
                tracing::warn!(dir = %dir.display(), "an attempt directory without a readable record; removing it");
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    found
}

/// The kernel's start time of `pid` while it runs (`None`: gone, or a zombie).
pub fn process_started(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); start time is field 22.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the process a record names still runs (the same process: not a reused pid).
pub fn alive(record: &Record) -> bool {
    process_started(record.pid) == Some(record.pid_started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_names_a_live_process_only_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let attempt = dir.path().join("airtime-x-1");
        std::fs::create_dir(&attempt).unwrap();
        std::fs::create_dir(dir.path().join("half-written")).unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let record = Record {
            workload_id: Uuid::new_v4(),
            attempt: 1,
            pid: child.id(),
            pid_started: process_started(child.id()).unwrap(),
            started_boot_ms: 1,
            gpu_indices: vec![0, 1],
            gpu_milli: 1000,
            gpu_memory_mb: None,
            simulated_busy_milli: Some(500),
            grace_period_ms: 3000,
            container: None,
            uid: Some(61000),
            work_dir: None,
            spooled: true,
            serving: None,
        };
        write(&attempt, &record).unwrap();
        let found = read_all(dir.path());
        assert_eq!(found, vec![(attempt.clone(), record.clone())]);
        assert!(!dir.path().join("half-written").exists(), "a directory without a record is cleared");
        assert!(alive(&record));
        assert!(!alive(&Record { pid_started: record.pid_started + 1, ..record.clone() }), "a reused pid");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive(&record));
    }
}
