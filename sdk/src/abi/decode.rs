//! Bytes to records, checking structure only and never panicking.
//!
//! Every read goes through [`field`], which returns zeroes rather than panic if asked for bytes a
//! record does not have; the table bounds checks make that unreachable, and the fuzz tests check
//! that nothing else can panic either.

use std::cell::Cell;

use super::layout::{Counts, Record, field, index, u32_at, u64_at};
use super::{
    ABI_VERSION, ARRIVAL_SIZE, AbiError, Action, BufferKind, DECISION, DECISION_SIZE, DECISIONS_HEADER_SIZE,
    DECISIONS_MAGIC, Decision, GPU_SIZE, KIND_KEEP_PENDING, KIND_PLACE, KIND_PREEMPT, Location, NODE_SIZE, NONE,
    SERVICE_SIZE, SETTINGS_SIZE, SNAPSHOT_HEADER, SNAPSHOT_HEADER_SIZE, SNAPSHOT_MAGIC, Snapshot, TENANT_SIZE, Table,
    WORKLOAD_SIZE,
};

/// Decodes a snapshot, borrowing every string from `bytes`.
///
/// Checks the magic, the version, that every table and string lies inside the buffer, that strides
/// are at least the record sizes this SDK knows (larger strides are newer minor versions; the extra
/// bytes are skipped), that no table with records starts inside the header (which is how a buffer
/// from a host older than ABI 1.9, with its 88- or 104-byte header, is told apart), that strings are UTF-8,
/// and that every index a record carries (a GPU's node and holder, a node's GPU range, a workload's
/// tenant, node and service, a service's tenant, the scope tenant) names a record.
pub fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot<'_>, AbiError> {
    let buf = Buf::new(bytes);
    if bytes.len() < SNAPSHOT_HEADER_SIZE {
        return Err(AbiError::TooShort {
            buffer: BufferKind::Snapshot,
            len: bytes.len(),
            needed: SNAPSHOT_HEADER_SIZE,
        });
    }
    let header = &bytes[..SNAPSHOT_HEADER_SIZE];
    let magic = magic_of(header);
    if magic != SNAPSHOT_MAGIC {
        return Err(AbiError::BadMagic { buffer: BufferKind::Snapshot, expected: SNAPSHOT_MAGIC, found: magic });
    }
    let version = u32_at(header, SNAPSHOT_HEADER.offset("abi_version"));
    if version != ABI_VERSION {
        return Err(AbiError::UnsupportedVersion { found: version, supported: ABI_VERSION });
    }
    let at_header = Location::Header(BufferKind::Snapshot);

    let h = |name| SNAPSHOT_HEADER.offset(name);
    let tenants = buf.table(header, h("tenants"), Table::Tenants, TENANT_SIZE)?;
    let nodes = buf.table(header, h("nodes"), Table::Nodes, NODE_SIZE)?;
    let gpus = buf.table(header, h("gpus"), Table::Gpus, GPU_SIZE)?;
    let workloads = buf.table(header, h("workloads"), Table::Workloads, WORKLOAD_SIZE)?;
    let settings = buf.table(header, h("settings"), Table::Settings, SETTINGS_SIZE)?;
    let services = buf.table(header, h("services"), Table::Services, SERVICE_SIZE)?;
    let arrivals = buf.table(header, h("arrivals"), Table::Arrivals, ARRIVAL_SIZE)?;
    if settings.count > 1 {
        return Err(AbiError::TooManySettings { count: settings.count });
    }
    let counts = Counts {
        tenants: tenants.count as usize,
        nodes: nodes.count as usize,
        gpus: gpus.count as usize,
        workloads: workloads.count as usize,
        services: services.count as usize,
    };
    Ok(Snapshot {
        now_ms: u64_at(header, h("now_ms")),
        params: buf.string(at_header, "params", header, h("params"))?,
        scope_tenant: index(
            at_header,
            "scope tenant",
            u32_at(header, h("scope_tenant")),
            Table::Tenants,
            counts.tenants,
        )?,
        tenants: records(&buf, &tenants, &counts)?,
        nodes: records(&buf, &nodes, &counts)?,
        gpus: records(&buf, &gpus, &counts)?,
        workloads: records(&buf, &workloads, &counts)?,
        settings: records(&buf, &settings, &counts)?.pop(),
        services: records(&buf, &services, &counts)?,
        arrivals: records(&buf, &arrivals, &counts)?,
    })
}

/// Every record of `table`.
fn records<'a, R: Record<'a>>(buf: &Buf<'a>, table: &TableView<'a>, counts: &Counts) -> Result<Vec<R>, AbiError> {
    let mut out = Vec::with_capacity(table.count as usize);
    for (i, rec) in table.records() {
        out.push(R::decode(buf, rec, i, counts)?);
    }
    Ok(out)
}

/// Decodes a decision buffer, borrowing reasons from `bytes` (cleaned and cut to
/// [`crate::text::MAX_REASON_CHARS`]: a reason with a NUL or control character, or a longer one, is
/// copied).
///
/// Checks the magic, that the records, GPU lists and reasons lie inside the buffer, that reasons are
/// UTF-8, that kinds are known, that a place names a node and a preempt or keep-pending names no
/// node and no GPUs, and that the GPU lists together are no larger than the buffer (so a small
/// buffer cannot make the host allocate a large one). Whether the indexes name real workloads, nodes
/// and GPUs needs the snapshot: see [`crate::check::check_decisions`].
pub fn decode_decisions(bytes: &[u8]) -> Result<Vec<Decision<'_>>, AbiError> {
    let mut decisions = Vec::new();
    walk_decisions(bytes, |count, workload, action, reason| {
        if decisions.capacity() == 0 {
            decisions.reserve_exact(count);
        }
        let action = match action {
            RawAction::Place { node, gpus } => {
                Action::Place { node, gpus: gpus.chunks_exact(4).map(|chunk| u32_at(chunk, 0)).collect() }
            }
            RawAction::Preempt => Action::Preempt,
            RawAction::KeepPending => Action::KeepPending,
        };
        // Guest text is cleaned and bounded here, where it is decoded (see `crate::text`).
        let reason = crate::text::clean(reason, crate::text::MAX_REASON_CHARS);
        decisions.push(Decision { workload, action, reason });
    })?;
    Ok(decisions)
}

/// Makes the checks of [`decode_decisions`] without building the decisions, and returns how many
/// there are: what a host runs on a guest's output before keeping it, without allocating.
pub fn validate_decisions(bytes: &[u8]) -> Result<usize, AbiError> {
    let mut count = 0;
    walk_decisions(bytes, |_, _, _, _| count += 1)?;
    Ok(count)
}

/// A decision's action as it lies in the buffer.
enum RawAction<'a> {
    Place { node: u32, gpus: &'a [u8] },
    Preempt,
    KeepPending,
}

/// Checks a decision buffer (see [`decode_decisions`]), giving `each` every decision in order
/// (with the number of records in the buffer) as `(records, workload, action, reason)`.
fn walk_decisions<'a>(
    bytes: &'a [u8],
    mut each: impl FnMut(usize, u32, RawAction<'a>, &'a str),
) -> Result<(), AbiError> {
    let buf = Buf::new(bytes);
    if bytes.len() < DECISIONS_HEADER_SIZE {
        return Err(AbiError::TooShort {
            buffer: BufferKind::Decisions,
            len: bytes.len(),
            needed: DECISIONS_HEADER_SIZE,
        });
    }
    let magic = magic_of(bytes);
    if magic != DECISIONS_MAGIC {
        return Err(AbiError::BadMagic { buffer: BufferKind::Decisions, expected: DECISIONS_MAGIC, found: magic });
    }
    let count = u32_at(bytes, 4);
    let table = buf.checked_table(Table::Decisions, DECISIONS_HEADER_SIZE as u32, count, DECISION_SIZE as u32)?;

    let mut gpu_total: u64 = 0;
    for (i, rec) in table.records() {
        let at = Location::Record { table: Table::Decisions, index: i };
        let kind = u32_at(rec, DECISION.offset("kind"));
        let workload = u32_at(rec, DECISION.offset("workload"));
        let node = u32_at(rec, DECISION.offset("node"));
        let gpus_at = DECISION.offset("gpus");
        let (gpus_offset, gpus_len) = (u32_at(rec, gpus_at), u32_at(rec, gpus_at + 4));
        let reason = buf.string(at, "reason", rec, DECISION.offset("reason"))?;
        let action = match kind {
            KIND_PLACE => {
                if node == NONE {
                    return Err(AbiError::PlaceWithoutNode { decision: i });
                }
                gpu_total += u64::from(gpus_len);
                if gpu_total * 4 > bytes.len() as u64 {
                    return Err(AbiError::TooManyGpuIndexes { total: gpu_total, buffer_len: bytes.len() });
                }
                let gpus = buf.span(at, "gpu list", gpus_offset, u64::from(gpus_len) * 4)?;
                RawAction::Place { node, gpus }
            }
            KIND_PREEMPT | KIND_KEEP_PENDING => {
                let name = if kind == KIND_PREEMPT { "preempt" } else { "keep pending" };
                if node != NONE {
                    return Err(AbiError::UnexpectedPlacement { decision: i, kind: name, field: "a node" });
                }
                if gpus_len != 0 {
                    return Err(AbiError::UnexpectedPlacement { decision: i, kind: name, field: "GPUs" });
                }
                if kind == KIND_PREEMPT { RawAction::Preempt } else { RawAction::KeepPending }
            }
            other => return Err(AbiError::UnknownDecisionKind { decision: i, kind: other }),
        };
        each(count as usize, workload, action, reason);
    }
    Ok(())
}

/// A buffer being decoded.
pub(crate) struct Buf<'a> {
    bytes: &'a [u8],
    /// Where strings are: from the first non-empty string read to the end of the buffer, or to
    /// the first byte that is not UTF-8, as one validated `&str` (its start in `bytes`, the text).
    /// Strings inside it are sliced out of it, without validating each one: encoders put strings
    /// together after the records (the snapshot's heap, the decisions' reasons), so one pass over
    /// them replaces thousands of short ones, which matters to a guest in Wasm.
    text: Cell<Option<(usize, &'a str)>>,
}

/// A table whose records are known to lie inside the buffer.
struct TableView<'a> {
    bytes: &'a [u8],
    count: u32,
    stride: usize,
}

impl<'a> TableView<'a> {
    /// `(index, record bytes)`; each record slice is `stride` long.
    fn records(&self) -> impl Iterator<Item = (u32, &'a [u8])> + use<'a> {
        let bytes = self.bytes;
        let stride = self.stride;
        (0..self.count).map(move |i| {
            let start = i as usize * stride;
            (i, bytes.get(start..start + stride).unwrap_or(&[]))
        })
    }
}

impl<'a> Buf<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Buf { bytes, text: Cell::new(None) }
    }

    /// Reads the `{offset, count, stride}` descriptor at `at` in the header and checks it.
    fn table(&self, header: &[u8], at: usize, table: Table, size: usize) -> Result<TableView<'a>, AbiError> {
        let (offset, count, stride) = (u32_at(header, at), u32_at(header, at + 4), u32_at(header, at + 8));
        if (stride as usize) < size {
            return Err(AbiError::StrideTooSmall { table, stride, minimum: size as u32 });
        }
        if count > 0 && (offset as usize) < SNAPSHOT_HEADER_SIZE {
            return Err(AbiError::TableOverlapsHeader { table, offset, header: SNAPSHOT_HEADER_SIZE as u32 });
        }
        self.checked_table(table, offset, count, stride)
    }

    fn checked_table(&self, table: Table, offset: u32, count: u32, stride: u32) -> Result<TableView<'a>, AbiError> {
        let len = u64::from(count) * u64::from(stride);
        let end = u64::from(offset) + len;
        if end > self.bytes.len() as u64 {
            return Err(AbiError::TableOutOfBounds { table, offset, count, stride, buffer_len: self.bytes.len() });
        }
        let bytes = self.bytes.get(offset as usize..end as usize).unwrap_or(&[]);
        Ok(TableView { bytes, count, stride: stride as usize })
    }

    /// `len` bytes at `offset`, or where they run past the buffer.
    fn span(&self, at: Location, what: &'static str, offset: u32, len: u64) -> Result<&'a [u8], AbiError> {
        let end = u64::from(offset) + len;
        match self.bytes.get(offset as usize..end.min(usize::MAX as u64) as usize) {
            Some(bytes) if end <= self.bytes.len() as u64 => Ok(bytes),
            _ => Err(AbiError::OutOfBounds { at, what, offset, len, buffer_len: self.bytes.len() }),
        }
    }

    /// The string whose `{offset, len}` is at `field_at` in `rec`.
    pub(crate) fn string(
        &self,
        at: Location,
        what: &'static str,
        rec: &[u8],
        field_at: usize,
    ) -> Result<&'a str, AbiError> {
        let (offset, len) = (u32_at(rec, field_at), u32_at(rec, field_at + 4));
        if len == 0 && (offset as usize) <= self.bytes.len() {
            return Ok("");
        }
        let (start, text) = match self.text.get() {
            Some(text) => text,
            None => {
                let start = (offset as usize).min(self.bytes.len());
                let rest = self.bytes.get(start..).unwrap_or(&[]);
                let valid = match std::str::from_utf8(rest) {
                    Ok(text) => text,
                    Err(error) => std::str::from_utf8(rest.get(..error.valid_up_to()).unwrap_or(&[])).unwrap_or(""),
                };
                self.text.set(Some((start, valid)));
                (start, valid)
            }
        };
        // Inside the validated text, at character boundaries: a substring of valid UTF-8.
        if let Some(from) = (offset as usize).checked_sub(start)
            && let Some(text) = text.get(from..from.saturating_add(len as usize))
        {
            return Ok(text);
        }
        let bytes = self.span(at, what, offset, u64::from(len))?;
        std::str::from_utf8(bytes).map_err(|error| AbiError::InvalidUtf8 {
            at,
            what,
            offset,
            valid_up_to: error.valid_up_to(),
        })
    }
}

fn magic_of(bytes: &[u8]) -> [u8; 4] {
    field(bytes, 0)
}
