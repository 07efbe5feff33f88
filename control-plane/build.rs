//! Embeds the dashboard: lists the files of `web/dist` (the Vite build of `web/`, made by
//! `make web`) into `$OUT_DIR/web_assets.rs` as `include_bytes!` entries with their content types,
//! so the control plane stays one binary. No dependency: the list is plain generated Rust, and a
//! missing build fails here with what to run, not with an obscure macro error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let dist = manifest.join("../web/dist");
    // A directory: cargo reruns this script when anything under it changes.
    println!("cargo:rerun-if-changed={}", dist.display());
    println!("cargo:rerun-if-changed=build.rs");
    // `sqlx::migrate!` embeds the migrations at compile time; without this, a new migration file
    // is left out of an incremental build.
    println!("cargo:rerun-if-changed={}", manifest.join("../migrations").display());
    if !dist.join("index.html").is_file() {
        println!(
            "cargo:warning=web/dist is missing: run `make web` (needs Node.js 20 and npm) before building the control plane"
        );
        eprintln!(
            "\nerror: the dashboard is not built ({} has no index.html).\n       \
             run `make web` (needs Node.js 20 and npm) before building the control plane\n",
            dist.display()
        );
        std::process::exit(1);
    }
    let mut files = Vec::new();
    collect(&dist, &dist, &mut files);
    files.sort();
    let mut out = String::from("/// Every file of web/dist: (URL path, content type, bytes).\n");
    out.push_str("pub(crate) static FILES: &[(&str, &str, &[u8])] = &[\n");
    for (url, path) in &files {
        let _ = writeln!(out, "    ({url:?}, {:?}, include_bytes!({:?})),", content_type(path), path.display());
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("web_assets.rs");
    std::fs::write(&target, out).expect("writing web_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let url = format!("/{}", rel.to_string_lossy().replace('\\', "/"));
            let path = path.canonicalize().unwrap_or(path);
            files.push((url, path));
        }
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "txt" => "text/plain; charset=utf-8",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}
