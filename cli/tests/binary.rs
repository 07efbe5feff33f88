//! The built binary itself: its help names the exit codes scripts rely on, and a usage error exits
//! 2 with a message, not a panic. (Being an integration test of this package also makes `cargo test
//! --workspace` build the `airtime` binary that `tests/tests/cli.rs` runs against a control plane.)

use std::process::Command;

#[test]
fn the_help_names_the_exit_codes_and_bad_usage_exits_2() {
    let help = Command::new(env!("CARGO_BIN_EXE_airtime")).arg("--help").output().expect("airtime runs");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("Exit codes:") && text.contains("4  not found"), "{text}");

    let bad = Command::new(env!("CARGO_BIN_EXE_airtime")).arg("no-such-command").output().expect("airtime runs");
    assert_eq!(bad.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("panicked"));
}
