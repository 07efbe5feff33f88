//! Records to bytes.
//!
//! A snapshot buffer is laid out as: header, the six tables in header order, then the string heap.
//! The header and every record size are multiples of 8, so every table starts 8-aligned (not
//! required by the ABI, but cheap and kind to guests that load aligned). Identical strings (GPU
//! models, tenant names) are stored once; those that are one per record (a workload's id and name, a
//! node's name) are stored as they come.

use std::collections::HashMap;

use super::{
    AbiError, BufferKind, DECISION_SIZE, DECISIONS_HEADER_SIZE, DECISIONS_MAGIC, Decision, GPU_SIZE, NODE_SIZE, NONE,
    SERVICE_SIZE, SETTINGS_SIZE, SNAPSHOT_HEADER_SIZE, SNAPSHOT_MAGIC, Snapshot, TENANT_SIZE, WORKLOAD_SIZE,
};
use crate::abi::{ABI_VERSION, Action};

/// Encodes a snapshot for a guest.
///
/// # Panics
/// If the buffer would pass 4 GiB, which the ABI's 32-bit offsets cannot address (a fleet a
/// thousand times larger than the design size). [`try_encode_snapshot`] returns that as an error.
pub fn encode_snapshot(snapshot: &Snapshot<'_>) -> Vec<u8> {
    match try_encode_snapshot(snapshot) {
        Ok(bytes) => bytes,
        Err(error) => panic!("cannot encode snapshot: {error}"),
    }
}

/// Encodes a snapshot for a guest, or says why it cannot (larger than 4 GiB).
pub fn try_encode_snapshot(snapshot: &Snapshot<'_>) -> Result<Vec<u8>, AbiError> {
    let counts = [
        (snapshot.tenants.len(), TENANT_SIZE),
        (snapshot.nodes.len(), NODE_SIZE),
        (snapshot.gpus.len(), GPU_SIZE),
        (snapshot.workloads.len(), WORKLOAD_SIZE),
        (usize::from(snapshot.settings.is_some()), SETTINGS_SIZE),
        (snapshot.services.len(), SERVICE_SIZE),
    ];
    let mut fixed = SNAPSHOT_HEADER_SIZE as u64;
    let mut table_offsets = [0u64; 6];
    for (slot, (count, size)) in table_offsets.iter_mut().zip(counts) {
        *slot = fixed;
        fixed += count as u64 * size as u64;
    }
    let too_large = |len: u64| AbiError::TooLarge { buffer: BufferKind::Snapshot, len };
    if fixed > u64::from(u32::MAX) {
        return Err(too_large(fixed));
    }
    let mut heap = StringHeap::new(fixed);
    let mut out = Vec::with_capacity(fixed as usize + 64 * snapshot.workloads.len());

    // Header.
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    put_u32(&mut out, ABI_VERSION);
    put_u64(&mut out, snapshot.now_ms);
    let table = |out: &mut Vec<u8>, i: usize| {
        let ((count, size), offset) = (counts[i], table_offsets[i]);
        put_u32(out, offset as u32);
        put_u32(out, count as u32);
        put_u32(out, size as u32);
    };
    for i in 0..5 {
        table(&mut out, i);
    }
    heap.put(&mut out, snapshot.params);
    put_u32(&mut out, snapshot.scope_tenant.unwrap_or(NONE));
    // ABI 1.3: appended after the 88 bytes earlier guests read.
    table(&mut out, 5);
    put_u32(&mut out, 0);
    debug_assert_eq!(out.len(), SNAPSHOT_HEADER_SIZE);

    for tenant in &snapshot.tenants {
        heap.put(&mut out, tenant.name);
        put_u32(&mut out, tenant.guaranteed_gpus);
        put_u32(&mut out, tenant.weight);
        put_u32(&mut out, tenant.running_gpus);
        put_i32(&mut out, tenant.tier);
        put_f32(&mut out, tenant.decayed_gpu_hours);
        put_u32(&mut out, u32::from(tenant.may_borrow));
        put_u32(&mut out, tenant.running_gpu_milli);
        put_u32(&mut out, 0);
    }
    for node in &snapshot.nodes {
        heap.put_unique(&mut out, node.name);
        put_u32(&mut out, node.state.code());
        put_u32(&mut out, node.cpu_millis);
        put_u32(&mut out, node.cpu_millis_free);
        put_u32(&mut out, node.memory_mb);
        put_u32(&mut out, node.memory_mb_free);
        put_u32(&mut out, node.gpu_first);
        put_u32(&mut out, node.gpu_count);
        put_f32(&mut out, node.cost_per_hour);
        put_f32(&mut out, node.cpu_util);
        put_u32(&mut out, u32::from(node.simulated) | u32::from(node.containers) << 1);
    }
    for gpu in &snapshot.gpus {
        put_u32(&mut out, gpu.node);
        put_u32(&mut out, gpu.device_index);
        heap.put(&mut out, gpu.model);
        put_u32(&mut out, gpu.memory_mb);
        put_u32(&mut out, gpu.memory_used_mb);
        put_f32(&mut out, gpu.util);
        put_u32(&mut out, gpu.nvlink_group.unwrap_or(NONE));
        put_u32(&mut out, gpu.holder.unwrap_or(NONE));
        put_u32(&mut out, u32::from(gpu.simulated));
        put_u32(&mut out, gpu.sharing.code());
        put_u32(&mut out, gpu.free_milli);
        put_u32(&mut out, gpu.memory_reserved_mb);
        put_u32(&mut out, gpu.sharers);
        heap.put(&mut out, gpu.mig_profile);
    }
    for workload in &snapshot.workloads {
        heap.put_unique(&mut out, workload.id);
        heap.put_unique(&mut out, workload.name);
        put_u32(&mut out, workload.tenant);
        put_u32(&mut out, workload.class.code());
        put_u32(&mut out, workload.state.code());
        put_i32(&mut out, workload.priority);
        put_u32(&mut out, workload.gpu_count);
        put_u32(&mut out, workload.gpu_memory_mb);
        heap.put(&mut out, workload.gpu_models);
        put_u32(&mut out, workload.cpu_millis);
        put_u32(&mut out, workload.memory_mb);
        put_u64(&mut out, workload.submitted_ms);
        put_u64(&mut out, workload.started_ms);
        put_u32(&mut out, workload.node.unwrap_or(NONE));
        let flags = u32::from(workload.preemptible)
            | u32::from(workload.checkpointable) << 1
            | u32::from(workload.cpu_capable) << 2
            | u32::from(workload.gang) << 3
            | u32::from(workload.container) << 4;
        put_u32(&mut out, flags);
        put_u32(&mut out, workload.expected_duration_s);
        put_u32(&mut out, workload.preemptions_last_hour);
        put_u32(&mut out, workload.gpu_milli);
        heap.put(&mut out, workload.mig_profile);
        put_u32(&mut out, 0);
        put_u32(&mut out, workload.service.unwrap_or(NONE));
        put_u32(&mut out, workload.replica_variant.code());
    }
    if let Some(settings) = &snapshot.settings {
        put_u32(&mut out, settings.burst_reserve_gpus);
        put_u32(&mut out, u32::from(settings.realtime_first));
        put_u32(&mut out, settings.min_runtime_s);
        put_u32(&mut out, settings.grace_period_s);
        put_u32(&mut out, settings.max_preemptions_per_hour);
        put_i32(&mut out, settings.night_training_bonus);
        put_u32(&mut out, u32::from(settings.checkpointable_only));
        put_u32(&mut out, 0);
    }
    for service in &snapshot.services {
        heap.put(&mut out, service.name);
        put_u32(&mut out, service.tenant);
        put_u32(&mut out, service.class.code());
        put_u32(&mut out, service.metric.code());
        put_u32(&mut out, service.min_replicas);
        put_u32(&mut out, service.max_replicas);
        put_f32(&mut out, service.capacity);
        put_f32(&mut out, service.cpu_capacity);
        put_f32(&mut out, service.demand);
        put_f32(&mut out, service.latest);
        put_u32(&mut out, service.desired_gpu);
        put_u32(&mut out, service.desired_cpu);
        put_u32(&mut out, service.placed_gpu);
        put_u32(&mut out, service.placed_cpu);
        put_u32(&mut out, service.pending_gpu);
        put_u32(&mut out, service.pending_cpu);
        put_u32(&mut out, service.gpu_milli_per_replica);
        let flags =
            u32::from(service.has_cpu_variant) | u32::from(service.draining) << 1 | u32::from(service.stale) << 2;
        put_u32(&mut out, flags);
        put_u32(&mut out, 0);
    }
    debug_assert_eq!(out.len() as u64, fixed);
    let total = fixed + heap.bytes.len() as u64;
    if total > u64::from(u32::MAX) {
        return Err(too_large(total));
    }
    out.extend_from_slice(&heap.bytes);
    Ok(out)
}

/// Encodes decisions for the host.
///
/// # Panics
/// If the buffer would pass 4 GiB ([`try_encode_decisions`] returns that as an error).
pub fn encode_decisions(decisions: &[Decision<'_>]) -> Vec<u8> {
    match try_encode_decisions(decisions) {
        Ok(bytes) => bytes,
        Err(error) => panic!("cannot encode decisions: {error}"),
    }
}

/// Encodes decisions for the host, or says why it cannot (larger than 4 GiB).
///
/// Layout: header, the records, every GPU list (4-aligned, as every size before it is a multiple
/// of 4), then the reasons. A reason equal to the previous decision's is stored once.
pub fn try_encode_decisions(decisions: &[Decision<'_>]) -> Result<Vec<u8>, AbiError> {
    let gpu_entries: u64 = decisions
        .iter()
        .map(|d| match &d.action {
            Action::Place { gpus, .. } => gpus.len() as u64,
            _ => 0,
        })
        .sum();
    let reason_bytes: u64 = decisions.iter().map(|d| d.reason.len() as u64).sum();
    let records_end = DECISIONS_HEADER_SIZE as u64 + decisions.len() as u64 * DECISION_SIZE as u64;
    let upper_bound = records_end + gpu_entries * 4 + reason_bytes;
    if upper_bound > u64::from(u32::MAX) {
        return Err(AbiError::TooLarge { buffer: BufferKind::Decisions, len: upper_bound });
    }
    let mut out = Vec::with_capacity(upper_bound as usize);
    let mut tail = Vec::with_capacity((gpu_entries * 4) as usize);
    out.extend_from_slice(&DECISIONS_MAGIC);
    put_u32(&mut out, decisions.len() as u32);

    // GPU lists go first in the tail, so their offsets are known before any reason is placed.
    let mut reasons = Vec::with_capacity(reason_bytes as usize);
    let reasons_base = records_end + gpu_entries * 4;
    let mut previous_reason: Option<(&str, u32)> = None;
    for decision in decisions {
        put_u32(&mut out, decision.action.code());
        put_u32(&mut out, decision.workload);
        match &decision.action {
            Action::Place { node, gpus } => {
                put_u32(&mut out, *node);
                put_u32(&mut out, 0);
                let offset = if gpus.is_empty() { 0 } else { records_end + tail.len() as u64 };
                put_u32(&mut out, offset as u32);
                put_u32(&mut out, gpus.len() as u32);
                for gpu in gpus {
                    put_u32(&mut tail, *gpu);
                }
            }
            Action::Preempt | Action::KeepPending => {
                put_u32(&mut out, NONE);
                put_u32(&mut out, 0);
                put_u32(&mut out, 0);
                put_u32(&mut out, 0);
            }
        }
        let reason: &str = &decision.reason;
        let offset = match previous_reason {
            _ if reason.is_empty() => 0,
            Some((previous, offset)) if previous == reason => offset,
            _ => {
                let offset = (reasons_base + reasons.len() as u64) as u32;
                reasons.extend_from_slice(reason.as_bytes());
                offset
            }
        };
        previous_reason = Some((reason, offset));
        put_u32(&mut out, offset);
        put_u32(&mut out, reason.len() as u32);
    }
    out.extend_from_slice(&tail);
    out.extend_from_slice(&reasons);
    Ok(out)
}

/// Strings stored once each, after the fixed part of the buffer.
struct StringHeap<'s> {
    base: u64,
    bytes: Vec<u8>,
    seen: HashMap<&'s str, u32>,
}

impl<'s> StringHeap<'s> {
    fn new(base: u64) -> Self {
        StringHeap { base, bytes: Vec::new(), seen: HashMap::new() }
    }

    /// Writes the `{offset, len}` of `text` to `out`, storing `text` if it is new. Offsets past 4 GiB
    /// are caught by the caller's final size check (they wrap here, and the buffer is refused).
    fn put(&mut self, out: &mut Vec<u8>, text: &'s str) {
        let offset = if text.is_empty() {
            0
        } else if let Some(&offset) = self.seen.get(text) {
            offset
        } else {
            let offset = (self.base + self.bytes.len() as u64) as u32;
            self.bytes.extend_from_slice(text.as_bytes());
            self.seen.insert(text, offset);
            offset
        };
        put_u32(out, offset);
        put_u32(out, text.len() as u32);
    }

    /// [`put`](Self::put) for text that rarely repeats (a workload's id and name, a node's name): stored without
    /// looking for an earlier copy, since hashing 15,000 ids to find none was a third of the
    /// encoding's time. The guest reads `{offset, len}` either way.
    fn put_unique(&mut self, out: &mut Vec<u8>, text: &str) {
        let offset = if text.is_empty() { 0 } else { (self.base + self.bytes.len() as u64) as u32 };
        self.bytes.extend_from_slice(text.as_bytes());
        put_u32(out, offset);
        put_u32(out, text.len() as u32);
    }
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_i32(out: &mut Vec<u8>, value: i32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_f32(out: &mut Vec<u8>, value: f32) {
    out.extend_from_slice(&value.to_le_bytes());
}
