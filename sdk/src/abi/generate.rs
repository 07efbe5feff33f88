//! The ABI's non-Rust forms, rendered from its one declaration ([`super::LAYOUTS`],
//! [`super::ENUMS`]): the layout sections of the C header (`sdk/c/airtime_policy.h`: constants,
//! enumerations, record structs and their readers) and the record tables of `docs/policy-abi.md`.
//!
//! Each rendered section lies between a begin and an end marker in its file; the rest of the file
//! is written by hand. [`COMMAND`] rewrites the sections; the tidy test fails, naming it, when a
//! section is not what the declaration renders.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::layout::{EnumLayout, RecordLayout, Wire};
use super::{ENUMS, KIND_KEEP_PENDING, KIND_PLACE, KIND_PREEMPT, LAYOUTS};

/// The command that rewrites every generated section.
pub const COMMAND: &str = "cargo run -p airtime-policy-sdk --bin abi-gen";

/// The C header, from the workspace root.
pub const C_HEADER: &str = "sdk/c/airtime_policy.h";
/// The ABI document, from the workspace root.
pub const DOCUMENT: &str = "docs/policy-abi.md";

/// A file whose generated sections are not what the declaration renders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// From the workspace root.
    pub path: String,
    /// The sections that differ.
    pub sections: Vec<String>,
}

/// Every generated section: `(file, section name, text)`.
pub fn sections() -> Vec<(&'static str, String, String)> {
    let mut out = vec![(C_HEADER, "layout".to_owned(), c_layout()), (C_HEADER, "records".to_owned(), c_records())];
    for layout in LAYOUTS {
        out.push((DOCUMENT, layout.name.to_owned(), markdown_table(layout)));
    }
    out
}

/// The files under `root` as they should be: `(path, current text, regenerated text)`.
pub fn regenerate(root: &Path) -> Result<Vec<(PathBuf, String, String)>, String> {
    let mut files: Vec<(PathBuf, String, String)> = Vec::new();
    for (file, name, text) in sections() {
        let path = root.join(file);
        if !files.iter().any(|(p, ..)| *p == path) {
            let current = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            files.push((path.clone(), current.clone(), current));
        }
        let Some((_, _, next)) = files.iter_mut().find(|(p, ..)| *p == path) else { continue };
        *next = splice(next, file, &name, &text)?;
    }
    Ok(files)
}

/// The files under `root` whose generated sections are out of date.
pub fn stale(root: &Path) -> Result<Vec<Stale>, String> {
    let mut out: Vec<Stale> = Vec::new();
    for (file, name, text) in sections() {
        let path = root.join(file);
        let current = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if splice(&current, file, &name, &text)? != current {
            match out.iter_mut().find(|s| s.path == file) {
                Some(stale) => stale.sections.push(name),
                None => out.push(Stale { path: file.to_owned(), sections: vec![name] }),
            }
        }
    }
    Ok(out)
}

/// Rewrites the generated sections of the files under `root`; returns the files it changed.
pub fn write(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut changed = Vec::new();
    for (path, current, next) in regenerate(root)? {
        if next != current {
            std::fs::write(&path, next).map_err(|e| format!("{}: {e}", path.display()))?;
            changed.push(path);
        }
    }
    Ok(changed)
}

/// The begin and end markers of section `name` in `file`.
fn markers(file: &str, name: &str) -> (String, String) {
    if file.ends_with(".md") {
        (
            format!("<!-- generated: {name} (from sdk/src/abi.rs by `{COMMAND}`; do not edit) -->"),
            format!("<!-- end generated: {name} -->"),
        )
    } else {
        (
            format!("/* generated: {name} (from sdk/src/abi.rs by `{COMMAND}`; do not edit) */"),
            format!("/* end generated: {name} */"),
        )
    }
}

/// `text` with section `name` replaced by `section`.
fn splice(text: &str, file: &str, name: &str, section: &str) -> Result<String, String> {
    let (begin, end) = markers(file, name);
    let missing = |marker: &str| format!("{file}: no line `{marker}` (the generated section {name} goes there)");
    let start = text.find(&begin).ok_or_else(|| missing(&begin))? + begin.len();
    let stop = text[start..].find(&end).ok_or_else(|| missing(&end))? + start;
    Ok(format!("{}\n{}{}", &text[..start], section, &text[stop..]))
}

/// A field's documentation on one line, for a table cell or a C comment.
fn one_line(doc: &str) -> String {
    let joined = doc.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    joined.replace("[`", "`").replace("`]", "`")
}

/// `text` wrapped to lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let Some(line) = lines.last_mut() else { break };
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

/// A C comment of `doc`, wrapped, indented by `indent`.
fn c_comment(out: &mut String, indent: &str, doc: &str) {
    let doc = one_line(doc).replace("*/", "* /");
    if doc.is_empty() {
        return;
    }
    let lines = wrap(&doc, 96);
    if lines.len() == 1 {
        let _ = writeln!(out, "{indent}/** {} */", lines[0]);
    } else {
        let _ = writeln!(out, "{indent}/**");
        for line in lines {
            let _ = writeln!(out, "{indent} * {line}");
        }
        let _ = writeln!(out, "{indent} */");
    }
}

/// `0 ready, 1 draining, 2 lost`.
fn values(layout: &EnumLayout) -> String {
    layout.values.iter().map(|(code, name, _)| format!("{code} {name}")).collect::<Vec<_>>().join(", ")
}

/// The fields of `layout` in offset order (the bits of a flag word in bit order).
fn by_offset(layout: &RecordLayout) -> Vec<&super::layout::FieldLayout> {
    let mut fields: Vec<_> = layout.fields.iter().collect();
    fields.sort_by_key(|f| (f.offset, if let Wire::Bit(bit) = f.wire { bit } else { 0 }));
    fields
}

/// A flag bit's C name.
fn bit_name(field: &super::layout::FieldLayout) -> String {
    field.c_name.map(str::to_owned).unwrap_or_else(|| field.name.to_uppercase())
}

/// The document's table of one record, with its caption.
fn markdown_table(layout: &RecordLayout) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}:\n", layout.caption.replace("{size}", &layout.size.to_string()));
    out.push_str("| offset | field | type |\n|---|---|---|\n");
    let fields = by_offset(layout);
    let mut i = 0;
    while i < fields.len() {
        let field = fields[i];
        let cell = if let Wire::Bit(_) = field.wire {
            let mut bits = Vec::new();
            while let Some(bit) = fields.get(i).filter(|f| matches!(f.wire, Wire::Bit(_)) && f.offset == field.offset) {
                let Wire::Bit(n) = bit.wire else { break };
                let doc = one_line(bit.doc);
                let doc = doc.strip_suffix('.').unwrap_or(&doc);
                bits.push(if doc.is_empty() {
                    format!("bit {n} {}", bit.name)
                } else {
                    format!("bit {n} {} ({doc})", bit.name)
                });
                i += 1;
            }
            format!("flags: {}", bits.join(", "))
        } else {
            i += 1;
            let mut name = if field.wire == Wire::Reserved { "reserved" } else { field.name }.to_owned();
            if let Wire::Code(codes) = field.wire {
                name = format!("{name} ({})", values(codes));
            }
            let doc = one_line(field.doc);
            if doc.is_empty() { name } else { format!("{name}: {doc}") }
        };
        let _ = writeln!(out, "| {} | {} | {} |", field.offset, cell.replace('|', "\\|"), field.wire.doc_type());
    }
    out
}

/// The C header's constants: every record's size, field offsets and flag bits, checked by static
/// assertions; then the enumerations.
fn c_layout() -> String {
    let mut out = String::new();
    for layout in LAYOUTS {
        let p = layout.c_prefix;
        let _ = writeln!(out, "/* {}, {} bytes. */", layout.name, layout.size);
        let _ = writeln!(out, "#define {} {}u", layout.c_size, layout.size);
        let mut flags_done = None;
        for field in by_offset(layout) {
            let upper = field.name.to_uppercase();
            match field.wire {
                Wire::Bit(bit) => {
                    if flags_done != Some(field.offset) {
                        let _ =
                            writeln!(out, "#define AIRTIME_{p}_FLAGS {}u /* u32: AIRTIME_{p}_FLAG_* */", field.offset);
                        flags_done = Some(field.offset);
                    }
                    c_comment(&mut out, "", field.doc);
                    let _ = writeln!(out, "#define AIRTIME_{p}_FLAG_{} {:#x}u", bit_name(field), 1u32 << bit);
                }
                wire => {
                    c_comment(&mut out, "", field.doc);
                    let kind = match wire {
                        Wire::Code(codes) => format!("u32: enum {}", codes.c_name),
                        Wire::Index(_) | Wire::Optional => "u32, AIRTIME_NONE when absent".to_owned(),
                        Wire::Required(_) => "u32: an index".to_owned(),
                        Wire::Flag => "u32: 1 or 0".to_owned(),
                        Wire::Reserved => "u32: 0".to_owned(),
                        Wire::Table(_) => "table {offset u32, count u32, stride u32}".to_owned(),
                        Wire::Str | Wire::UniqueStr => "string {offset u32, len u32}".to_owned(),
                        Wire::U32List => "{offset u32, len u32} of u32 entries".to_owned(),
                        other => other.doc_type().to_owned(),
                    };
                    let _ = writeln!(out, "#define AIRTIME_{p}_{upper} {}u /* {kind} */", field.offset);
                }
            }
        }
        if let Some(last) = layout.fields.iter().max_by_key(|f| f.offset) {
            let name = match last.wire {
                Wire::Bit(_) => "FLAGS".to_owned(),
                _ => last.name.to_uppercase(),
            };
            let _ = writeln!(
                out,
                "AIRTIME_STATIC_ASSERT(AIRTIME_{p}_{name} + {} == {}, \"{}\");",
                last.wire.size(),
                layout.c_size,
                layout.name
            );
        }
        out.push('\n');
    }
    out.push_str(
        "/* Enumerations. A minor version may add values: treat one you do not know conservatively (a node\n \
         * in an unknown state takes no work, a workload in an unknown state is not yours to decide). */\n\n",
    );
    for codes in ENUMS {
        c_comment(&mut out, "", codes.doc);
        let _ = writeln!(out, "enum {} {{", codes.c_name);
        for (code, name, doc) in codes.values {
            let doc = one_line(doc);
            let comment = if doc.is_empty() { String::new() } else { format!(" /* {doc} */") };
            let _ = writeln!(out, "    AIRTIME_{}_{} = {code},{comment}", codes.c_prefix, name.to_uppercase());
        }
        out.push_str("};\n\n");
    }
    out.push_str("/** Decision kind (decision offset 0). */\nenum airtime_decision_kind {\n");
    for (name, code) in [("PLACE", KIND_PLACE), ("PREEMPT", KIND_PREEMPT), ("KEEP_PENDING", KIND_KEEP_PENDING)] {
        let _ = writeln!(out, "    AIRTIME_KIND_{name} = {code},");
    }
    out.push_str("};\n");
    out
}

/// The C header's records: a struct and a reader for each record with a table.
fn c_records() -> String {
    let mut out = String::new();
    for layout in LAYOUTS {
        let (Some(c), Some(table)) = (layout.c_struct, layout.table) else { continue };
        let p = layout.c_prefix;
        let fields: Vec<_> = by_offset(layout).into_iter().filter(|f| f.wire != Wire::Reserved).collect();
        let _ = writeln!(out, "typedef struct airtime_{c} {{");
        let mut flags_done = None;
        for field in &fields {
            let member = field.c_name.unwrap_or(field.name);
            let line = match field.wire {
                Wire::Bit(_) if flags_done == Some(field.offset) => continue,
                Wire::Bit(_) => {
                    flags_done = Some(field.offset);
                    format!("uint32_t flags; /* AIRTIME_{p}_FLAG_* */")
                }
                Wire::Str | Wire::UniqueStr => format!("airtime_str {member};"),
                Wire::I32 => format!("int32_t {member};"),
                Wire::U64 => format!("uint64_t {member};"),
                Wire::F32 => format!("float {member};"),
                Wire::Code(codes) => format!("uint32_t {member}; /* enum {} */", codes.c_name),
                Wire::Index(_) | Wire::Optional => format!("uint32_t {member}; /* AIRTIME_NONE when absent */"),
                _ => format!("uint32_t {member};"),
            };
            let _ = writeln!(out, "    {line}");
        }
        let _ = writeln!(out, "}} airtime_{c};\n");

        let singular = table.record();
        if layout.table == Some(super::Table::Settings) {
            let _ = writeln!(out, "/** The settings record; false when the snapshot has none. */");
            let _ =
                writeln!(out, "static inline bool airtime_read_{c}(const airtime_snapshot *s, airtime_{c} *out) {{");
            let _ = writeln!(out, "    const uint8_t *r = airtime_record(s, s->{}, 0);", table.name());
        } else {
            let _ = writeln!(out, "/** The {singular} at index `i`; false when the index names no {singular}. */");
            let _ = writeln!(
                out,
                "static inline bool airtime_read_{c}(const airtime_snapshot *s, uint32_t i, airtime_{c} *out) {{"
            );
            let _ = writeln!(out, "    const uint8_t *r = airtime_record(s, s->{}, i);", table.name());
        }
        out.push_str("    if (r == NULL) return false;\n");
        let mut flags_done = None;
        for field in &fields {
            let member = field.c_name.unwrap_or(field.name);
            let upper = field.name.to_uppercase();
            let line = match field.wire {
                Wire::Bit(_) if flags_done == Some(field.offset) => continue,
                Wire::Bit(_) => {
                    flags_done = Some(field.offset);
                    format!("out->flags = airtime_get_u32(r + AIRTIME_{p}_FLAGS);")
                }
                Wire::Str | Wire::UniqueStr => {
                    format!("out->{member} = airtime_string_at(s, r + AIRTIME_{p}_{upper});")
                }
                Wire::I32 => format!("out->{member} = airtime_get_i32(r + AIRTIME_{p}_{upper});"),
                Wire::U64 => format!("out->{member} = airtime_get_u64(r + AIRTIME_{p}_{upper});"),
                Wire::F32 => format!("out->{member} = airtime_get_f32(r + AIRTIME_{p}_{upper});"),
                _ => format!("out->{member} = airtime_get_u32(r + AIRTIME_{p}_{upper});"),
            };
            let _ = writeln!(out, "    {line}");
        }
        out.push_str("    return true;\n}\n\n");
    }
    out
}
