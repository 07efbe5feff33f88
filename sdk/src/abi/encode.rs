//! Records to bytes.
//!
//! A snapshot buffer is laid out as: header, the seven tables in header order, then the string heap.
//! The header and every record size are multiples of 8, so every table starts 8-aligned (not
//! required by the ABI, but cheap and kind to guests that load aligned). Identical strings (GPU
//! models, tenant names) are stored once; those that are one per record (a workload's id and name, a
//! node's name) are stored as they come.

use std::collections::HashMap;

use super::layout::{Record, set};
use super::{
    ARRIVAL_SIZE, AbiError, BufferKind, DECISION, DECISION_SIZE, DECISIONS_HEADER_SIZE, DECISIONS_MAGIC, Decision,
    GPU_SIZE, NODE_SIZE, NONE, SERVICE_SIZE, SETTINGS_SIZE, SNAPSHOT_HEADER, SNAPSHOT_HEADER_SIZE, SNAPSHOT_MAGIC,
    Snapshot, TENANT_SIZE, WORKLOAD_SIZE,
};
use crate::abi::{ABI_VERSION, Action};

/// The header's table descriptors, in the order of the tables in the buffer.
const TABLES: [&str; 7] = ["tenants", "nodes", "gpus", "workloads", "settings", "services", "arrivals"];

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
        (snapshot.arrivals.len(), ARRIVAL_SIZE),
    ];
    let mut fixed = SNAPSHOT_HEADER_SIZE as u64;
    let mut table_offsets = [0u64; 7];
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
    let mut header = [0u8; SNAPSHOT_HEADER_SIZE];
    set(&mut header, SNAPSHOT_HEADER.offset("magic"), SNAPSHOT_MAGIC);
    set(&mut header, SNAPSHOT_HEADER.offset("abi_version"), ABI_VERSION.to_le_bytes());
    set(&mut header, SNAPSHOT_HEADER.offset("now_ms"), snapshot.now_ms.to_le_bytes());
    for (i, name) in TABLES.iter().enumerate() {
        let ((count, size), offset) = (counts[i], table_offsets[i]);
        let at = SNAPSHOT_HEADER.offset(name);
        set(&mut header, at, (offset as u32).to_le_bytes());
        set(&mut header, at + 4, (count as u32).to_le_bytes());
        set(&mut header, at + 8, (size as u32).to_le_bytes());
    }
    let params = SNAPSHOT_HEADER.offset("params");
    heap.put(&mut header[params..params + 8], snapshot.params);
    set(&mut header, SNAPSHOT_HEADER.offset("scope_tenant"), snapshot.scope_tenant.unwrap_or(NONE).to_le_bytes());
    out.extend_from_slice(&header);

    // Tables, in header order.
    put_records(&mut out, &mut heap, &snapshot.tenants);
    put_records(&mut out, &mut heap, &snapshot.nodes);
    put_records(&mut out, &mut heap, &snapshot.gpus);
    put_records(&mut out, &mut heap, &snapshot.workloads);
    put_records(&mut out, &mut heap, snapshot.settings.as_slice());
    put_records(&mut out, &mut heap, &snapshot.services);
    put_records(&mut out, &mut heap, &snapshot.arrivals);
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
        let start = out.len();
        out.resize(start + DECISION_SIZE, 0);
        let rec = &mut out[start..];
        set(rec, DECISION.offset("kind"), decision.action.code().to_le_bytes());
        set(rec, DECISION.offset("workload"), decision.workload.to_le_bytes());
        let gpus_at = DECISION.offset("gpus");
        match &decision.action {
            Action::Place { node, gpus } => {
                set(rec, DECISION.offset("node"), node.to_le_bytes());
                let offset = if gpus.is_empty() { 0 } else { records_end + tail.len() as u64 };
                set(rec, gpus_at, (offset as u32).to_le_bytes());
                set(rec, gpus_at + 4, (gpus.len() as u32).to_le_bytes());
                for gpu in gpus {
                    put_u32(&mut tail, *gpu);
                }
            }
            Action::Preempt | Action::KeepPending => set(rec, DECISION.offset("node"), NONE.to_le_bytes()),
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
        let reason_at = DECISION.offset("reason");
        set(rec, reason_at, offset.to_le_bytes());
        set(rec, reason_at + 4, (reason.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&tail);
    out.extend_from_slice(&reasons);
    Ok(out)
}

/// Writes `records` one after another, each `R::LAYOUT.size` bytes.
fn put_records<'s, R: Record<'s>>(out: &mut Vec<u8>, heap: &mut StringHeap<'s>, records: &[R]) {
    let size = R::LAYOUT.size;
    let start = out.len();
    out.resize(start + records.len() * size, 0);
    for (record, rec) in records.iter().zip(out[start..].chunks_exact_mut(size)) {
        record.encode(rec, heap);
    }
}

/// Strings stored once each, after the fixed part of the buffer.
pub(crate) struct StringHeap<'s> {
    base: u64,
    bytes: Vec<u8>,
    seen: HashMap<&'s str, u32>,
}

impl<'s> StringHeap<'s> {
    fn new(base: u64) -> Self {
        StringHeap { base, bytes: Vec::new(), seen: HashMap::new() }
    }

    /// Writes the `{offset, len}` of `text` to `slot` (8 bytes), storing `text` if it is new.
    /// Offsets past 4 GiB are caught by the caller's final size check (they wrap here, and the
    /// buffer is refused).
    pub(crate) fn put(&mut self, slot: &mut [u8], text: &'s str) {
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
        set(slot, 0, offset.to_le_bytes());
        set(slot, 4, (text.len() as u32).to_le_bytes());
    }

    /// [`put`](Self::put) for text that rarely repeats (a workload's id and name, a node's name): stored without
    /// looking for an earlier copy, since hashing 15,000 ids to find none was a third of the
    /// encoding's time. The guest reads `{offset, len}` either way.
    pub(crate) fn put_unique(&mut self, slot: &mut [u8], text: &str) {
        let offset = if text.is_empty() { 0 } else { (self.base + self.bytes.len() as u64) as u32 };
        self.bytes.extend_from_slice(text.as_bytes());
        set(slot, 0, offset.to_le_bytes());
        set(slot, 4, (text.len() as u32).to_le_bytes());
    }
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}
