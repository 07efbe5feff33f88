//! Unit-test a policy natively with `cargo test`: build a snapshot with [`SnapshotFixture`], run the
//! policy with [`SnapshotFixture::evaluate`], and read the [`Outcome`] by workload name.
//!
//! The run goes through the real ABI both ways: the fixture is encoded and decoded as the host and
//! guest would, the decisions are encoded and decoded as the guest and host would, and then checked
//! with [`check_decisions`] as a host would. A test therefore sees exactly what the module will see
//! and fails where the control plane would refuse the output.
//!
//! ```
//! use airtime_policy_sdk::prelude::*;
//! use airtime_policy_sdk::testing::SnapshotFixture;
//!
//! struct FirstGpu;
//! impl Policy for FirstGpu {
//!     fn evaluate<'s>(&self, s: &Snapshot<'s>, _: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
//!         let Some((w, _)) = s.pending().next() else { return Ok(vec![]) };
//!         Ok(vec![Decision::place(w, 0, vec![0], "first GPU")])
//!     }
//! }
//!
//! let outcome = SnapshotFixture::new()
//!     .node("n1", 8, "H100", 81920)
//!     .pending("train", 1, 40960)
//!     .evaluate(&FirstGpu)
//!     .unwrap();
//! assert_eq!(outcome.placement("train"), Some(("n1", vec![0])));
//! ```

use std::fmt;

use crate::abi::{
    self, Action, Decision, NodeState, Settings, WorkloadClass, WorkloadState, decode_decisions, decode_snapshot,
};
use crate::check::{DecisionProblem, check_decisions};
use crate::guest::{Failure, LogLine, Policy, evaluate_encoded};
use crate::owned::{OwnedGpu, OwnedNode, OwnedService, OwnedSnapshot, OwnedTenant, OwnedWorkload};

/// 2023-11-14 22:13:20 UTC: fixtures start at a fixed time so tests are repeatable.
pub const FIXTURE_NOW_MS: u64 = 1_700_000_000_000;
/// CPU of a fixture node unless told otherwise: 64 cores.
pub const FIXTURE_NODE_CPU_MILLIS: u32 = 64_000;
/// Memory of a fixture node unless told otherwise: 512 GiB.
pub const FIXTURE_NODE_MEMORY_MB: u32 = 524_288;

/// Builds a snapshot by name. Workloads belong to the tenant `"default"` unless told otherwise
/// (it is created on first use). Names must be unique per kind; a misuse panics with a message,
/// as a test helper should.
#[derive(Debug, Clone)]
pub struct SnapshotFixture {
    doc: OwnedSnapshot,
}

impl Default for SnapshotFixture {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotFixture {
    /// An empty fleet at [`FIXTURE_NOW_MS`], params `{}`, no settings, platform scope.
    pub fn new() -> Self {
        SnapshotFixture { doc: OwnedSnapshot { now_ms: FIXTURE_NOW_MS, ..OwnedSnapshot::default() } }
    }

    /// Starts from an existing snapshot (a production snapshot replayed, say).
    pub fn from_document(doc: OwnedSnapshot) -> Self {
        SnapshotFixture { doc }
    }

    /// The snapshot as built so far.
    pub fn document(&self) -> &OwnedSnapshot {
        &self.doc
    }

    /// Edits the snapshot directly, for what the builder methods do not cover.
    pub fn edit(mut self, edit: impl FnOnce(&mut OwnedSnapshot)) -> Self {
        edit(&mut self.doc);
        self
    }

    pub fn now_ms(mut self, now_ms: u64) -> Self {
        self.doc.now_ms = now_ms;
        self
    }

    /// The policy's params, as JSON text.
    pub fn params(mut self, json: &str) -> Self {
        self.doc.params = json.to_owned();
        self
    }

    pub fn settings(mut self, settings: Settings) -> Self {
        self.doc.settings = Some(settings);
        self
    }

    /// Evaluates for tenant `name` (created if needed) instead of the platform scope.
    pub fn scope_tenant(mut self, name: &str) -> Self {
        let index = self.tenant_index(name);
        self.doc.scope_tenant = Some(index);
        self
    }

    /// Adds tenant `name` (weight 1, nothing guaranteed).
    pub fn tenant(self, name: &str) -> Self {
        self.tenant_with(name, |_| {})
    }

    /// Adds tenant `name` and lets `edit` set its fields.
    #[track_caller]
    pub fn tenant_with(mut self, name: &str, edit: impl FnOnce(&mut OwnedTenant)) -> Self {
        if self.doc.tenants.iter().any(|t| t.name == name) {
            panic!("fixture already has a tenant named {name:?}");
        }
        let mut tenant = OwnedTenant { name: name.to_owned(), weight: 1, may_borrow: true, ..OwnedTenant::default() };
        edit(&mut tenant);
        self.doc.tenants.push(tenant);
        self
    }

    /// Adds a ready node with `gpu_count` GPUs of `model`, each with `gpu_memory_mb` MiB, and
    /// [`FIXTURE_NODE_CPU_MILLIS`] / [`FIXTURE_NODE_MEMORY_MB`] all free.
    pub fn node(self, name: &str, gpu_count: u32, model: &str, gpu_memory_mb: u32) -> Self {
        self.node_with(name, gpu_count, model, gpu_memory_mb, |_| {})
    }

    /// Adds a node as [`node`](Self::node) does and lets `edit` set its fields (state, CPU, cost).
    /// GPU fields are set with [`gpu`](Self::gpu).
    #[track_caller]
    pub fn node_with(
        mut self,
        name: &str,
        gpu_count: u32,
        model: &str,
        gpu_memory_mb: u32,
        edit: impl FnOnce(&mut OwnedNode),
    ) -> Self {
        if self.doc.nodes.iter().any(|n| n.name == name) {
            panic!("fixture already has a node named {name:?}");
        }
        let node_index = self.doc.nodes.len() as u32;
        let gpu_first = self.doc.gpus.len() as u32;
        let mut node = OwnedNode {
            name: name.to_owned(),
            state: NodeState::Ready,
            cpu_millis: FIXTURE_NODE_CPU_MILLIS,
            cpu_millis_free: FIXTURE_NODE_CPU_MILLIS,
            memory_mb: FIXTURE_NODE_MEMORY_MB,
            memory_mb_free: FIXTURE_NODE_MEMORY_MB,
            gpu_first,
            gpu_count,
            ..OwnedNode::default()
        };
        edit(&mut node);
        // GPUs of one node are contiguous; the node's range is fixed here, whatever `edit` did.
        node.gpu_first = gpu_first;
        node.gpu_count = gpu_count;
        self.doc.nodes.push(node);
        for device_index in 0..gpu_count {
            self.doc.gpus.push(OwnedGpu {
                node: node_index,
                device_index,
                model: model.to_owned(),
                memory_mb: gpu_memory_mb,
                ..OwnedGpu::default()
            });
        }
        self
    }

    /// Adds a node without GPUs, with this much CPU and memory free.
    pub fn cpu_node(self, name: &str, cpu_millis: u32, memory_mb: u32) -> Self {
        self.node_with(name, 0, "", 0, |n| {
            n.cpu_millis = cpu_millis;
            n.cpu_millis_free = cpu_millis;
            n.memory_mb = memory_mb;
            n.memory_mb_free = memory_mb;
        })
    }

    /// Lets `edit` set the fields of GPU `device_index` of `node` (live memory use, NVLink group).
    #[track_caller]
    pub fn gpu(mut self, node: &str, device_index: u32, edit: impl FnOnce(&mut OwnedGpu)) -> Self {
        let gpu = self.gpu_index(node, device_index);
        if let Some(g) = self.doc.gpus.get_mut(gpu as usize) {
            edit(g);
        }
        self
    }

    /// Adds a pending workload of the default tenant needing `gpu_count` GPUs with
    /// `gpu_memory_mb` MiB each (0 GPUs: a CPU workload). Submitted one second after the previous
    /// workload, so submission order is the order of the calls.
    pub fn pending(self, name: &str, gpu_count: u32, gpu_memory_mb: u32) -> Self {
        self.pending_with(name, gpu_count, gpu_memory_mb, |_| {})
    }

    /// Adds a pending workload as [`pending`](Self::pending) does and lets `edit` set its fields
    /// (priority, class, models, flags). To name its tenant, use [`workload_tenant`](Self::workload_tenant).
    #[track_caller]
    pub fn pending_with(
        mut self,
        name: &str,
        gpu_count: u32,
        gpu_memory_mb: u32,
        edit: impl FnOnce(&mut OwnedWorkload),
    ) -> Self {
        let mut workload = self.new_workload(name, gpu_count, gpu_memory_mb);
        edit(&mut workload);
        self.doc.workloads.push(workload);
        self
    }

    /// Adds a pending gang across nodes (ABI 1.6): `members` workloads `{name}-0`, `{name}-1`, …,
    /// each asking for `gpu_count` whole GPUs, of gang `name`.
    pub fn pending_gang(mut self, name: &str, members: u32, gpu_count: u32) -> Self {
        for rank in 0..members {
            let mut workload = self.new_workload(&format!("{name}-{rank}"), gpu_count, 0);
            workload.gang_id = name.to_owned();
            workload.gang_size = members;
            workload.gang_rank = rank;
            self.doc.workloads.push(workload);
        }
        self
    }

    /// Adds the three pending workloads of a container test: `image` (`gpu_count` GPUs with 1024 MiB
    /// each, in a container), `image-cpu` (no GPU, in a container) and `plain` (as `image`, but not
    /// in a container), in that order.
    pub fn container_work(self, gpu_count: u32) -> Self {
        self.pending_with("image", gpu_count, 1024, |w| w.container = true)
            .pending_with("image-cpu", 0, 0, |w| w.container = true)
            .pending("plain", gpu_count, 1024)
    }

    /// Adds a running workload of the default tenant holding GPUs `devices` of `node` (each GPU gets
    /// it as holder, and the node's free CPU and memory shrink by what it asks for), started a
    /// minute before now.
    pub fn running(self, name: &str, node: &str, devices: &[u32]) -> Self {
        self.running_with(name, node, devices, |_| {})
    }

    /// Adds a running workload as [`running`](Self::running) does and lets `edit` set its fields.
    #[track_caller]
    pub fn running_with(
        mut self,
        name: &str,
        node: &str,
        devices: &[u32],
        edit: impl FnOnce(&mut OwnedWorkload),
    ) -> Self {
        let node_index = self.node_index(node);
        let workload_index = self.doc.workloads.len() as u32;
        let mut workload = self.new_workload(name, devices.len() as u32, 0);
        workload.state = WorkloadState::Running;
        workload.node = Some(node_index);
        workload.started_ms = self.doc.now_ms.saturating_sub(60_000);
        edit(&mut workload);
        if let Some(n) = self.doc.nodes.get_mut(node_index as usize) {
            n.cpu_millis_free = n.cpu_millis_free.saturating_sub(workload.cpu_millis);
            n.memory_mb_free = n.memory_mb_free.saturating_sub(workload.memory_mb);
        }
        for &device in devices {
            let gpu = self.gpu_index(node, device);
            let g = &mut self.doc.gpus[gpu as usize];
            if let Some(holder) = g.holder {
                panic!("{node} device {device} is already held by workload {holder}");
            }
            g.holder = Some(workload_index);
            g.free_milli = 0;
            g.sharers = 1;
        }
        self.doc.workloads.push(workload);
        self
    }

    /// Sets how every GPU of `node` is shared (time-slicing, MPS).
    #[track_caller]
    pub fn sharing(mut self, node: &str, sharing: abi::Sharing) -> Self {
        let node_index = self.node_index(node);
        for gpu in self.doc.gpus.iter_mut().filter(|g| g.node == node_index) {
            gpu.sharing = sharing;
        }
        self
    }

    /// Adds a node whose GPUs are MIG instances of `model`, one per `(profile, memory_mb)`.
    pub fn mig_node(self, name: &str, model: &str, instances: &[(&str, u32)]) -> Self {
        let mut fixture = self.node(name, instances.len() as u32, model, 0);
        let node_index = fixture.node_index(name);
        let gpus = fixture.doc.gpus.iter_mut().filter(|g| g.node == node_index);
        for (gpu, (profile, memory_mb)) in gpus.zip(instances) {
            gpu.sharing = abi::Sharing::Mig;
            gpu.mig_profile = (*profile).to_owned();
            gpu.memory_mb = *memory_mb;
        }
        fixture
    }

    /// Adds a pending workload asking for `milli` thousandths of one GPU with a memory slice of
    /// `memory_mb`.
    pub fn pending_share(self, name: &str, milli: u32, memory_mb: u32) -> Self {
        self.pending_with(name, 1, memory_mb, |w| w.gpu_milli = milli)
    }

    /// Adds a running workload holding `milli` thousandths of GPU `device` of `node` (a shared GPU)
    /// with a memory slice of `memory_mb`; the GPU's free share, reserved memory and sharers follow.
    #[track_caller]
    pub fn running_share(mut self, name: &str, node: &str, device: u32, milli: u32, memory_mb: u32) -> Self {
        let node_index = self.node_index(node);
        let gpu = self.gpu_index(node, device) as usize;
        let workload_index = self.doc.workloads.len() as u32;
        let mut workload = self.new_workload(name, 1, memory_mb);
        workload.gpu_milli = milli;
        workload.state = WorkloadState::Running;
        workload.node = Some(node_index);
        workload.started_ms = self.doc.now_ms.saturating_sub(60_000);
        let g = &mut self.doc.gpus[gpu];
        if g.free_milli < milli {
            panic!("{node} device {device} has {}/1000 free, not {milli}", g.free_milli);
        }
        g.holder.get_or_insert(workload_index);
        g.free_milli -= milli;
        g.memory_reserved_mb += memory_mb;
        g.sharers += 1;
        self.doc.workloads.push(workload);
        self
    }

    /// Moves workload `name` to tenant `tenant` (created if needed).
    #[track_caller]
    pub fn workload_tenant(mut self, name: &str, tenant: &str) -> Self {
        let tenant = self.tenant_index(tenant);
        let index = self.workload_index(name);
        self.doc.workloads[index as usize].tenant = tenant;
        self
    }

    /// Adds a service of the default tenant (ABI 1.3): real-time inference whose GPU replicas
    /// hold a whole GPU and carry `capacity` requests/s each, within `min_replicas..=max_replicas`,
    /// with no replicas yet and nothing desired. Set the plan's numbers with
    /// [`service_with`](Self::service_with) and link replicas with [`replica_of`](Self::replica_of).
    pub fn service(self, name: &str, capacity: f32, min_replicas: u32, max_replicas: u32) -> Self {
        self.service_with(name, |s| {
            s.capacity = capacity;
            s.min_replicas = min_replicas;
            s.max_replicas = max_replicas;
        })
    }

    /// Adds a service as [`service`](Self::service) does (capacity 1, 0 to 1 replicas) and lets
    /// `edit` set its fields (demand, desired replicas, CPU variant, flags). To name its tenant,
    /// use [`service_tenant`](Self::service_tenant).
    #[track_caller]
    pub fn service_with(mut self, name: &str, edit: impl FnOnce(&mut OwnedService)) -> Self {
        if self.doc.services.iter().any(|s| s.name == name) {
            panic!("fixture already has a service named {name:?}");
        }
        let tenant = self.tenant_index("default");
        let mut service = OwnedService {
            name: name.to_owned(),
            tenant,
            class: WorkloadClass::RealtimeInference,
            capacity: 1.0,
            max_replicas: 1,
            gpu_milli_per_replica: abi::WHOLE_GPU_MILLI,
            ..OwnedService::default()
        };
        edit(&mut service);
        self.doc.services.push(service);
        self
    }

    /// Makes workload `workload` a replica of service `service` running its `variant` template:
    /// the workload takes the service's tenant and class, and counts among the service's placed
    /// replicas when it runs, its pending ones when it is pending (a stopping one counts for
    /// neither, as the host counts it).
    #[track_caller]
    pub fn replica_of(mut self, workload: &str, service: &str, variant: abi::ReplicaVariant) -> Self {
        let w = self.workload_index(workload) as usize;
        let s = self.service_index(service);
        let svc = &mut self.doc.services[s as usize];
        let wl = &mut self.doc.workloads[w];
        if wl.service.is_some() {
            panic!("workload {workload:?} is already a replica");
        }
        wl.service = Some(s);
        wl.replica_variant = variant;
        wl.tenant = svc.tenant;
        wl.class = svc.class;
        let cpu = variant == abi::ReplicaVariant::Cpu;
        let count = match wl.state {
            WorkloadState::Pending if cpu => Some(&mut svc.pending_cpu),
            WorkloadState::Pending => Some(&mut svc.pending_gpu),
            WorkloadState::Running if cpu => Some(&mut svc.placed_cpu),
            WorkloadState::Running => Some(&mut svc.placed_gpu),
            _ => None,
        };
        if let Some(count) = count {
            *count += 1;
        }
        self
    }

    /// Moves service `service` and its replicas to tenant `tenant` (created if needed).
    #[track_caller]
    pub fn service_tenant(mut self, service: &str, tenant: &str) -> Self {
        let tenant = self.tenant_index(tenant);
        let s = self.service_index(service);
        self.doc.services[s as usize].tenant = tenant;
        for w in self.doc.workloads.iter_mut().filter(|w| w.service == Some(s)) {
            w.tenant = tenant;
        }
        self
    }

    /// The bytes the host would send.
    pub fn encode(&self) -> Vec<u8> {
        abi::encode_snapshot(&self.doc.as_snapshot())
    }

    /// What the host's check finds wrong with `decisions` on this fixture's snapshot (nothing: an
    /// empty list), as [`evaluate`](Self::evaluate) checks a policy's own.
    pub fn problems(&self, decisions: &[Decision<'_>]) -> Vec<DecisionProblem> {
        let bytes = self.encode();
        let snapshot = decode_snapshot(&bytes).expect("the fixture encodes to a valid snapshot");
        check_decisions(&snapshot, decisions)
    }

    /// Runs `policy` as the host would, through the ABI both ways, and checks its decisions.
    pub fn evaluate<P: Policy + ?Sized>(&self, policy: &P) -> Result<Outcome, EvaluationError> {
        let snapshot_bytes = self.encode();
        let snapshot = decode_snapshot(&snapshot_bytes).map_err(|e| EvaluationError::InvalidFixture(e.to_string()))?;
        let mut logs = Vec::new();
        let output = match evaluate_encoded(policy, &snapshot_bytes, &mut logs) {
            Ok(output) => output,
            Err(failure) => return Err(EvaluationError::Failed { failure, logs }),
        };
        let decisions = decode_decisions(&output).map_err(|e| EvaluationError::InvalidFixture(e.to_string()))?;
        let problems = check_decisions(&snapshot, &decisions);
        if !problems.is_empty() {
            return Err(EvaluationError::Refused { problems, logs });
        }
        Ok(Outcome {
            decisions: decisions.into_iter().map(Decision::into_owned).collect(),
            logs,
            output_bytes: output.len(),
            doc: self.doc.clone(),
        })
    }

    /// A synthetic fleet for benchmarks and load tests: `nodes` ready nodes of `gpus_per_node` GPUs
    /// (H100 and A100 alternating by node, 80 GiB, one NVLink domain per node), 16 tenants, and
    /// `pending` workloads of mixed shapes (1, 2, 4 or 8 GPUs; 10 to 80 GiB; some model-restricted,
    /// some CPU-only), with priorities and submission times from a seeded generator (same seed, same
    /// fleet).
    pub fn synthetic_fleet(nodes: u32, gpus_per_node: u32, pending: u32, seed: u64) -> Self {
        let mut random = SplitMix64::new(seed);
        let mut fixture = SnapshotFixture::new();
        for t in 0..16 {
            fixture = fixture.tenant_with(&format!("tenant-{t:02}"), |tenant| {
                tenant.guaranteed_gpus = nodes * gpus_per_node / 16;
                tenant.weight = 1 + (t % 4);
                tenant.may_borrow = t.is_multiple_of(2);
            });
        }
        for n in 0..nodes {
            let model = if n % 2 == 0 { "H100" } else { "A100" };
            fixture = fixture.node_with(&format!("gpu-node-{n:04}"), gpus_per_node, model, 81_920, |node| {
                node.cpu_millis = 128_000;
                node.cpu_millis_free = 128_000;
                node.memory_mb = 1_048_576;
                node.memory_mb_free = 1_048_576;
                node.cost_per_hour = 2.5 * gpus_per_node as f32;
            });
            let first = fixture.doc.gpus.len() - gpus_per_node as usize;
            for gpu in &mut fixture.doc.gpus[first..] {
                gpu.nvlink_group = Some(n);
                gpu.memory_used_mb = (random.next_u64() % 4) as u32 * 1024;
            }
        }
        for w in 0..pending {
            let roll = random.next_u64();
            let gpu_count = [1, 1, 1, 2, 2, 4, 8, 0][(roll % 8) as usize];
            let gpu_memory_mb = [10_240, 20_480, 40_960, 79_872][((roll >> 8) % 4) as usize];
            let class = WorkloadClass::ALL[((roll >> 16) % 7) as usize];
            fixture.doc.workloads.push(OwnedWorkload {
                id: format!("00000000-0000-4000-8000-{w:012}"),
                name: format!("job-{w:05}"),
                tenant: ((roll >> 24) % 16) as u32,
                class,
                state: WorkloadState::Pending,
                priority: ((roll >> 32) % 100) as i32,
                gpu_count,
                gpu_memory_mb: if gpu_count == 0 { 0 } else { gpu_memory_mb },
                gpu_models: if (roll >> 40).is_multiple_of(5) { "H100".to_owned() } else { String::new() },
                cpu_millis: 4_000,
                memory_mb: 16_384,
                submitted_ms: FIXTURE_NOW_MS - 3_600_000 + u64::from(w) * 100,
                cpu_capable: gpu_count == 0 || (roll >> 48).is_multiple_of(4),
                gang: gpu_count > 1,
                preemptible: class != WorkloadClass::RealtimeInference,
                checkpointable: class.is_training_like(),
                ..OwnedWorkload::default()
            });
        }
        fixture
    }

    fn new_workload(&mut self, name: &str, gpu_count: u32, gpu_memory_mb: u32) -> OwnedWorkload {
        if self.doc.workloads.iter().any(|w| w.name == name) {
            panic!("fixture already has a workload named {name:?}");
        }
        let tenant = self.tenant_index("default");
        let n = self.doc.workloads.len() as u64;
        OwnedWorkload {
            id: format!("00000000-0000-4000-8000-{n:012}"),
            name: name.to_owned(),
            tenant,
            class: WorkloadClass::BatchInference,
            state: WorkloadState::Pending,
            gpu_count,
            gpu_memory_mb,
            cpu_millis: 1_000,
            memory_mb: 4_096,
            submitted_ms: self.doc.now_ms.saturating_sub(3_600_000) + n * 1_000,
            gang: gpu_count > 1,
            ..OwnedWorkload::default()
        }
    }

    fn tenant_index(&mut self, name: &str) -> u32 {
        if let Some(index) = self.doc.tenants.iter().position(|t| t.name == name) {
            return index as u32;
        }
        self.doc.tenants.push(OwnedTenant {
            name: name.to_owned(),
            weight: 1,
            may_borrow: true,
            ..OwnedTenant::default()
        });
        self.doc.tenants.len() as u32 - 1
    }

    #[track_caller]
    fn node_index(&self, name: &str) -> u32 {
        match self.doc.nodes.iter().position(|n| n.name == name) {
            Some(index) => index as u32,
            None => panic!("fixture has no node named {name:?}"),
        }
    }

    #[track_caller]
    fn service_index(&self, name: &str) -> u32 {
        match self.doc.services.iter().position(|s| s.name == name) {
            Some(index) => index as u32,
            None => panic!("fixture has no service named {name:?}"),
        }
    }

    #[track_caller]
    fn workload_index(&self, name: &str) -> u32 {
        match self.doc.workloads.iter().position(|w| w.name == name) {
            Some(index) => index as u32,
            None => panic!("fixture has no workload named {name:?}"),
        }
    }

    #[track_caller]
    fn gpu_index(&self, node: &str, device_index: u32) -> u32 {
        let n = &self.doc.nodes[self.node_index(node) as usize];
        if device_index >= n.gpu_count {
            panic!("node {node:?} has {} GPUs; there is no device {device_index}", n.gpu_count);
        }
        n.gpu_first + device_index
    }
}

/// Why [`SnapshotFixture::evaluate`] produced no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvaluationError {
    /// The policy returned `Err` (in the module: called `airtime.fail`).
    Failed { failure: Failure, logs: Vec<LogLine> },
    /// The host would refuse these decisions.
    Refused { problems: Vec<DecisionProblem>, logs: Vec<LogLine> },
    /// The fixture does not encode to a valid snapshot (a bug in the test).
    InvalidFixture(String),
}

impl fmt::Display for EvaluationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvaluationError::Failed { failure, .. } => write!(f, "the policy failed: {failure}"),
            EvaluationError::Refused { problems, .. } => {
                write!(f, "the host would refuse {} decisions:", problems.len())?;
                for problem in problems {
                    write!(f, "\n  {problem}")?;
                }
                Ok(())
            }
            EvaluationError::InvalidFixture(message) => write!(f, "invalid fixture: {message}"),
        }
    }
}

impl std::error::Error for EvaluationError {}

/// What a policy decided, readable by name.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The decisions as the host decoded them.
    pub decisions: Vec<Decision<'static>>,
    /// Lines the policy logged.
    pub logs: Vec<LogLine>,
    /// Size of the encoded decisions.
    pub output_bytes: usize,
    doc: OwnedSnapshot,
}

impl Outcome {
    /// The decision for workload `name`, if the policy made one.
    pub fn decision(&self, name: &str) -> Option<&Decision<'static>> {
        let index = self.doc.workloads.iter().position(|w| w.name == name)? as u32;
        self.decisions.iter().find(|d| d.workload == index)
    }

    /// Where `name` was placed: the node's name and the device indexes of its GPUs on that node
    /// (empty for a CPU placement). `None` if it was not placed.
    pub fn placement(&self, name: &str) -> Option<(&str, Vec<u32>)> {
        match &self.decision(name)?.action {
            Action::Place { node, gpus } => {
                let node_name = self.doc.nodes.get(*node as usize)?.name.as_str();
                let devices = gpus.iter().filter_map(|g| self.doc.gpus.get(*g as usize)).map(|g| g.device_index);
                Some((node_name, devices.collect()))
            }
            _ => None,
        }
    }

    /// The node `name` was placed on.
    pub fn placed_on(&self, name: &str) -> Option<&str> {
        self.placement(name).map(|(node, _)| node)
    }

    /// The policy decided to keep `name` pending.
    pub fn is_kept_pending(&self, name: &str) -> bool {
        self.decision(name).is_some_and(|d| d.action == Action::KeepPending)
    }

    /// The policy decided to preempt `name`.
    pub fn is_preempted(&self, name: &str) -> bool {
        self.decision(name).is_some_and(|d| d.action == Action::Preempt)
    }

    /// The reason given for `name`.
    pub fn reason(&self, name: &str) -> Option<&str> {
        self.decision(name).map(|d| d.reason.as_ref())
    }

    /// Names of the placed workloads, in decision order.
    pub fn placed(&self) -> Vec<&str> {
        self.decisions
            .iter()
            .filter(|d| matches!(d.action, Action::Place { .. }))
            .filter_map(|d| self.doc.workloads.get(d.workload as usize))
            .map(|w| w.name.as_str())
            .collect()
    }
}

/// A small, fast, seedable generator (SplitMix64), so fixtures and randomised tests need no
/// dependency and repeat exactly: the same seed, the same numbers.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator that starts from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
