//! Compiles the policy crates to `wasm32-unknown-unknown` and leaves the modules in `OUT_DIR`, where
//! `src/lib.rs` embeds them.
//!
//! The nested `cargo build` gets its own target directory (`<target>/policy-wasm`), so it never
//! waits on the lock the outer build holds, and keeps its artifacts between outer builds (debug,
//! release, clippy and test all share it). Its environment is cleaned of what the outer build set
//! for *this* compilation (target, flags, wrappers such as clippy-driver, profile), which would
//! otherwise leak into a build for another target or make clippy produce no `.wasm` at all.
//!
//! Set `AIRTIME_POLICY_WASM_DIR` to a directory holding prebuilt `<crate>.wasm` files to skip the
//! nested build (for builders without the wasm target).

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// (package, artifact stem) of every policy crate built to wasm; the stem names the file in
/// `OUT_DIR` that `src/lib.rs` includes.
const POLICIES: &[(&str, &str)] = &[
    ("priority-best-fit", "priority_best_fit"),
    ("slo-first", "slo_first"),
    ("fair-share", "fair_share"),
    ("cost-aware", "cost_aware"),
    ("airtime-policy-template", "airtime_policy_template"),
    ("airtime-sdk-probe", "airtime_sdk_probe"),
    ("baseline-fifo", "baseline_fifo"),
    ("baseline-static-partition", "baseline_static_partition"),
    ("baseline-strict-priority", "baseline_strict_priority"),
    ("baseline-best-fit", "baseline_best_fit"),
    ("baseline-random", "baseline_random"),
    ("baseline-fgd", "baseline_fgd"),
];

fn main() {
    let manifest_dir = PathBuf::from(env_var("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.join("../..");
    let out_dir = PathBuf::from(env_var("OUT_DIR"));

    println!("cargo::rerun-if-env-changed=AIRTIME_POLICY_WASM_DIR");
    for path in ["Cargo.toml", "Cargo.lock", "sdk/Cargo.toml", "sdk/src"] {
        println!("cargo::rerun-if-changed={}", workspace.join(path).display());
    }
    for (package, _) in POLICIES {
        let dir = workspace.join("policies").join(package_dir(package));
        println!("cargo::rerun-if-changed={}", dir.join("Cargo.toml").display());
        println!("cargo::rerun-if-changed={}", dir.join("src").display());
    }

    let built = match env::var_os("AIRTIME_POLICY_WASM_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            ensure_wasm_target();
            build_policies(&workspace, &nested_target_dir(&out_dir))
        }
    };
    for (_, stem) in POLICIES {
        let from = built.join(format!("{stem}.wasm"));
        let to = out_dir.join(format!("{stem}.wasm"));
        if let Err(error) = fs::copy(&from, &to) {
            panic!("copying the policy module {} to {}: {error}", from.display(), to.display());
        }
    }
}

/// The directory of a policy package under `policies/`.
fn package_dir(package: &str) -> &str {
    match package {
        "airtime-policy-template" => "template",
        "airtime-sdk-probe" => "sdk-probe",
        other => other,
    }
}

fn env_var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name} for the build script"))
}

/// Installs the wasm32 standard library with rustup when it is missing, or stops with the command
/// to run.
fn ensure_wasm_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let libdir = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    // `--print target-libdir` answers even when the target is not installed; the directory with
    // its `libcore` is what says it is.
    let installed = |dir: &Path| {
        fs::read_dir(dir)
            .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("libcore-")))
            .unwrap_or(false)
    };
    if libdir.as_deref().is_some_and(installed) {
        return;
    }
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", WASM_TARGET]);
    if let Some(toolchain) = env::var_os("RUSTUP_TOOLCHAIN") {
        rustup.arg("--toolchain").arg(toolchain);
    }
    let added = rustup.output();
    let ok = matches!(&added, Ok(output) if output.status.success());
    if !ok || !libdir.as_deref().is_some_and(installed) {
        let detail = match added {
            Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            Err(error) => format!("could not run rustup: {error}"),
        };
        panic!(
            "\n\nThe built-in policies are compiled to WebAssembly, and the Rust standard library for \
             `{WASM_TARGET}` is not installed for {} (no libcore in {}).\n\
             `rustup target add {WASM_TARGET}` was tried and failed: {detail}\n\
             Install it with:\n\n    rustup target add {WASM_TARGET}\n\n\
             or point AIRTIME_POLICY_WASM_DIR at a directory of prebuilt policy modules.\n",
            rustc.to_string_lossy(),
            libdir.map(|d| d.display().to_string()).unwrap_or_else(|| "(rustc gave no libdir)".to_owned()),
        );
    }
}

/// `<target>/policy-wasm`, found as the ancestor of `OUT_DIR` that cargo tagged as a target
/// directory; `OUT_DIR/policy-wasm` if there is none.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(|target| target.join("policy-wasm"))
        .unwrap_or_else(|| out_dir.join("policy-wasm"))
}

/// Runs the nested build and returns the directory holding the `.wasm` files.
fn build_policies(workspace: &Path, target_dir: &Path) -> PathBuf {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(&cargo);
    command
        .arg("build")
        .arg("--release")
        .args(["--target", WASM_TARGET])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    for (package, _) in POLICIES {
        command.args(["-p", package]);
    }
    for (key, _) in env::vars_os() {
        let name = key.to_string_lossy();
        if leaks_into_nested_build(&name) {
            command.env_remove(&key);
        }
    }
    // Small, fast modules: they are compiled once per upload and instantiated every cycle.
    command
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false");
    let output = command.output().unwrap_or_else(|error| {
        panic!("could not run `{}` to build the policy modules: {error}", cargo.to_string_lossy())
    });
    if !output.status.success() {
        panic!(
            "building the policy modules failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    target_dir.join(WASM_TARGET).join("release")
}

/// Variables the outer build set for this compilation that must not reach the nested one. What
/// stays: the toolchain (`RUSTC`, `RUSTUP_*`), cargo's home, network and registry settings, and the
/// jobserver (`CARGO_MAKEFLAGS`), so the nested build shares the outer build's CPU budget.
fn leaks_into_nested_build(name: &str) -> bool {
    const KEEP: &[&str] = &["CARGO_HOME", "CARGO_MAKEFLAGS"];
    const KEEP_PREFIXES: &[&str] = &["CARGO_NET_", "CARGO_HTTP_", "CARGO_REGISTRIES_", "CARGO_REGISTRY_"];
    const DROP: &[&str] = &[
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
        "TARGET",
        "HOST",
        "OUT_DIR",
        "OPT_LEVEL",
        "PROFILE",
        "DEBUG",
        "NUM_JOBS",
        "RUSTC_BOOTSTRAP",
    ];
    if KEEP.contains(&name) || KEEP_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return false;
    }
    name.starts_with("CARGO") || name.starts_with("__CARGO") || name.starts_with("DEP_") || DROP.contains(&name)
}
