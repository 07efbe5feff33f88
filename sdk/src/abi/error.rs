//! What can be wrong with a buffer, said precisely enough to fix it.

use std::fmt;

/// Which of the two buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    Snapshot,
    Decisions,
}

impl fmt::Display for BufferKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BufferKind::Snapshot => "snapshot",
            BufferKind::Decisions => "decision",
        })
    }
}

/// A table of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Tenants,
    Nodes,
    Gpus,
    Workloads,
    Settings,
    Decisions,
    /// ABI 1.3.
    Services,
    /// ABI 1.9.
    Arrivals,
}

impl Table {
    /// Plural name, as in "the workloads table".
    pub const fn name(self) -> &'static str {
        match self {
            Table::Tenants => "tenants",
            Table::Nodes => "nodes",
            Table::Gpus => "gpus",
            Table::Workloads => "workloads",
            Table::Settings => "settings",
            Table::Decisions => "decisions",
            Table::Services => "services",
            Table::Arrivals => "arrivals",
        }
    }

    /// Singular name, as in "workload 3".
    pub const fn record(self) -> &'static str {
        match self {
            Table::Tenants => "tenant",
            Table::Nodes => "node",
            Table::Gpus => "gpu",
            Table::Workloads => "workload",
            Table::Settings => "settings",
            Table::Decisions => "decision",
            Table::Services => "service",
            Table::Arrivals => "arrival",
        }
    }
}

/// Where in a buffer a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The buffer's header.
    Header(BufferKind),
    /// Record `index` of `table`.
    Record { table: Table, index: u32 },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Header(kind) => write!(f, "{kind} header"),
            Location::Record { table: Table::Settings, .. } => f.write_str("settings"),
            Location::Record { table, index } => write!(f, "{} {index}", table.record()),
        }
    }
}

/// A buffer that does not follow the ABI. `Display` gives one precise line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AbiError {
    /// The buffer is shorter than its fixed header.
    TooShort { buffer: BufferKind, len: usize, needed: usize },
    /// The first four bytes are not the magic.
    BadMagic { buffer: BufferKind, expected: [u8; 4], found: [u8; 4] },
    /// The snapshot speaks another ABI version.
    UnsupportedVersion { found: u32, supported: u32 },
    /// A table's stride is smaller than the record size this SDK knows.
    StrideTooSmall { table: Table, stride: u32, minimum: u32 },
    /// A table does not fit in the buffer.
    TableOutOfBounds { table: Table, offset: u32, count: u32, stride: u32, buffer_len: usize },
    /// A table with records starts inside the snapshot header: a buffer from a host older than ABI
    /// 1.3 (its header has 88 bytes, so its first table starts where 1.3's header goes on).
    TableOverlapsHeader { table: Table, offset: u32, header: u32 },
    /// The settings table holds more than one record.
    TooManySettings { count: u32 },
    /// A string or array runs past the end of the buffer.
    OutOfBounds { at: Location, what: &'static str, offset: u32, len: u64, buffer_len: usize },
    /// A string is not UTF-8.
    InvalidUtf8 { at: Location, what: &'static str, offset: u32, valid_up_to: usize },
    /// An index names no record of the table it points into.
    IndexOutOfRange { at: Location, what: &'static str, index: u32, table: Table, table_len: usize },
    /// A node's GPU range runs past the gpus table.
    GpuRangeOutOfRange { node: u32, gpu_first: u32, gpu_count: u32, gpus: usize },
    /// A decision's kind code is not 1, 2 or 3.
    UnknownDecisionKind { decision: u32, kind: u32 },
    /// A place decision without a node.
    PlaceWithoutNode { decision: u32 },
    /// A preempt or keep-pending decision that names a node or GPUs.
    UnexpectedPlacement { decision: u32, kind: &'static str, field: &'static str },
    /// The GPU lists of all decisions hold more indexes than the buffer has room for, which only
    /// overlapping lists can do.
    TooManyGpuIndexes { total: u64, buffer_len: usize },
    /// The encoded buffer would pass 4 GiB, which 32-bit offsets cannot address.
    TooLarge { buffer: BufferKind, len: u64 },
}

impl fmt::Display for AbiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbiError::TooShort { buffer, len, needed } => {
                write!(f, "the {len}-byte {buffer} buffer is shorter than its {needed}-byte header")
            }
            AbiError::BadMagic { buffer, expected, found } => write!(
                f,
                "{buffer} header: magic is {} (bytes {found:02x?}), expected {}",
                show_magic(found),
                show_magic(expected)
            ),
            AbiError::UnsupportedVersion { found, supported } => {
                write!(f, "snapshot header: ABI version {found}; this SDK speaks {supported}")
            }
            AbiError::StrideTooSmall { table, stride, minimum } => write!(
                f,
                "snapshot header: {} table stride {stride} is smaller than the {minimum}-byte record",
                table.name()
            ),
            AbiError::TableOutOfBounds { table, offset, count, stride, buffer_len } => write!(
                f,
                "snapshot header: {} table ({count} records of {stride} bytes at {offset:#x}) runs past the {buffer_len}-byte buffer",
                table.name()
            ),
            AbiError::TableOverlapsHeader { table, offset, header } => write!(
                f,
                "snapshot header: {} table at {offset:#x} starts inside the {header}-byte header (a host older than ABI 1.3 sends an 88-byte one, 1.3 to 1.8 a 104-byte one)",
                table.name()
            ),
            AbiError::TooManySettings { count } => {
                write!(f, "snapshot header: settings table holds {count} records; at most 1 is allowed")
            }
            AbiError::OutOfBounds { at, what, offset, len, buffer_len } => {
                write!(f, "{at}: {what} at {offset:#x}+{len} runs past the {buffer_len}-byte buffer")
            }
            AbiError::InvalidUtf8 { at, what, offset, valid_up_to } => {
                write!(f, "{at}: {what} at {offset:#x} is not UTF-8 (invalid from byte {valid_up_to})")
            }
            AbiError::IndexOutOfRange { at, what, index, table, table_len } => {
                write!(f, "{at}: {what} {index} is out of range; the {} table has {table_len} records", table.name())
            }
            AbiError::GpuRangeOutOfRange { node, gpu_first, gpu_count, gpus } => write!(
                f,
                "node {node}: GPUs {gpu_first}..{} run past the gpus table of {gpus} records",
                u64::from(*gpu_first) + u64::from(*gpu_count)
            ),
            AbiError::UnknownDecisionKind { decision, kind } => {
                write!(f, "decision {decision}: unknown kind {kind} (expected 1 place, 2 preempt or 3 keep pending)")
            }
            AbiError::PlaceWithoutNode { decision } => {
                write!(f, "decision {decision}: place names no node (node is NONE)")
            }
            AbiError::UnexpectedPlacement { decision, kind, field } => {
                write!(f, "decision {decision}: a {kind} decision must not name {field}")
            }
            AbiError::TooManyGpuIndexes { total, buffer_len } => write!(
                f,
                "decisions list {total} GPU indexes in all, more than the {buffer_len}-byte buffer can hold without overlapping lists"
            ),
            AbiError::TooLarge { buffer, len } => {
                write!(f, "the {buffer} buffer would be {len} bytes; 32-bit offsets address at most 4 GiB")
            }
        }
    }
}

impl std::error::Error for AbiError {}

/// The magic as text when it is printable ASCII, else as `?`.
fn show_magic(bytes: &[u8; 4]) -> String {
    let text: String = bytes.iter().map(|&b| if b.is_ascii_graphic() { char::from(b) } else { '?' }).collect();
    format!("\"{text}\"")
}
