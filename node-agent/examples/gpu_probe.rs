//! The device check for a machine with real GPUs: discovers the GPUs through NVML in each sharing
//! mode the agent offers (none, time-slicing, MPS, MIG) exactly as the agent does at start-up, prints
//! the inventory it would register (with the notes of modes the node cannot honour), then samples
//! telemetry twice — with `-- COMMAND…` given, while that command runs as a holder of slot 0 at a
//! quarter share, so per-process memory and utilisation are attributed to it.
//!
//! ```sh
//! cargo run -p airtime-node-agent --example gpu_probe                     # every mode
//! cargo run -p airtime-node-agent --example gpu_probe -- mps -- ./cuda-burn 30   # one mode, with a load
//! ```
//!
//! MIG needs MIG mode enabled and instances created beforehand (`nvidia-smi mig -cgi … -C`); MPS
//! starts or joins the MPS control daemon under `./.gpu-probe/mps`.

#![allow(clippy::print_stdout, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use airtime_node_agent::config::{MpsConfig, NvmlMode};
use airtime_node_agent::runner::mps;
use airtime_node_agent::telemetry::{GpuHolders, GpuSettings, Holder, Telemetry};
use airtime_protocol::sharing::GpuSharing;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (modes, command) = match args.iter().position(|a| a == "--") {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (&args[..], &[][..]),
    };
    let modes: Vec<GpuSharing> = if modes.is_empty() {
        GpuSharing::ALL.to_vec()
    } else {
        modes.iter().map(|m| GpuSharing::parse(m).expect("a sharing mode")).collect()
    };
    let mps_config = MpsConfig {
        control: PathBuf::from("nvidia-cuda-mps-control"),
        pipe_directory: PathBuf::from(".gpu-probe/mps/pipe"),
        log_directory: PathBuf::from(".gpu-probe/mps/log"),
    };
    for sharing in modes {
        println!("== --gpu-sharing {sharing}");
        let nvml = NvmlMode::Enabled { library: None };
        let settings = GpuSettings {
            nvml: &nvml,
            simulated: &[],
            sharing,
            mig_layout: None,
            node_name: "probe",
            simulated_faults: None,
        };
        let mut daemon = None;
        let mut telemetry = match Telemetry::discover(&settings, || {
            let joined = mps::start_or_join(&mps_config)?;
            let pipe = joined.pipe_directory().to_path_buf();
            daemon = Some(joined);
            Ok(pipe)
        }) {
            Ok(t) => t,
            Err(e) => {
                println!("discovery failed: {e}");
                continue;
            }
        };
        if let Some(d) = &daemon {
            println!("MPS daemon: {d:?}");
        }
        let inventory = telemetry.inventory();
        println!("source {:?}", inventory.gpu_source);
        for gpu in &inventory.gpus {
            println!("{}", serde_json::to_string(gpu).expect("json"));
        }
        let mut child = command.first().map(|program| {
            let mut c = Command::new(program);
            c.args(&command[1..]).env("CUDA_VISIBLE_DEVICES", "0");
            if sharing == GpuSharing::Mps {
                c.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25");
            }
            c.spawn().expect("the load command starts")
        });
        let holders = GpuHolders::new(
            child
                .iter()
                .map(|c| Holder {
                    workload_id: uuid::Uuid::from_u128(1),
                    pid: c.id(),
                    slots: vec![0],
                    milli: 250,
                    memory_mb: None,
                    simulated_busy_milli: None,
                })
                .collect(),
        );
        for round in 0..2 {
            std::thread::sleep(Duration::from_secs(3));
            let report = telemetry.sample(&holders);
            println!("sample {round}: {}", serde_json::to_string(&report).expect("json"));
        }
        if let Some(c) = child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
