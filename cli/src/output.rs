//! What a command prints: tables for people (comfy-table, without borders, so `grep` and `awk`
//! work on them too) or the API's JSON for scripts.

use std::io::Write as _;

use chrono::{DateTime, Utc};
use comfy_table::{CellAlignment, ColumnConstraint, Table, presets};
use serde_json::Value;

/// Writes to standard output; a closed pipe (`airtime list | head`) ends the program quietly.
pub fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).is_err() {
        std::process::exit(0);
    }
}

/// Writes to standard error, ignoring a closed one.
pub fn err(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
}

/// A line to standard output.
pub fn line(text: &str) {
    out(&format!("{text}\n"));
}

/// The API's JSON, indented.
pub fn json(value: &Value) {
    line(&serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

/// A table with these column headers, borderless.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_header(header.iter().copied());
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
        column.set_constraint(ColumnConstraint::ContentWidth);
    }
    table
}

/// Key and value rows: one thing's fields.
pub fn fields(rows: Vec<(&str, String)>) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING);
    for (key, value) in rows {
        table.add_row(vec![format!("{key}:"), value]);
    }
    if let Some(column) = table.column_mut(0) {
        column.set_padding((0, 1));
        column.set_cell_alignment(CellAlignment::Left);
    }
    if let Some(column) = table.column_mut(1) {
        column.set_padding((0, 0));
    }
    table
}

pub fn print(table: &Table) {
    line(&render(table));
}

/// A table's text as `print` writes it (without the last newline).
pub fn render(table: &Table) -> String {
    // comfy-table pads the last column too; trailing spaces help nobody.
    let text: Vec<String> = table.lines().map(|l| l.trim_end().to_owned()).collect();
    text.join("\n")
}

/// A JSON value as a cell: strings without quotes, `-` for absent.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// Text for one line of a table: newlines and other control characters shown as spaces, and cut.
pub fn one_line(text: &str, max: usize) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if clean.chars().count() > max {
        let cut: String = clean.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        clean
    }
}

/// How long ago an RFC 3339 time was: `42s`, `5m`, `3h`, `2d`.
pub fn age(value: &Value) -> String {
    let Some(at) = value.as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()) else {
        return "-".into();
    };
    let secs = (Utc::now() - at.with_timezone(&Utc)).num_seconds().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

/// MiB as people read them: `512Mi`, `20Gi`.
pub fn mib(value: &Value) -> String {
    match value.as_i64() {
        Some(0) | None => "-".into(),
        Some(m) if m % 1024 == 0 => format!("{}Gi", m / 1024),
        Some(m) => format!("{m}Mi"),
    }
}

/// Thousandths of a core as people read them: `500m`, `2`.
pub fn cpu(value: &Value) -> String {
    match value.as_i64() {
        Some(0) | None => "-".into(),
        Some(m) if m % 1000 == 0 => format!("{}", m / 1000),
        Some(m) => format!("{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_read_as_people_write_them() {
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!("running")), "running");
        assert_eq!(cell(&json!(["a", "b"])), "a, b");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(mib(&json!(20480)), "20Gi");
        assert_eq!(mib(&json!(300)), "300Mi");
        assert_eq!(cpu(&json!(500)), "500m");
        assert_eq!(cpu(&json!(2000)), "2");
        assert_eq!(one_line("a\nb\u{1b}[31m", 100), "a b [31m");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(age(&json!("not a time")), "-");
        assert_eq!(age(&json!(Utc::now().to_rfc3339())), "0s");
    }

    #[test]
    fn tables_have_no_borders_or_trailing_space() {
        let mut t = table(&["ID", "STATE"]);
        t.add_row(vec!["w1", "running"]);
        let text: Vec<String> = t.lines().map(|l| l.trim_end().to_owned()).collect();
        assert_eq!(text, ["ID  STATE", "w1  running"]);
    }
}
