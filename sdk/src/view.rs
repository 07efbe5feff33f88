//! Questions policy authors ask of a snapshot, answered once here: which GPUs of a node are free,
//! does a GPU fit a workload, which workloads are pending and in what order.
//!
//! Every lookup by index returns `Option` or an empty iterator for an index that names nothing, so
//! no helper panics.

use crate::abi::{
    Gpu, Node, NodeState, ReplicaVariant, Service, Settings, Sharing, Snapshot, Tenant, WHOLE_GPU_MILLI, Workload,
    WorkloadClass, WorkloadState,
};

/// Milliseconds in a day.
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

impl<'a> Snapshot<'a> {
    /// The tenant at `index`.
    pub fn tenant(&self, index: u32) -> Option<&Tenant<'a>> {
        self.tenants.get(index as usize)
    }

    /// The node at `index`.
    pub fn node(&self, index: u32) -> Option<&Node<'a>> {
        self.nodes.get(index as usize)
    }

    /// The GPU at `index`.
    pub fn gpu(&self, index: u32) -> Option<&Gpu<'a>> {
        self.gpus.get(index as usize)
    }

    /// The workload at `index`.
    pub fn workload(&self, index: u32) -> Option<&Workload<'a>> {
        self.workloads.get(index as usize)
    }

    /// The service at `index` (ABI 1.3).
    pub fn service(&self, index: u32) -> Option<&Service<'a>> {
        self.services.get(index as usize)
    }

    /// `(index, service)` for every service.
    pub fn services_indexed(&self) -> impl Iterator<Item = (u32, &Service<'a>)> + '_ {
        self.services.iter().enumerate().map(|(i, s)| (i as u32, s))
    }

    /// The service `workload` is a replica of; `None` for a job.
    pub fn service_of(&self, workload: &Workload<'_>) -> Option<&Service<'a>> {
        workload.service.and_then(|s| self.service(s))
    }

    /// `(index, workload)` for the replicas of service `service` (pending, running and stopping),
    /// in table order; none for an index that names no service.
    pub fn replicas(&self, service: u32) -> impl Iterator<Item = (u32, &Workload<'a>)> + '_ {
        self.workloads_indexed().filter(move |(_, w)| w.service == Some(service))
    }

    /// The tenant this evaluation is for; `None` in the platform scope.
    pub fn scope(&self) -> Option<&Tenant<'a>> {
        self.scope_tenant.and_then(|index| self.tenant(index))
    }

    /// The settings, or all-zero settings when the platform has none.
    pub fn settings_or_default(&self) -> Settings {
        self.settings.unwrap_or_default()
    }

    /// `(index, node)` for every node.
    pub fn nodes_indexed(&self) -> impl Iterator<Item = (u32, &Node<'a>)> + '_ {
        self.nodes.iter().enumerate().map(|(i, n)| (i as u32, n))
    }

    /// `(index, node)` for nodes that take work.
    pub fn ready_nodes(&self) -> impl Iterator<Item = (u32, &Node<'a>)> + '_ {
        self.nodes_indexed().filter(|(_, n)| n.is_ready())
    }

    /// `(gpu index, gpu)` for every GPU of `node` (none for an index that names no node).
    pub fn node_gpus(&self, node: u32) -> impl Iterator<Item = (u32, &Gpu<'a>)> + '_ {
        let range = self.node(node).map(Node::gpu_range).unwrap_or(0..0);
        let start = range.start as u32;
        self.gpus.get(range).unwrap_or(&[]).iter().enumerate().map(move |(i, g)| (start + i as u32, g))
    }

    /// `(gpu index, gpu)` for the GPUs of `node` that no workload holds.
    pub fn free_gpus(&self, node: u32) -> impl Iterator<Item = (u32, &Gpu<'a>)> + '_ {
        self.node_gpus(node).filter(|(_, g)| g.is_free())
    }

    /// `(gpu index, gpu)` for the GPUs `workload` holds.
    pub fn held_gpus(&self, workload: u32) -> impl Iterator<Item = (u32, &Gpu<'a>)> + '_ {
        self.gpus.iter().enumerate().filter(move |(_, g)| g.holder == Some(workload)).map(|(i, g)| (i as u32, g))
    }

    /// `(index, workload)` for every workload.
    pub fn workloads_indexed(&self) -> impl Iterator<Item = (u32, &Workload<'a>)> + '_ {
        self.workloads.iter().enumerate().map(|(i, w)| (i as u32, w))
    }

    /// `(index, workload)` for pending workloads, in table order.
    pub fn pending(&self) -> impl Iterator<Item = (u32, &Workload<'a>)> + '_ {
        self.workloads_indexed().filter(|(_, w)| w.is_pending())
    }

    /// `(index, workload)` for running workloads, in table order.
    pub fn running(&self) -> impl Iterator<Item = (u32, &Workload<'a>)> + '_ {
        self.workloads_indexed().filter(|(_, w)| w.is_running())
    }

    /// Pending workloads, highest priority first, then earliest submitted, then table order (so the
    /// order is total and the same on every run).
    pub fn pending_by_priority(&self) -> Vec<(u32, &Workload<'a>)> {
        let mut pending: Vec<_> = self.pending().collect();
        pending.sort_by(|(ia, a), (ib, b)| {
            b.priority.cmp(&a.priority).then(a.submitted_ms.cmp(&b.submitted_ms)).then(ia.cmp(ib))
        });
        pending
    }

    /// The hour of the day (0..24, UTC) at `now_ms`.
    pub fn hour_utc(&self) -> u32 {
        ((self.now_ms % DAY_MS) / (60 * 60 * 1000)) as u32
    }

    /// Whether `now_ms` falls between 22:00 and 06:00 UTC. The platform's own night window is
    /// resolved by the host into `Settings::night_training_bonus` (0 outside it), which
    /// [`Snapshot::effective_priority`] applies; this is for policies with their own notion of night.
    pub fn is_night_utc(&self) -> bool {
        let hour = self.hour_utc();
        !(6..22).contains(&hour)
    }

    /// The workload's priority with the settings applied: `night_training_bonus` is added to
    /// training and fine-tuning. The host resolves the platform's night window, so the bonus in the
    /// snapshot is non-zero only while it is night by the platform's settings.
    pub fn effective_priority(&self, workload: &Workload<'_>) -> i32 {
        let bonus = match self.settings {
            Some(settings) if workload.class.is_training_like() => settings.night_training_bonus,
            _ => 0,
        };
        workload.priority.saturating_add(bonus)
    }

    /// GPUs no workload holds, on nodes that take work.
    pub fn free_gpu_total(&self) -> u32 {
        self.gpus.iter().filter(|g| g.is_free() && self.node(g.node).is_some_and(Node::is_ready)).count() as u32
    }
}

impl Tenant<'_> {
    /// What its running work holds, in thousandths of a GPU: `running_gpu_milli`, or
    /// `running_gpus` whole GPUs from a snapshot that predates ABI 1.2 (milli 0, GPUs held).
    pub fn held_milli(&self) -> u32 {
        if self.running_gpu_milli == 0 {
            self.running_gpus.saturating_mul(WHOLE_GPU_MILLI)
        } else {
            self.running_gpu_milli
        }
    }

    /// Its guarantee, in thousandths of a GPU.
    pub fn guaranteed_milli(&self) -> u32 {
        self.guaranteed_gpus.saturating_mul(WHOLE_GPU_MILLI)
    }

    /// The most its work may hold, in thousandths of a GPU (ABI 1.7's `gpu_limit`); `None` when it
    /// has no limit.
    pub fn limit_milli(&self) -> Option<u32> {
        (self.gpu_limit > 0).then(|| self.gpu_limit.saturating_mul(WHOLE_GPU_MILLI))
    }
}

impl Service<'_> {
    /// Load one replica of `variant` carries at the latency target (0 for a CPU replica of a
    /// service without a CPU variant).
    pub fn capacity_of(&self, variant: ReplicaVariant) -> f32 {
        match variant {
            ReplicaVariant::Gpu => self.capacity,
            ReplicaVariant::Cpu => self.cpu_capacity,
            _ => 0.0,
        }
    }

    /// Replicas the autoscaler wants, GPU and CPU.
    pub fn desired_replicas(&self) -> u32 {
        self.desired_gpu.saturating_add(self.desired_cpu)
    }

    /// Replicas placed now, GPU and CPU.
    pub fn placed_replicas(&self) -> u32 {
        self.placed_gpu.saturating_add(self.placed_cpu)
    }

    /// Replicas waiting for a place, GPU and CPU.
    pub fn pending_replicas(&self) -> u32 {
        self.pending_gpu.saturating_add(self.pending_cpu)
    }

    /// Load the placed replicas carry together.
    pub fn placed_capacity(&self) -> f32 {
        self.placed_gpu as f32 * self.capacity + self.placed_cpu as f32 * self.cpu_capacity
    }

    /// Load the placed replicas cannot carry of what the autoscaler provisions for (0 when they
    /// carry it all, or while the reports are stale): what placing its pending replicas serves.
    pub fn unserved_demand(&self) -> f32 {
        (self.demand - self.placed_capacity()).max(0.0)
    }
}

impl Node<'_> {
    /// Takes work.
    pub fn is_ready(&self) -> bool {
        self.state == NodeState::Ready
    }

    /// Its GPUs' positions in [`Snapshot::gpus`].
    pub fn gpu_range(&self) -> std::ops::Range<usize> {
        let start = self.gpu_first as usize;
        start..start.saturating_add(self.gpu_count as usize)
    }

    /// Has at least one GPU.
    pub fn has_gpus(&self) -> bool {
        self.gpu_count > 0
    }

    /// Has `cpu_millis` and `memory_mb` free.
    pub fn has_room_for(&self, cpu_millis: u32, memory_mb: u32) -> bool {
        self.cpu_millis_free >= cpu_millis && self.memory_mb_free >= memory_mb
    }

    /// Can run `workload` at all, whatever is free: a container workload needs a node with a
    /// container engine (ABI 1.4). Every placement the host accepts satisfies it.
    pub fn can_run(&self, workload: &Workload<'_>) -> bool {
        !workload.container || self.containers
    }
}

impl Gpu<'_> {
    /// No workload holds it, not even a share of it. (In a tenant's view another tenant's share
    /// has no holder index but counts in `sharers`.)
    pub fn is_free(&self) -> bool {
        self.holder.is_none() && self.sharers == 0
    }

    /// A MIG instance (only work asking for its profile runs on it).
    pub fn is_mig(&self) -> bool {
        self.sharing == Sharing::Mig
    }

    /// Several workloads may hold shares of it at once (time-slicing or MPS).
    pub fn is_shareable(&self) -> bool {
        matches!(self.sharing, Sharing::TimeSlicing | Sharing::Mps)
    }

    /// Thousandths of it no workload holds (1000 for a free GPU). A held GPU that names no
    /// sharers (a snapshot from before ABI 1.2) is held whole.
    pub fn free_share_milli(&self) -> u32 {
        match (self.sharers, self.holder) {
            (0, None) => WHOLE_GPU_MILLI,
            (0, Some(_)) => 0,
            _ => self.free_milli.min(WHOLE_GPU_MILLI),
        }
    }

    /// Memory a new share could reserve, MiB: total minus the larger of live use and the slices
    /// already reserved.
    pub fn share_memory_free_mb(&self) -> u32 {
        self.memory_mb.saturating_sub(self.memory_used_mb.max(self.memory_reserved_mb))
    }

    /// Memory not in use now (total minus live use), MiB.
    pub fn memory_free_mb(&self) -> u32 {
        self.memory_mb.saturating_sub(self.memory_used_mb)
    }

    /// Could serve one of `workload`'s GPUs: enough free memory now and an allowed model. Says
    /// nothing of whether another workload holds it (see [`Gpu::is_free`]).
    pub fn fits(&self, workload: &Workload<'_>) -> bool {
        workload.gpu_need().fits(self)
    }
}

impl<'a> Workload<'a> {
    pub fn is_pending(&self) -> bool {
        self.state == WorkloadState::Pending
    }

    /// Running or scheduled.
    pub fn is_running(&self) -> bool {
        self.state == WorkloadState::Running
    }

    /// Being preempted or cancelled: still holds its GPUs until its process is gone.
    pub fn is_stopping(&self) -> bool {
        self.state == WorkloadState::Stopping
    }

    /// Holds resources now: running, scheduled or stopping.
    pub fn holds_resources(&self) -> bool {
        matches!(self.state, WorkloadState::Running | WorkloadState::Stopping)
    }

    /// A replica of an elastic inference service (ABI 1.3; see [`Snapshot::service_of`]).
    pub fn is_replica(&self) -> bool {
        self.service.is_some()
    }

    /// Needs at least one GPU (else it is placed on CPU).
    pub fn needs_gpu(&self) -> bool {
        self.gpu_count > 0
    }

    /// Asks for a fraction of one GPU (`gpu_milli` below 1000), which it shares with others on a
    /// time-sliced or MPS GPU; on a GPU that is not shared it gets the whole GPU.
    pub fn is_share(&self) -> bool {
        self.gpu_count == 1 && self.gpu_milli < WHOLE_GPU_MILLI && self.mig_profile.is_empty()
    }

    /// A member of a gang across nodes (ABI 1.6): placed only with every other member of its
    /// gang, each on a node of its own ([`crate::gang::Gangs`]).
    pub fn in_gang(&self) -> bool {
        self.gang_size > 1 && !self.gang_id.is_empty()
    }

    /// Asks for a MIG instance of a profile.
    pub fn asks_mig(&self) -> bool {
        !self.mig_profile.is_empty()
    }

    /// The GPU capacity it asks for, in thousandths: its share for a fraction of a GPU, else 1000
    /// per GPU (what quotas and fair share count).
    pub fn gpu_demand_milli(&self) -> u32 {
        if self.is_share() { self.gpu_milli.max(1) } else { self.gpu_count.saturating_mul(WHOLE_GPU_MILLI) }
    }

    /// The allowed GPU models, trimmed, empty entries skipped. No models means any.
    pub fn allowed_models(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.gpu_models.split(',').map(str::trim).filter(|m| !m.is_empty())
    }

    /// Whether `model` is allowed: see [`model_allowed`].
    pub fn allows_model(&self, model: &str) -> bool {
        model_allowed(self.gpu_models, model)
    }

    /// What one of its GPUs must offer, with the model list parsed once (for loops over many GPUs).
    pub fn gpu_need(&self) -> GpuNeed<'a> {
        GpuNeed {
            count: self.gpu_count,
            memory_mb: self.gpu_memory_mb,
            models: self.allowed_models().collect(),
            milli: if self.is_share() { self.gpu_milli.max(1) } else { WHOLE_GPU_MILLI },
            mig_profile: self.mig_profile.trim(),
        }
    }

    /// What it needs free on one node, in words, for reasons: "2 free GPUs with ≥ 1024 MiB, 1000
    /// mCPU and 4096 MiB of host memory" (the host part alone for CPU work).
    pub fn needs_in_words(&self) -> String {
        let host = format!("{} mCPU and {} MiB of host memory", self.cpu_millis, self.memory_mb);
        if self.needs_gpu() { format!("{}, {host}", self.gpu_need().describe("free")) } else { host }
    }

    /// Milliseconds since it was submitted.
    pub fn waiting_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.submitted_ms)
    }

    /// Milliseconds it has been running; 0 when not running.
    pub fn running_ms(&self, now_ms: u64) -> u64 {
        if self.started_ms == 0 { 0 } else { now_ms.saturating_sub(self.started_ms) }
    }
}

impl WorkloadClass {
    /// Training or fine-tuning.
    pub fn is_training_like(self) -> bool {
        matches!(self, WorkloadClass::Training | WorkloadClass::FineTuning)
    }

    /// Real-time or batch inference.
    pub fn is_inference(self) -> bool {
        matches!(self, WorkloadClass::RealtimeInference | WorkloadClass::BatchInference)
    }
}

/// What each GPU of a workload must offer; made by [`Workload::gpu_need`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNeed<'a> {
    /// How many GPUs.
    pub count: u32,
    /// Free memory on each, MiB.
    pub memory_mb: u32,
    /// Allowed models; empty allows any.
    pub models: Vec<&'a str>,
    /// Thousandths of each GPU: below 1000 for a share of one GPU.
    pub milli: u32,
    /// The MIG profile asked for; empty for none.
    pub mig_profile: &'a str,
}

impl GpuNeed<'_> {
    /// `gpu` has the memory free now and an allowed model (whether it is held is not considered).
    ///
    /// A MIG instance serves only work asking for its profile, and work asking for a profile runs
    /// only on an instance of it.
    pub fn fits(&self, gpu: &Gpu<'_>) -> bool {
        gpu.memory_free_mb() >= self.memory_mb && self.allows_model(gpu.model) && self.device_kind_fits(gpu)
    }

    /// For a share: `gpu` is shareable, of an allowed model, and has `free_milli` thousandths and
    /// `memory_free_mb` of unreserved memory for it (the caller says what is left after the cycle's
    /// earlier placements; see [`crate::plan::Plan::fits_share`]).
    pub fn fits_share(&self, gpu: &Gpu<'_>, free_milli: u32, memory_free_mb: u32) -> bool {
        self.is_share()
            && gpu.is_shareable()
            && free_milli >= self.milli
            && memory_free_mb >= self.memory_mb
            && self.allows_model(gpu.model)
    }

    /// A share of one GPU (below 1000 thousandths).
    pub fn is_share(&self) -> bool {
        self.count == 1 && self.milli < WHOLE_GPU_MILLI && self.mig_profile.is_empty()
    }

    /// MIG instances and MIG requests go together, profiles compared ignoring ASCII case.
    pub fn device_kind_fits(&self, gpu: &Gpu<'_>) -> bool {
        if gpu.is_mig() || !self.mig_profile.is_empty() {
            gpu.is_mig() && same_model(gpu.mig_profile, self.mig_profile)
        } else {
            true
        }
    }

    /// Whether `model` is allowed (the rule of [`model_allowed`], on the list parsed once).
    pub fn allows_model(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| same_model(m, model))
    }

    /// "4 GPUs with ≥ 40960 MiB (H100 or A100)": the need in words, for reasons. With `adjective`
    /// "free": "4 free GPUs with ≥ 40960 MiB".
    pub fn describe(&self, adjective: &str) -> String {
        if !self.mig_profile.is_empty() {
            let adjective = if adjective.is_empty() { String::new() } else { format!("{adjective} ") };
            return format!("a {adjective}MIG {} instance", self.mig_profile);
        }
        if self.is_share() {
            let mut text = format!("{}/1000 of a shared GPU with ≥ {} MiB unreserved", self.milli, self.memory_mb);
            if !self.models.is_empty() {
                text.push_str(&format!(" ({})", self.models.join(" or ")));
            }
            return text;
        }
        let gpus = if self.count == 1 { "GPU" } else { "GPUs" };
        let adjective = if adjective.is_empty() { String::new() } else { format!("{adjective} ") };
        let mut text = format!("{} {adjective}{gpus} with ≥ {} MiB", self.count, self.memory_mb);
        if !self.models.is_empty() {
            text.push_str(&format!(" ({})", self.models.join(" or ")));
        }
        text
    }
}

/// Whether two GPU model names name the same model: equal ignoring ASCII case and surrounding
/// spaces (`"h100-sxm"` is an `"H100-SXM "`).
pub fn same_model(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// The one rule for GPU models, which every policy, the host's check and the simulator apply: a
/// workload's `allowed` list (comma-separated, as the ABI carries it) allows `model` when it names
/// no model at all, or when one of its entries is the [same model](same_model).
pub fn model_allowed(allowed: &str, model: &str) -> bool {
    // Most work names no model: asked for every GPU a placement or a shortfall considers.
    if allowed.is_empty() {
        return true;
    }
    let mut entries = allowed.split(',').map(str::trim).filter(|m| !m.is_empty()).peekable();
    entries.peek().is_none() || entries.any(|m| same_model(m, model))
}

/// Thousandths of a GPU as GPUs with up to three decimals, for reasons: `2`, `0.25`, `1.5`.
pub fn gpus_in_words(milli: u64) -> String {
    let (whole, part) = (milli / 1000, milli % 1000);
    if part == 0 { whole.to_string() } else { format!("{whole}.{part:03}").trim_end_matches('0').to_owned() }
}
