//! Simulated GPUs, for demos and tests on machines without NVIDIA hardware (`--simulate-gpus`).
//!
//! Their telemetry is SYNTHETIC. It is derived from what the agent runs, so a dashboard shows the
//! scheduler's decisions: a GPU that a running workload holds whole reads about 95 % utilisation
//! (the *busy level*) and about 80 % of its memory in use, with a slow wobble so the numbers move;
//! a free GPU reads 0. A shared GPU (time-slicing, MPS) reads the sum of its workloads' shares
//! times the busy level (at most 1), and each workload's share sample is its share times the busy
//! level, with the memory its assignment set aside (else its share of the 80 %). Temperature and
//! power follow the load. ECC errors are always 0. Nothing here is measured, and every simulated
//! GPU is advertised with `simulated: true`.
//!
//! Every sharing mode is simulated so demos and tests take the paths real GPUs take: MIG carves
//! each GPU into the instances of the MIG layout (`--mig-layout`, or [`MigLayout::default_for`] its
//! memory); MPS and time-slicing advertise the mode, and the runner sets the environment a workload
//! on such a GPU gets, but no MPS daemon is started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use airtime_protocol::agent::{GpuFault, GpuFaultKind, GpuThrottle, ShareSample};
use airtime_protocol::sharing::{GpuSharing, WHOLE_GPU_MILLI};

use super::nvidia::Nvidia;
use super::{Accelerator, Device, GpuDevices, GpuHolders, GpuReadings, Holder, sharing_note};
use crate::config::{MigLayout, SimulatedGpuSpec, simulated_instance_memory_mb};
use crate::protocol::{GpuInventory, GpuModel, GpuSample, GpuSource};

const BUSY_UTIL: f64 = 0.95;
const BUSY_MEMORY_SHARE: f64 = 0.8;
const IDLE_TEMPERATURE_C: f64 = 34.0;
const BUSY_TEMPERATURE_C: f64 = 67.0;
const IDLE_POWER_W: f64 = 60.0;
const BUSY_POWER_W: f64 = 450.0;

/// Where simulated GPUs are numbered from: after the real ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numbering {
    /// The first simulated physical GPU's number (its uuid and a MIG instance's `parent_index`).
    pub first_physical: u32,
    /// The first slot a simulated device takes.
    pub first_slot: u32,
}

pub struct SimulatedGpus {
    devices: Vec<Device>,
    since: Instant,
    /// `--simulated-gpu-faults`: read at every sample.
    faults: Option<std::path::PathBuf>,
}

impl SimulatedGpus {
    /// Numbers the GPUs of `specs` from `numbering` on and shares them as `sharing` says. UUIDs
    /// derive from the node name, so a restarted agent advertises the same GPUs: `SIM-<node>-<gpu>`
    /// for a GPU, `MIG-SIM-<node>-<gpu>-<n>` for its n-th MIG instance.
    pub fn new(
        specs: &[SimulatedGpuSpec],
        numbering: Numbering,
        node_name: &str,
        sharing: GpuSharing,
        mig_layout: Option<&MigLayout>,
    ) -> Self {
        let mut devices = Vec::new();
        let mut slot = numbering.first_slot;
        let gpus = specs.iter().flat_map(|spec| (0..spec.count).map(move |_| spec)).zip(numbering.first_physical..);
        for (spec, physical) in gpus {
            let model = GpuModel::lossy(&spec.model);
            let whole = |slot: u32, sharing: GpuSharing, note: Option<String>| Device {
                inventory: GpuInventory {
                    index: slot,
                    uuid: Some(format!("SIM-{node_name}-{physical}")),
                    model: model.clone(),
                    memory_mb: spec.memory_mb,
                    nvlink_group: None,
                    simulated: true,
                    sharing,
                    mig_profile: None,
                    parent_index: None,
                    sharing_note: note,
                },
                runtime_id: slot.to_string(),
            };
            if sharing != GpuSharing::Mig {
                devices.push(whole(slot, sharing, None));
                slot += 1;
                continue;
            }
            let layout = match mig_layout {
                Some(given) => Some(given.clone()).filter(|l| l.memory_mb() <= spec.memory_mb),
                None => MigLayout::default_for(spec.memory_mb),
            };
            let Some(layout) = layout else {
                // The configuration refuses this; a whole GPU is what can be honoured.
                let note = format!("simulated GPU {physical} is too small for its MIG layout: advertised whole");
                tracing::warn!("{note}");
                devices.push(whole(slot, GpuSharing::None, Some(sharing_note(&note))));
                slot += 1;
                continue;
            };
            for (n, profile) in layout.profiles().iter().enumerate() {
                let uuid = format!("MIG-SIM-{node_name}-{physical}-{n}");
                devices.push(Device {
                    inventory: GpuInventory {
                        index: slot,
                        uuid: Some(uuid.clone()),
                        model: model.clone(),
                        memory_mb: simulated_instance_memory_mb(profile),
                        nvlink_group: None,
                        simulated: true,
                        sharing: GpuSharing::Mig,
                        mig_profile: Some(profile.clone()),
                        parent_index: Some(physical),
                        sharing_note: None,
                    },
                    runtime_id: uuid,
                });
                slot += 1;
            }
        }
        Self { devices, since: Instant::now(), faults: None }
    }

    /// The simulated GPUs report the faults `file` names (see [`read_faults`]).
    pub fn with_faults(mut self, file: Option<std::path::PathBuf>) -> Self {
        self.faults = file;
        self
    }

    /// The advertised inventory, for tests.
    #[cfg(test)]
    fn gpus(&self) -> Vec<&GpuInventory> {
        self.devices.iter().map(|d| &d.inventory).collect()
    }

    fn sample_at(&self, holders: &GpuHolders, elapsed: Duration) -> GpuReadings {
        let mut readings = GpuReadings::default();
        let health = self.faults.as_deref().map(read_faults).unwrap_or_default();
        // What the file names for a slot: its faults and its throttle reasons.
        let reported = |slot: u32| {
            let (mut faults, mut throttle) = (Vec::new(), Vec::new());
            for (_, h) in health.iter().filter(|(s, _)| *s == slot) {
                match h {
                    Reported::Fault(f) => faults.push(f.clone()),
                    Reported::Throttle(t) => throttle.push(*t),
                }
            }
            (faults, throttle)
        };
        for device in &self.devices {
            let gpu = &device.inventory;
            // A slow wave per GPU, in -1..1, so a busy GPU's numbers move a little.
            let wobble = (elapsed.as_secs_f64() * 0.7 + f64::from(gpu.index) * 1.3).sin();
            let busy_level = (BUSY_UTIL + 0.03 * wobble).clamp(0.0, 1.0);
            let (faults, throttle) = reported(gpu.index);
            let held: Vec<&Holder> = holders.of_slot(gpu.index).collect();
            if held.is_empty() {
                readings.gpus.push(GpuSample {
                    index: gpu.index,
                    util: Some(0.0),
                    memory_used_mb: Some(0),
                    temperature_c: Some(IDLE_TEMPERATURE_C as f32),
                    power_w: Some(IDLE_POWER_W as f32),
                    ecc_errors: Some(0),
                    faults,
                    throttle,
                });
                continue;
            }
            // A GPU that is not shared is all its holder's, whatever share it asked for.
            let share = |holder: &Holder| {
                if gpu.sharing.is_shared() { f64::from(holder.milli.min(WHOLE_GPU_MILLI)) / 1000.0 } else { 1.0 }
            };
            let asked: f64 = held.iter().map(|h| share(h)).sum();
            // Overcommitted time-slicing: the shares split the busy time between them.
            let scale = if asked > 1.0 { 1.0 / asked } else { 1.0 };
            // Each holder keeps its share busy at the busy level, or at the level it asked for.
            let level =
                |holder: &Holder| holder.simulated_busy_milli.map_or(busy_level, |m| f64::from(m.min(1000)) / 1000.0);
            let busy: f64 = held.iter().map(|h| share(h) * scale * level(h)).sum();
            let load = if busy_level > 0.0 { (busy / busy_level).min(1.0) } else { 0.0 };
            let memory_of = |holder: &Holder| {
                let plausible = gpu.memory_mb as f64 * BUSY_MEMORY_SHARE * (1.0 + 0.01 * wobble) * share(holder);
                holder.memory_mb.unwrap_or(plausible.round() as u64).min(gpu.memory_mb)
            };
            let memory: u64 = held.iter().map(|h| memory_of(h)).sum();
            readings.gpus.push(GpuSample {
                index: gpu.index,
                util: Some(busy.clamp(0.0, 1.0) as f32),
                memory_used_mb: Some(memory.min(gpu.memory_mb)),
                temperature_c: Some(
                    (IDLE_TEMPERATURE_C + (BUSY_TEMPERATURE_C - IDLE_TEMPERATURE_C + 2.0 * wobble) * load) as f32,
                ),
                power_w: Some((IDLE_POWER_W + (BUSY_POWER_W - IDLE_POWER_W + 15.0 * wobble) * load) as f32),
                ecc_errors: Some(0),
                faults,
                throttle,
            });
            readings.shares.extend(held.iter().map(|holder| ShareSample {
                workload_id: holder.workload_id,
                gpu_index: gpu.index,
                util: Some((share(holder) * scale * level(holder)).clamp(0.0, 1.0) as f32),
                memory_used_mb: Some(memory_of(holder)),
            }));
        }
        readings
    }
}

/// What a `--simulated-gpu-faults` line makes a simulated GPU report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    /// A fault (`SLOT xid 79`, `SLOT ecc_uncorrectable 2`, …): the GPU is quarantined.
    Fault(GpuFault),
    /// Slowed clocks (`SLOT throttle hw_thermal`): a warning.
    Throttle(GpuThrottle),
}

/// What a `--simulated-gpu-faults` file names: `SLOT KIND [CODE]` per line for a fault, `SLOT
/// throttle REASON` for slowed clocks (`#` starts a comment). A missing file names none; a line
/// that does not parse is skipped with a warning.
pub fn read_faults(file: &std::path::Path) -> Vec<(u32, Reported)> {
    let Ok(text) = std::fs::read_to_string(file) else { return Vec::new() };
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let parsed = parse_fault(line);
            if parsed.is_none() {
                tracing::warn!(file = %file.display(), line, "not a simulated GPU fault (SLOT KIND [CODE] or SLOT throttle REASON)");
            }
            parsed
        })
        .collect()
}

fn parse_fault(line: &str) -> Option<(u32, Reported)> {
    let mut words = line.split_whitespace();
    let slot = words.next()?.parse().ok()?;
    let kind = match words.next()? {
        "throttle" => {
            let reason = GpuThrottle::parse(words.next()?)?;
            return words.next().is_none().then_some((slot, Reported::Throttle(reason)));
        }
        "xid" => GpuFaultKind::Xid,
        "ecc_uncorrectable" => GpuFaultKind::EccUncorrectable,
        "retired_pages_pending" => GpuFaultKind::RetiredPagesPending,
        "fallen_off_bus" => GpuFaultKind::FallenOffBus,
        _ => return None,
    };
    let code = match words.next() {
        Some(code) => Some(code.parse().ok()?),
        None => None,
    };
    Some((slot, Reported::Fault(GpuFault { kind, code })))
}

impl GpuDevices for SimulatedGpus {
    fn source(&self) -> GpuSource {
        GpuSource::Simulated
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Simulated GPUs are NVIDIA's, as their models, MIG instances and MPS shares are; with no
    /// MPS daemon (a share's limits are still set).
    fn accelerator(&self) -> Arc<dyn Accelerator> {
        Arc::new(Nvidia::default())
    }

    fn sample(&mut self, holders: &GpuHolders) -> GpuReadings {
        self.sample_at(holders, self.since.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faults_file_names_faults_by_slot_and_skips_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faults");
        assert!(read_faults(&file).is_empty(), "no file: no faults");
        std::fs::write(
            &file,
            "0 xid 79\n# a comment\n1 retired_pages_pending\n2 melted\nx xid\n1 ecc_uncorrectable 3\n\
             1 throttle hw_thermal\n0 throttle hot\n",
        )
        .unwrap();
        let faults = read_faults(&file);
        assert_eq!(
            faults,
            vec![
                (0, Reported::Fault(GpuFault { kind: GpuFaultKind::Xid, code: Some(79) })),
                (1, Reported::Fault(GpuFault { kind: GpuFaultKind::RetiredPagesPending, code: None })),
                (1, Reported::Fault(GpuFault { kind: GpuFaultKind::EccUncorrectable, code: Some(3) })),
                (1, Reported::Throttle(GpuThrottle::HwThermal)),
            ]
        );
        let sim = SimulatedGpus::new(&[spec(2, "H100", 81920)], from(0, 0), "n1", GpuSharing::None, None)
            .with_faults(Some(file));
        let readings = sim.sample_at(&GpuHolders::default(), Duration::ZERO);
        assert_eq!(readings.gpus[0].faults, vec![GpuFault { kind: GpuFaultKind::Xid, code: Some(79) }]);
        assert_eq!(readings.gpus[1].faults.len(), 2);
        assert_eq!(readings.gpus[1].throttle, vec![GpuThrottle::HwThermal]);
        assert!(readings.gpus[0].throttle.is_empty());
    }
    use airtime_protocol::sharing::MigProfile;
    use uuid::Uuid;

    fn spec(count: u32, model: &str, memory_mb: u64) -> SimulatedGpuSpec {
        SimulatedGpuSpec { count, model: model.into(), memory_mb }
    }

    fn from(first_physical: u32, first_slot: u32) -> Numbering {
        Numbering { first_physical, first_slot }
    }

    fn holder(slots: &[u32], milli: u32, memory_mb: Option<u64>) -> Holder {
        Holder {
            workload_id: Uuid::new_v4(),
            pid: u32::MAX,
            slots: slots.to_vec(),
            milli,
            memory_mb,
            simulated_busy_milli: None,
        }
    }

    #[test]
    fn a_workload_can_hold_a_simulated_gpu_idle() {
        let sim = SimulatedGpus::new(&[spec(2, "H100", 81920)], from(0, 0), "n1", GpuSharing::None, None);
        let idle = Holder { simulated_busy_milli: Some(20), ..holder(&[0], 1000, None) };
        let busy = holder(&[1], 1000, None);
        let readings = sim.sample_at(&GpuHolders::new(vec![idle, busy]), Duration::ZERO);
        let util: Vec<f32> = readings.gpus.iter().map(|g| g.util.unwrap_or(f32::NAN)).collect();
        assert!((util[0] - 0.02).abs() < 1e-6, "held but idle: {util:?}");
        assert!(util[1] > 0.9, "held and busy: {util:?}");
    }

    #[test]
    fn numbers_gpus_after_the_first_index() {
        let sim = SimulatedGpus::new(
            &[spec(2, "H100-SXM", 81920), spec(1, "L4", 23034)],
            from(4, 4),
            "n1",
            GpuSharing::TimeSlicing,
            None,
        );
        let listed: Vec<(u32, &str, &str, u64, bool, GpuSharing)> = sim
            .gpus()
            .iter()
            .map(|g| {
                (g.index, g.uuid.as_deref().unwrap_or_default(), g.model.as_str(), g.memory_mb, g.simulated, g.sharing)
            })
            .collect();
        assert_eq!(
            listed,
            vec![
                (4, "SIM-n1-4", "H100-SXM", 81920, true, GpuSharing::TimeSlicing),
                (5, "SIM-n1-5", "H100-SXM", 81920, true, GpuSharing::TimeSlicing),
                (6, "SIM-n1-6", "L4", 23034, true, GpuSharing::TimeSlicing),
            ]
        );
        let cuda: Vec<&str> = sim.devices().iter().map(|d| d.runtime_id.as_str()).collect();
        assert_eq!(cuda, vec!["4", "5", "6"]);
    }

    #[test]
    fn a_mig_node_advertises_one_device_per_instance() -> Result<(), String> {
        let profiles = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
            .iter()
            .map(|p| MigProfile::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        let layout = MigLayout::new(profiles).map_err(|e| e.to_string())?;
        // After one real GPU with two instances: physical GPUs 1 and 2, slots from 2.
        let sim = SimulatedGpus::new(&[spec(2, "H100", 81920)], from(1, 2), "n1", GpuSharing::Mig, Some(&layout));
        let listed: Vec<(u32, String, Option<u32>, u64, String)> = sim
            .devices()
            .iter()
            .map(|d| {
                let g = &d.inventory;
                let profile = g.mig_profile.as_ref().map(ToString::to_string).unwrap_or_default();
                (g.index, profile, g.parent_index, g.memory_mb, d.runtime_id.clone())
            })
            .collect();
        let expected = |slot, profile: &str, parent, memory, n| {
            (slot, profile.to_owned(), Some(parent), memory, format!("MIG-SIM-n1-{parent}-{n}"))
        };
        assert_eq!(
            listed,
            vec![
                expected(2, "3g.40gb", 1, 40960, 0),
                expected(3, "2g.20gb", 1, 20480, 1),
                expected(4, "1g.10gb", 1, 10240, 2),
                expected(5, "1g.10gb", 1, 10240, 3),
                expected(6, "3g.40gb", 2, 40960, 0),
                expected(7, "2g.20gb", 2, 20480, 1),
                expected(8, "1g.10gb", 2, 10240, 2),
                expected(9, "1g.10gb", 2, 10240, 3),
            ]
        );
        for device in sim.devices() {
            let g = &device.inventory;
            assert_eq!((g.sharing, g.model.as_str(), g.simulated), (GpuSharing::Mig, "H100", true));
            assert_eq!(g.uuid.as_deref(), Some(device.runtime_id.as_str()));
        }

        // Without --mig-layout: the default for the GPU's memory (an H200's here).
        let sim = SimulatedGpus::new(&[spec(1, "H200", 143771)], from(0, 0), "n1", GpuSharing::Mig, None);
        let profiles: Vec<String> =
            sim.gpus().iter().filter_map(|g| g.mig_profile.as_ref().map(ToString::to_string)).collect();
        assert_eq!(profiles, vec!["3g.68gb", "2g.34gb", "1g.17gb", "1g.17gb"]);
        Ok(())
    }

    #[test]
    fn telemetry_follows_the_running_workloads() {
        let mut sim = SimulatedGpus::new(&[spec(2, "H100-SXM", 81920)], from(0, 0), "n1", GpuSharing::None, None);
        let busy = GpuHolders::new(vec![holder(&[1], 1000, None)]);
        for second in 0..20 {
            let readings = sim.sample_at(&busy, Duration::from_secs(second));
            let (idle, held) = (&readings.gpus[0], &readings.gpus[1]);
            assert_eq!((idle.util, idle.memory_used_mb), (Some(0.0), Some(0)));
            let util = held.util.unwrap_or_default();
            assert!((0.92..=0.98).contains(&util), "{util}");
            let used = held.memory_used_mb.unwrap_or_default();
            assert!((64880..=66200).contains(&used), "{used}");
            assert_eq!(held.ecc_errors, Some(0));
            let temperature = held.temperature_c.unwrap_or_default();
            assert!((64.0..=70.0).contains(&temperature), "{temperature}");
            // The one holder's share sample is the GPU's reading.
            assert_eq!(readings.shares.len(), 1);
            assert_eq!(readings.shares[0].util, held.util);
            assert_eq!(readings.shares[0].memory_used_mb, held.memory_used_mb);
        }
        let all_idle = sim.sample(&GpuHolders::default());
        assert!(all_idle.gpus.iter().all(|g| g.util == Some(0.0)));
        assert!(all_idle.shares.is_empty());
    }

    #[test]
    fn a_shared_gpu_reads_the_sum_of_its_shares() {
        let sim = SimulatedGpus::new(&[spec(1, "H100", 81920)], from(0, 0), "n1", GpuSharing::Mps, None);
        let (a, b) = (holder(&[0], 250, Some(20480)), holder(&[0], 250, None));
        let holders = GpuHolders::new(vec![a.clone(), b.clone()]);
        for second in 0..20 {
            let readings = sim.sample_at(&holders, Duration::from_secs(second));
            let util = f64::from(readings.gpus[0].util.unwrap_or_default());
            assert!((0.46..=0.49).contains(&util), "two quarters of a 0.92..0.98 busy level: {util}");
            assert_eq!(readings.shares.len(), 2);
            for share in &readings.shares {
                let share_util = f64::from(share.util.unwrap_or_default());
                assert!((share_util * 2.0 - util).abs() < 1e-3, "{share_util} is half of {util}");
            }
            let memory_of = |id| readings.shares.iter().find(|s| s.workload_id == id).and_then(|s| s.memory_used_mb);
            assert_eq!(memory_of(a.workload_id), Some(20480), "the slice it was given");
            let plausible = memory_of(b.workload_id).unwrap_or_default();
            assert!((16220..=16550).contains(&plausible), "a quarter of 80 % of 81920 MiB: {plausible}");
            assert_eq!(readings.gpus[0].memory_used_mb, Some(20480 + plausible));
        }

        // Time-slicing overcommitted: the GPU is busy, and the shares split its busy time.
        let sim = SimulatedGpus::new(&[spec(1, "L4", 23034)], from(0, 0), "n1", GpuSharing::TimeSlicing, None);
        let holders = GpuHolders::new(vec![holder(&[0], 800, None), holder(&[0], 800, None)]);
        let readings = sim.sample_at(&holders, Duration::ZERO);
        let util = readings.gpus[0].util.unwrap_or_default();
        let shares: f32 = readings.shares.iter().filter_map(|s| s.util).sum();
        assert!(util > 0.9 && (shares - util).abs() < 1e-3, "{util} {shares}");
        assert!(readings.gpus[0].memory_used_mb.unwrap_or(u64::MAX) <= 23034);

        // A GPU that is not shared is all its holder's, whatever share it asked for.
        let sim = SimulatedGpus::new(&[spec(1, "H100", 81920)], from(0, 0), "n1", GpuSharing::Mig, None);
        let readings = sim.sample_at(&GpuHolders::new(vec![holder(&[3], 100, None)]), Duration::ZERO);
        let instance = readings.gpus.iter().find(|g| g.index == 3).and_then(|g| g.util).unwrap_or_default();
        assert!(instance > 0.9, "{instance}");
    }
}
