//! The one declaration of the ABI's records, and what it generates.
//!
//! Each record of `docs/policy-abi.md` is declared once, in `sdk/src/abi.rs`, by [`abi_records!`]:
//! its fields with their wire kind and offset, their documentation, and the record's size. From that
//! declaration the macro generates, at compile time, the borrowed record (`Tenant<'a>`), its
//! encoder and decoder, the owned twin (`OwnedTenant`, in [`crate::owned`]) with its conversions,
//! and a [`RecordLayout`] value describing the record. The layout is checked when the crate
//! compiles (every byte of the record covered by exactly one field or flag word, the size a
//! multiple of 8), and the `abi-gen` binary renders the C header's layout section and the
//! document's tables from it ([`super::generate`]): `cargo run -p airtime-policy-sdk --bin abi-gen`.
//!
//! The snapshot header and the decision record are declared the same way, as layouts only
//! ([`abi_layout!`]): their codecs are written by hand (the header holds tables and the decision a
//! tagged action), reading every offset from the declaration.

use super::{AbiError, Location, NONE, Table};

/// How a field lies on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// A string, `{offset: u32, len: u32}` into the same buffer; identical strings are stored once.
    Str,
    /// A string stored as it comes, without looking for an earlier copy (one per record: a
    /// workload's id and name, a node's name). The same on the wire as [`Wire::Str`].
    UniqueStr,
    /// A `u32`.
    U32,
    /// An `i32`.
    I32,
    /// A `u64`.
    U64,
    /// An `f32`.
    F32,
    /// A `u32` that is 1 for true, 0 for false.
    Flag,
    /// Bit `n` of the `u32` flag word at the field's offset (the word's other bits are other fields).
    Bit(u32),
    /// An index into a table, [`NONE`] when absent; the decoder checks that it names a record.
    Index(Table),
    /// An index into a table that must name a record.
    Required(Table),
    /// A `u32` that is [`NONE`] when absent (not an index).
    Optional,
    /// An enumeration's code, a `u32`.
    Code(&'static EnumLayout),
    /// Four magic bytes.
    Magic,
    /// A table descriptor, `{offset: u32, count: u32, stride: u32}`.
    Table(Table),
    /// `{offset: u32, len: u32}` of a `u32` array in the same buffer; `len` counts entries.
    U32List,
    /// A reserved `u32`, 0.
    Reserved,
}

impl Wire {
    /// Bytes on the wire (a flag word's four for each of its bits).
    pub const fn size(self) -> usize {
        match self {
            Wire::Str | Wire::UniqueStr | Wire::U64 | Wire::U32List => 8,
            Wire::Table(_) => 12,
            _ => 4,
        }
    }

    /// The type column of the document's tables.
    pub const fn doc_type(self) -> &'static str {
        match self {
            Wire::Str | Wire::UniqueStr => "string",
            Wire::I32 => "i32",
            Wire::U64 => "u64",
            Wire::F32 => "f32",
            Wire::Magic => "4 bytes",
            Wire::Table(_) => "table",
            Wire::U32List => "string-shaped",
            _ => "u32",
        }
    }
}

/// One field of a record.
#[derive(Debug, Clone, Copy)]
pub struct FieldLayout {
    /// Its name in Rust (and in the document).
    pub name: &'static str,
    /// Bytes from the start of the record.
    pub offset: usize,
    pub wire: Wire,
    /// Its documentation, one line per `///` line.
    pub doc: &'static str,
    /// Its name in C where it is not the Rust name upper-cased (`class_` for `class`, a flag bit's
    /// own name).
    pub c_name: Option<&'static str>,
}

/// One record: its fields in declaration order.
#[derive(Debug, Clone, Copy)]
pub struct RecordLayout {
    /// The Rust type's name.
    pub name: &'static str,
    /// The document's caption, `{size}` standing for the size.
    pub caption: &'static str,
    /// Size in bytes: the minimum stride of its table.
    pub size: usize,
    /// Prefix of its C constants (`TENANT`: `AIRTIME_TENANT_NAME`).
    pub c_prefix: &'static str,
    /// Its C struct and reader (`tenant`: `airtime_tenant`, `airtime_read_tenant`), if it has them.
    pub c_struct: Option<&'static str>,
    /// Its C size constant (`AIRTIME_TENANT_SIZE`).
    pub c_size: &'static str,
    /// Its table.
    pub table: Option<Table>,
    pub fields: &'static [FieldLayout],
}

impl RecordLayout {
    /// The field named `name`; fails to compile when used in a constant and there is none.
    pub const fn field(&self, name: &str) -> &FieldLayout {
        let mut i = 0;
        while i < self.fields.len() {
            if str_eq(self.fields[i].name, name) {
                return &self.fields[i];
            }
            i += 1;
        }
        panic!("no such field")
    }

    /// The offset of the field named `name` (for hand-written codecs).
    pub const fn offset(&self, name: &str) -> usize {
        self.field(name).offset
    }

    /// Whether every byte of the record is covered by exactly one field (the bits of one flag
    /// word count once), no field runs past the size, and the size is a multiple of 8 (so every
    /// table stays 8-aligned). Checked at compile time for every declared record.
    pub const fn is_sound(&self) -> bool {
        if !self.size.is_multiple_of(8) {
            return false;
        }
        let mut byte = 0;
        while byte < self.size {
            let mut covering = 0;
            let mut i = 0;
            while i < self.fields.len() {
                let f = &self.fields[i];
                let counted = match f.wire {
                    Wire::Bit(bit) => bit < 32 && !self.earlier_bit_word(i),
                    _ => true,
                };
                if counted && f.offset <= byte && byte < f.offset + f.wire.size() {
                    covering += 1;
                }
                i += 1;
            }
            if covering != 1 {
                return false;
            }
            byte += 1;
        }
        let mut i = 0;
        while i < self.fields.len() {
            if self.fields[i].offset + self.fields[i].wire.size() > self.size || self.same_bit_earlier(i) {
                return false;
            }
            i += 1;
        }
        true
    }

    /// A field before `i` is a bit of the same flag word.
    const fn earlier_bit_word(&self, i: usize) -> bool {
        let mut j = 0;
        while j < i {
            if matches!(self.fields[j].wire, Wire::Bit(_)) && self.fields[j].offset == self.fields[i].offset {
                return true;
            }
            j += 1;
        }
        false
    }

    /// A field before `i` is the same bit of the same flag word.
    const fn same_bit_earlier(&self, i: usize) -> bool {
        let Wire::Bit(bit) = self.fields[i].wire else { return false };
        let mut j = 0;
        while j < i {
            if let Wire::Bit(other) = self.fields[j].wire
                && other == bit
                && self.fields[j].offset == self.fields[i].offset
            {
                return true;
            }
            j += 1;
        }
        false
    }
}

/// An enumeration carried as a `u32` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnumLayout {
    pub name: &'static str,
    pub doc: &'static str,
    /// Its C enum (`airtime_workload_class`).
    pub c_name: &'static str,
    /// Prefix of its C constants (`CLASS`: `AIRTIME_CLASS_TRAINING`).
    pub c_prefix: &'static str,
    /// `(code, name, doc)` of every known value, in code order.
    pub values: &'static [(u32, &'static str, &'static str)],
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The number of records of each table, for checking indexes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub tenants: usize,
    pub nodes: usize,
    pub gpus: usize,
    pub workloads: usize,
    pub services: usize,
}

impl Counts {
    pub(crate) fn of(&self, table: Table) -> usize {
        match table {
            Table::Tenants => self.tenants,
            Table::Nodes => self.nodes,
            Table::Gpus => self.gpus,
            Table::Workloads => self.workloads,
            Table::Services => self.services,
            Table::Settings => 1,
            Table::Arrivals => 0,
            Table::Decisions => 0,
        }
    }
}

/// A record the snapshot carries in a table: what [`abi_records!`] implements.
pub(crate) trait Record<'a>: Sized {
    /// Its declaration.
    const LAYOUT: RecordLayout;
    /// Writes its fields into `rec` (`LAYOUT.size` zeroed bytes), its strings into `heap`.
    fn encode(&self, rec: &mut [u8], heap: &mut super::encode::StringHeap<'a>);
    /// Reads record `index` from `rec` (at least `LAYOUT.size` bytes), checking strings and indexes.
    fn decode(buf: &super::decode::Buf<'a>, rec: &[u8], index: u32, counts: &Counts) -> Result<Self, AbiError>;
}

/// `N` bytes at `at`, or zeroes if `bytes` is too short (never the case after the bounds checks).
pub(crate) fn field<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes.get(at..at.saturating_add(N)).and_then(|slice| slice.try_into().ok()).unwrap_or([0; N])
}

pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(field(bytes, at))
}

pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(field(bytes, at))
}

/// Writes `bytes` at `at` in `rec` (the record was sized from the same layout, so it fits).
pub(crate) fn set<const N: usize>(rec: &mut [u8], at: usize, bytes: [u8; N]) {
    if let Some(slot) = rec.get_mut(at..at + N) {
        slot.copy_from_slice(&bytes);
    }
}

/// Sets bit `bit` of the flag word at `at` when `on`.
pub(crate) fn set_bit(rec: &mut [u8], at: usize, bit: u32, on: bool) {
    let word = u32_at(rec, at) | (u32::from(on) << bit);
    set(rec, at, word.to_le_bytes());
}

/// `None` for `NONE`, else the index, checked against the table it points into.
pub(crate) fn index(
    at: Location,
    what: &'static str,
    value: u32,
    table: Table,
    len: usize,
) -> Result<Option<u32>, AbiError> {
    match value {
        NONE => Ok(None),
        index if (index as usize) < len => Ok(Some(index)),
        index => Err(AbiError::IndexOutOfRange { at, what, index, table, table_len: len }),
    }
}

/// The index, which must name a record of `table`.
pub(crate) fn required(
    at: Location,
    what: &'static str,
    value: u32,
    table: Table,
    len: usize,
) -> Result<u32, AbiError> {
    if (value as usize) < len {
        Ok(value)
    } else {
        Err(AbiError::IndexOutOfRange { at, what, index: value, table, table_len: len })
    }
}

pub(crate) fn optional(value: u32) -> Option<u32> {
    (value != NONE).then_some(value)
}

/// The Rust type of a field of a wire kind: `borrowed` in the record, `owned` in its owned twin.
macro_rules! abi_type {
    (borrowed str) => { &'a str };
    (borrowed ustr) => { &'a str };
    (owned str) => { String };
    (owned ustr) => { String };
    ($_form:ident flag) => { bool };
    ($_form:ident bit($bit:literal)) => { bool };
    ($_form:ident index($table:ident)) => { Option<u32> };
    ($_form:ident to($table:ident)) => { u32 };
    ($_form:ident opt) => { Option<u32> };
    ($_form:ident code($ty:ident)) => { $ty };
    // A number: `u32`, `i32`, `u64` or `f32`.
    ($_form:ident $number:ident) => { $number };
}

/// The [`Wire`] of a wire kind.
macro_rules! abi_wire {
    (str) => {
        $crate::abi::layout::Wire::Str
    };
    (ustr) => {
        $crate::abi::layout::Wire::UniqueStr
    };
    (u32) => {
        $crate::abi::layout::Wire::U32
    };
    (i32) => {
        $crate::abi::layout::Wire::I32
    };
    (u64) => {
        $crate::abi::layout::Wire::U64
    };
    (f32) => {
        $crate::abi::layout::Wire::F32
    };
    (flag) => {
        $crate::abi::layout::Wire::Flag
    };
    (bit($bit:literal)) => {
        $crate::abi::layout::Wire::Bit($bit)
    };
    (index($table:ident)) => {
        $crate::abi::layout::Wire::Index($crate::abi::Table::$table)
    };
    (to($table:ident)) => {
        $crate::abi::layout::Wire::Required($crate::abi::Table::$table)
    };
    (opt) => {
        $crate::abi::layout::Wire::Optional
    };
    (code($ty:ident)) => {
        $crate::abi::layout::Wire::Code(&$ty::LAYOUT)
    };
    (magic) => {
        $crate::abi::layout::Wire::Magic
    };
    (table($table:ident)) => {
        $crate::abi::layout::Wire::Table($crate::abi::Table::$table)
    };
    (u32list) => {
        $crate::abi::layout::Wire::U32List
    };
    (reserved) => {
        $crate::abi::layout::Wire::Reserved
    };
}

/// Writes a field's value into its record.
macro_rules! abi_put {
    ($rec:ident $heap:ident $value:expr, $at:expr, str) => {
        $heap.put(&mut $rec[$at..$at + 8], $value)
    };
    ($rec:ident $heap:ident $value:expr, $at:expr, ustr) => {
        $heap.put_unique(&mut $rec[$at..$at + 8], $value)
    };
    ($rec:ident $heap:ident $value:expr, $at:expr, flag) => {
        $crate::abi::layout::set($rec, $at, u32::from($value).to_le_bytes())
    };
    ($rec:ident $heap:ident $value:expr, $at:expr, bit($bit:literal)) => {
        $crate::abi::layout::set_bit($rec, $at, $bit, $value)
    };
    ($rec:ident $heap:ident $value:expr, $at:expr, index($table:ident)) => {
        $crate::abi::layout::set($rec, $at, $value.unwrap_or($crate::abi::NONE).to_le_bytes())
    };
    ($rec:ident $heap:ident $value:expr, $at:expr, opt) => {
        $crate::abi::layout::set($rec, $at, $value.unwrap_or($crate::abi::NONE).to_le_bytes())
    };
    ($rec:ident $heap:ident $value:expr, $at:expr, code($ty:ident)) => {
        $crate::abi::layout::set($rec, $at, $value.code().to_le_bytes())
    };
    // A number (`u32`, `i32`, `u64`, `f32`) or a required index (`to(Table)`).
    ($rec:ident $heap:ident $value:expr, $at:expr, $($number:tt)*) => {
        $crate::abi::layout::set($rec, $at, $value.to_le_bytes())
    };
}

/// Reads a field's value from its record, checking strings and indexes.
macro_rules! abi_get {
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, str) => {
        $buf.string($loc, $name, $rec, $at)?
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, ustr) => {
        $buf.string($loc, $name, $rec, $at)?
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, flag) => {
        $crate::abi::layout::u32_at($rec, $at) & 1 != 0
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, bit($bit:literal)) => {
        $crate::abi::layout::u32_at($rec, $at) & (1 << $bit) != 0
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, index($table:ident)) => {
        $crate::abi::layout::index(
            $loc,
            $name,
            $crate::abi::layout::u32_at($rec, $at),
            $crate::abi::Table::$table,
            $counts.of($crate::abi::Table::$table),
        )?
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, to($table:ident)) => {
        $crate::abi::layout::required(
            $loc,
            $name,
            $crate::abi::layout::u32_at($rec, $at),
            $crate::abi::Table::$table,
            $counts.of($crate::abi::Table::$table),
        )?
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, opt) => {
        $crate::abi::layout::optional($crate::abi::layout::u32_at($rec, $at))
    };
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, code($ty:ident)) => {
        $ty::from_code($crate::abi::layout::u32_at($rec, $at))
    };
    // A number: `u32`, `i32`, `u64` or `f32`, read at its width.
    ($buf:ident $rec:ident $loc:ident $counts:ident $name:expr, $at:expr, $number:ident) => {
        <$number>::from_le_bytes($crate::abi::layout::field($rec, $at))
    };
}

/// A field's value in the owned twin, from the borrowed record's.
macro_rules! abi_to_owned {
    ($value:expr, str) => {
        $value.to_owned()
    };
    ($value:expr, ustr) => {
        $value.to_owned()
    };
    ($value:expr, $($wire:tt)*) => {
        $value
    };
}

/// A field's value in the borrowed record, from the owned twin's.
macro_rules! abi_borrow {
    ($value:expr, str) => {
        &$value
    };
    ($value:expr, ustr) => {
        &$value
    };
    ($value:expr, $($wire:tt)*) => {
        $value
    };
}

/// A field's default: the declared one, or the type's.
macro_rules! abi_default {
    () => {
        Default::default()
    };
    ($default:expr) => {
        $default
    };
}

/// `Some(name)` or `None`.
macro_rules! abi_option {
    () => {
        None
    };
    ($value:expr) => {
        Some($value)
    };
}

/// Declares records of the ABI: for each, the record type, its default, its codec
/// ([`Record`]), its layout (`Type::LAYOUT`) and, when it names one, its owned twin. See the
/// module's documentation; the declarations are in `sdk/src/abi.rs`.
macro_rules! abi_records {
    ($(
        $(#[doc = $doc:literal])*
        #[derive($($derive:path),*)]
        $(#[$meta:meta])*
        pub struct $name:ident $(<$lt:lifetime>)? {
            table: $table:ident, size: $size:literal, c: $c_prefix:literal $c_struct:literal,
            $(owned: $owned:ident $as_fn:ident,)?
            $(validate: $validate:path,)?
            caption: $caption:literal,
            reserved: [$($reserved:ident @ $reserved_at:literal),*],
        } {
            $(
                $(#[doc = $fdoc:literal])*
                $field:ident : $wire:ident $(($($arg:tt)*))? @ $at:literal $(as $c_name:literal)? $(= $default:expr)?,
            )*
        }
    )*) => {$(
        $(#[doc = $doc])*
        #[derive($($derive),*)]
        $(#[$meta])*
        pub struct $name $(<$lt>)? {
            $( $(#[doc = $fdoc])* pub $field: abi_type!(borrowed $wire $(($($arg)*))?), )*
        }

        impl<$($lt)?> Default for $name<$($lt)?> {
            fn default() -> Self {
                $name { $( $field: abi_default!($($default)?), )* }
            }
        }

        impl<$($lt)?> $name<$($lt)?> {
            /// Its declaration: offsets, wire kinds and documentation of its fields.
            pub const LAYOUT: $crate::abi::layout::RecordLayout = $crate::abi::layout::RecordLayout {
                name: stringify!($name),
                caption: $caption,
                size: $size,
                c_prefix: $c_prefix,
                c_struct: Some($c_struct),
                c_size: concat!("AIRTIME_", $c_prefix, "_SIZE"),
                table: Some($crate::abi::Table::$table),
                fields: &[
                    $($crate::abi::layout::FieldLayout {
                        name: stringify!($field),
                        offset: $at,
                        wire: abi_wire!($wire $(($($arg)*))?),
                        doc: concat!($($fdoc, "\n"),*),
                        c_name: abi_option!($($c_name)?),
                    },)*
                    $($crate::abi::layout::FieldLayout {
                        name: stringify!($reserved),
                        offset: $reserved_at,
                        wire: $crate::abi::layout::Wire::Reserved,
                        doc: "",
                        c_name: None,
                    },)*
                ],
            };
        }

        const _: () = assert!($name::LAYOUT.is_sound(), concat!(stringify!($name), ": fields overlap, leave a gap or pass the size"));

        impl<'a> $crate::abi::layout::Record<'a> for $name<$($lt)?> {
            const LAYOUT: $crate::abi::layout::RecordLayout = $name::LAYOUT;

            #[allow(unused_variables)]
            fn encode(&self, rec: &mut [u8], heap: &mut $crate::abi::encode::StringHeap<'a>) {
                $( abi_put!(rec heap self.$field, $at, $wire $(($($arg)*))?); )*
            }

            #[allow(unused_variables)]
            fn decode(
                buf: &$crate::abi::decode::Buf<'a>,
                rec: &[u8],
                index: u32,
                counts: &$crate::abi::layout::Counts,
            ) -> Result<Self, $crate::abi::AbiError> {
                let at = $crate::abi::Location::Record { table: $crate::abi::Table::$table, index };
                let record = $name {
                    $( $field: abi_get!(buf rec at counts stringify!($field), $at, $wire $(($($arg)*))?), )*
                };
                $( $validate(&record, index, counts)?; )?
                Ok(record)
            }
        }

        abi_owned!([$($owned $as_fn)?] $name { $( $field: $wire $(($($arg)*))?, )* });
    )*};
}

/// The owned twin of a record, when the declaration names one.
macro_rules! abi_owned {
    ([] $name:ident { $($field:ident : $wire:ident $(($($arg:tt)*))?,)* }) => {};
    ([$owned:ident $as_fn:ident] $name:ident { $($field:ident : $wire:ident $(($($arg:tt)*))?,)* }) => {
        #[doc = concat!("A [`", stringify!($name), "`] that owns its strings. Fields a file leaves out take [`",
            stringify!($name), "::default`]'s values.")]
        #[derive(Debug, Clone, PartialEq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
        pub struct $owned {
            $( #[allow(missing_docs)] pub $field: abi_type!(owned $wire $(($($arg)*))?), )*
        }

        impl Default for $owned {
            fn default() -> Self {
                $owned::from(&$name::default())
            }
        }

        impl $owned {
            #[doc = concat!("The borrowed [`", stringify!($name), "`].")]
            pub fn $as_fn(&self) -> $name<'_> {
                $name { $( $field: abi_borrow!(self.$field, $wire $(($($arg)*))?), )* }
            }
        }

        impl From<&$name<'_>> for $owned {
            fn from(record: &$name<'_>) -> Self {
                $owned { $( $field: abi_to_owned!(record.$field, $wire $(($($arg)*))?), )* }
            }
        }
    };
}

/// Declares a layout whose codec is written by hand (the snapshot header, the decision record):
/// `pub const NAME: RecordLayout`, checked like a record's.
macro_rules! abi_layout {
    (
        $(#[doc = $doc:literal])*
        pub const $const_name:ident = $name:literal {
            size: $size:literal, c: $c_prefix:literal $c_size:literal, caption: $caption:literal,
        } {
            $(
                $(#[doc = $fdoc:literal])*
                $field:ident : $wire:ident $(($($arg:tt)*))? @ $at:literal $(as $c_name:literal)?,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        pub const $const_name: $crate::abi::layout::RecordLayout = $crate::abi::layout::RecordLayout {
            name: $name,
            caption: $caption,
            size: $size,
            c_prefix: $c_prefix,
            c_struct: None,
            c_size: $c_size,
            table: None,
            fields: &[
                $($crate::abi::layout::FieldLayout {
                    name: stringify!($field),
                    offset: $at,
                    wire: abi_wire!($wire $(($($arg)*))?),
                    doc: concat!($($fdoc, "\n"),*),
                    c_name: abi_option!($($c_name)?),
                },)*
            ],
        };

        const _: () = assert!($const_name.is_sound(), concat!($name, ": fields overlap, leave a gap or pass the size"));
    };
}
