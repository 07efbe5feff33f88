//! Writes the ABI's generated sections (the C header's layout and records, the document's tables)
//! from the one declaration in `sdk/src/abi.rs`. `--check` writes nothing and exits 1 when a
//! section is out of date (the tidy test makes the same check).

use std::path::Path;
use std::process::ExitCode;

use airtime_policy_sdk::abi::generate;

// A command-line tool: what it wrote, or what is stale, is its output.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("."));
    let check = std::env::args().skip(1).any(|a| a == "--check");
    let result = if check {
        generate::stale(root).map(|stale| {
            stale.iter().map(|s| format!("{}: {} out of date", s.path, s.sections.join(", "))).collect::<Vec<_>>()
        })
    } else {
        generate::write(root).map(|changed| changed.iter().map(|p| format!("wrote {}", p.display())).collect())
    };
    match result {
        Ok(lines) => {
            for line in &lines {
                println!("{line}");
            }
            if check && !lines.is_empty() {
                eprintln!("run `{}`", generate::COMMAND);
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("abi-gen: {error}");
            ExitCode::FAILURE
        }
    }
}
