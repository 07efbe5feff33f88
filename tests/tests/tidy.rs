//! The architecture's invariants that a command can check (ARCHITECTURE.md states each with the
//! reason it exists), as rust-analyzer's `tidy` does: this test fails CI the moment one is broken,
//! naming the rule and the place that broke it.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use sha2::Digest as _;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every file under `dir` whose name ends with `suffix`, skipping build outputs.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | "node_modules" | ".git" | "corpus" | "artifacts") {
                    stack.push(path);
                }
            } else if name.ends_with(suffix) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap().display().to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The SQL statements in a source file that write a workload's `state`, as `UPDATE workloads …
/// SET … state = …` before the statement's `WHERE` (string continuations joined).
fn state_writes(source: &str) -> usize {
    let flat = source.replace("\\\n", " ");
    let mut count = 0;
    for (at, _) in flat.match_indices("UPDATE workloads") {
        let rest = &flat[at..];
        let end = rest.find("WHERE").unwrap_or(rest.len()).min(600);
        let set = &rest[..end];
        let writes_state = set.match_indices("state").any(|(i, _)| {
            let before = set[..i].chars().next_back();
            let after = set[i + "state".len()..].trim_start();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && after.starts_with('=')
        });
        count += usize::from(writes_state);
    }
    count
}

#[test]
fn a_workloads_state_is_written_only_by_its_transitions_and_the_cycles_record() {
    let allowed = ["control-plane/src/workloads/transitions.rs", "control-plane/src/scheduler/record.rs"];
    let mut broken = Vec::new();
    for file in files(&root().join("control-plane/src"), ".rs") {
        let name = relative(&file);
        let writes = state_writes(&read(&file));
        if writes > 0 && !allowed.contains(&name.as_str()) {
            broken.push(format!("{name}: {writes} statement(s) set a workload's state"));
        }
    }
    assert!(
        broken.is_empty(),
        "a workload's state changes only in workloads::transitions or scheduler::record, with its event \
         row in the same transaction:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_state_scan_finds_a_write_and_ignores_other_columns() {
    assert_eq!(state_writes(r#""UPDATE workloads SET state = 'running' WHERE id = $1""#), 1);
    assert_eq!(
        state_writes("\"UPDATE workloads SET pending_reason = $2, \\\n updated_at = now() WHERE state = 'pending'\""),
        0
    );
    assert_eq!(state_writes(r#""UPDATE workloads w SET last_state = 1, state= $2 WHERE""#), 1);
}

/// The tables whose rows are referenced by ids that are checked per statement, not by foreign keys
/// (migration 0020; ARCHITECTURE.md, "References checked per statement").
const NEVER_DELETED: [&str; 6] = ["gpus", "nodes", "workloads", "tenants", "policy_versions", "scheduling_cycles"];

/// The statements in a source (Rust or SQL) that delete rows of a table named in `tables`:
/// `DELETE FROM [ONLY] t` or `TRUNCATE [TABLE] [ONLY] t`, whatever the case.
fn deletes_from(source: &str, tables: &[&str]) -> Vec<String> {
    let flat = source.replace("\\\n", " ").to_lowercase();
    let words: Vec<&str> = flat.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect();
    let mut found = Vec::new();
    for (i, pair) in words.windows(2).enumerate() {
        // Where the table's name is: after the verb, past an `ONLY`.
        let (verb, mut at) = match pair {
            ["delete", "from"] => ("delete from", i + 2),
            ["truncate", "table"] => ("truncate table", i + 2),
            ["truncate", _] => ("truncate", i + 1),
            _ => continue,
        };
        if words.get(at) == Some(&"only") {
            at += 1;
        }
        if let Some(table) = words.get(at).filter(|t| tables.contains(t)) {
            found.push(format!("{verb} {table}"));
        }
    }
    found
}

#[test]
fn nothing_deletes_what_is_referenced_without_a_foreign_key() {
    let mut broken = Vec::new();
    for (dir, suffix) in [
        ("control-plane/src", ".rs"),
        ("node-agent/src", ".rs"),
        ("cli/src", ".rs"),
        ("sim/src", ".rs"),
        ("replay/src", ".rs"),
        ("migrations", ".sql"),
    ] {
        for file in files(&root().join(dir), suffix) {
            for statement in deletes_from(&read(&file), &NEVER_DELETED) {
                broken.push(format!("{}: {statement}", relative(&file)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "grants, decisions and events reference these rows by ids checked once, per statement; a delete \
         would leave them dangling (give the table a foreign key back first):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_delete_scan_finds_a_planted_delete_and_ignores_other_tables() {
    let tables = NEVER_DELETED;
    assert_eq!(deletes_from(r#""DELETE FROM workloads WHERE id = $1""#, &tables), vec!["delete from workloads"]);
    assert_eq!(deletes_from("TRUNCATE TABLE nodes, gpus;", &tables), vec!["truncate table nodes"]);
    assert_eq!(deletes_from("truncate gpus", &tables), vec!["truncate gpus"]);
    assert_eq!(deletes_from("DELETE FROM ONLY tenants t", &tables), vec!["delete from tenants"]);
    assert_eq!(deletes_from("truncate only scheduling_cycles", &tables), vec!["truncate scheduling_cycles"]);
    assert!(deletes_from(r#""DELETE FROM gpu_grants WHERE workload_id = ANY($1)""#, &tables).is_empty());
    assert!(deletes_from("DELETE FROM workload_logs w USING workloads", &tables).is_empty());
}

#[test]
fn only_the_policy_host_depends_on_wasmtime() {
    let mut broken = Vec::new();
    for manifest in files(&root(), "Cargo.toml") {
        let name = relative(&manifest);
        if name == "Cargo.toml" || name == "policy-host/Cargo.toml" {
            continue; // the workspace's version pin; the one crate that runs Wasm
        }
        for line in read(&manifest).lines() {
            let key = line.split(['=', '.', ' ']).next().unwrap_or("");
            if key == "wasmtime" || key.starts_with("wasmtime-") {
                broken.push(format!("{name}: {line}"));
            }
        }
    }
    assert!(broken.is_empty(), "only airtime-policy-host may depend on wasmtime:\n{}", broken.join("\n"));
}

/// What the scheduling core may never pull in, directly or through another crate: a database, a
/// web framework, an async runtime or the Wasm engine (its adapters bring those).
const NOT_UNDER_THE_CORE: [&str; 6] = ["sqlx", "tokio", "axum", "hyper", "wasmtime", "reqwest"];

/// What the simulator may never pull in: it runs the core and the Wasm runtime, in virtual time,
/// with no database, web framework or async runtime of its own.
const NOT_UNDER_THE_SIMULATOR: [&str; 5] = ["sqlx", "tokio", "axum", "hyper", "reqwest"];

/// The names of every crate in a `cargo tree --prefix none` listing that `forbidden` names.
fn forbidden_in(tree: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| forbidden.iter().any(|f| name == f || name.starts_with(&format!("{f}-"))))
        .map(str::to_owned)
        .collect();
    found.sort();
    found.dedup();
    found
}

fn forbidden_under_the_core(tree: &str) -> Vec<String> {
    forbidden_in(tree, &NOT_UNDER_THE_CORE)
}

/// `cargo tree` of a package's normal dependencies, one crate per line.
fn dependency_tree(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "-p", package, "-e", "normal", "--prefix", "none"])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_scheduling_core_depends_on_no_database_runtime_or_engine() {
    let tree = dependency_tree("airtime-scheduler");
    assert!(tree.contains("airtime-policy-sdk"), "the listing names the core's dependencies:\n{tree}");
    let found = forbidden_under_the_core(&tree);
    assert!(
        found.is_empty(),
        "the scheduling core (scheduler/) must not depend on {found:?}: the control plane and the simulator \
         are its adapters, and the simulator runs it in virtual time"
    );
}

#[test]
fn the_simulator_runs_the_core_without_a_database_or_an_async_runtime() {
    for package in ["airtime-replay", "airtime-sim"] {
        let tree = dependency_tree(package);
        assert!(
            tree.contains("airtime-scheduler") && tree.contains("airtime-policy-host"),
            "the listing names {package}'s dependencies:\n{tree}"
        );
        let found = forbidden_in(&tree, &NOT_UNDER_THE_SIMULATOR);
        assert!(
            found.is_empty(),
            "{package} (the replay engine and the simulator's CLI) must not depend on {found:?}: it replays in \
             virtual time through the core and the policy runtime, and a dependency on the control plane's \
             stack would let it grow rules of its own"
        );
    }
}

/// What only the simulator's command line needs: the crate itself and its plotting and table
/// libraries. The control plane's what-if runs the replay engine (`airtime-replay`) without them.
const ONLY_THE_SIMULATORS_CLI: [&str; 3] = ["airtime-sim", "plotters", "comfy-table"];

fn the_simulators_cli_in(tree: &str) -> Vec<String> {
    forbidden_in(tree, &ONLY_THE_SIMULATORS_CLI)
}

#[test]
fn the_control_plane_runs_the_replay_engine_not_the_simulators_cli() {
    let tree = dependency_tree("airtime-control-plane");
    assert!(tree.contains("airtime-replay"), "the listing names the control plane's dependencies:\n{tree}");
    let found = the_simulators_cli_in(&tree);
    assert!(
        found.is_empty(),
        "the control plane must not depend on {found:?}: its what-if runs the replay engine (airtime-replay); \
         the simulator's CLI, its trace loaders and its plots stay out of the server"
    );
}

#[test]
fn the_cli_scan_finds_a_planted_dependency() {
    let planted = "airtime-control-plane v0.1.0 (/x/control-plane)\nairtime-replay v0.1.0 (/x/replay)\n\
                   airtime-sim v0.1.0 (/x/sim)\nplotters-svg v0.3.7\ncomfy-table v7.2.1\n";
    assert_eq!(the_simulators_cli_in(planted), vec!["airtime-sim", "comfy-table", "plotters-svg"]);
    assert!(the_simulators_cli_in("airtime-replay v0.1.0\nairtime-simple v1\n").is_empty());
}

#[test]
fn the_core_scan_finds_a_planted_dependency() {
    let planted = "airtime-scheduler v0.1.0 (/x/scheduler)\nsqlx-core v0.9.0\nchrono v0.4.45\ntokio v1.54.1\n";
    assert_eq!(forbidden_under_the_core(planted), vec!["sqlx-core", "tokio"]);
    assert_eq!(forbidden_under_the_core("tokio-stream v0.1.17\n"), vec!["tokio-stream"]);
    assert!(forbidden_under_the_core("sqlxish v1\nchrono v0.4\n").is_empty());
}

/// The core's steps of a cycle that only its one cycle function (`airtime_scheduler::cycle::run`)
/// calls: the autoscaler's plans, the derived burst reserve, the two levels decided.
const CYCLE_STEPS: [&str; 3] = ["plan", "burst_reserve", "decide"];

/// The cycle's adapters: the control plane's loop, the replay engine, and the simulator's token
/// week (which only scales).
const CYCLE_ADAPTERS: [&str; 3] = ["control-plane/src/scheduler/mod.rs", "replay/src/engine.rs", "sim/src/tokens.rs"];

/// The lines of `source` (code, not comments or strings) that call one of the cycle's steps by
/// path (`services::plan(`, `cycle::decide(`) or import one.
fn cycle_steps_in(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = without_strings(line.trim_start());
        if code.starts_with("//") {
            continue;
        }
        let imports = code.starts_with("use ") || code.starts_with("pub use ");
        let words = || code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        let calls = CYCLE_STEPS.iter().any(|step| code.contains(&format!("::{step}(")));
        if calls || (imports && words().any(|w| CYCLE_STEPS.contains(&w))) {
            found.push((n + 1, line.trim().to_owned()));
        }
    }
    found
}

#[test]
fn the_cycle_is_orchestrated_once_in_the_core_and_its_adapters_call_it() {
    let mut broken = Vec::new();
    for dir in ["control-plane/src", "replay/src", "sim/src"] {
        for file in files(&root().join(dir), ".rs") {
            for (line, text) in cycle_steps_in(&read(&file)) {
                broken.push(format!("{}:{line}: {text}", relative(&file)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the steps of a cycle (read, autoscale, burst-reserve floor, decide, compose, check) are one function of \
         the core, airtime_scheduler::cycle::run; an adapter implements cycle::Adapter and calls it, never a step \
         itself (two orchestrations drift apart):\n{}",
        broken.join("\n")
    );
    for adapter in CYCLE_ADAPTERS {
        let source = read(&root().join(adapter));
        assert!(source.contains("cycle::run("), "{adapter}: the cycle's adapter calls airtime_scheduler::cycle::run");
    }
}

#[test]
fn the_step_scan_finds_a_planted_call_and_ignores_words_in_comments_and_strings() {
    let planted = "// services::plan(&fleet) in a comment\nlet m = \"cycle::decide(\";\n\
                   let plans = core::plan(&fleet);\nuse airtime_scheduler::services::{burst_reserve, ScalePlan};\n";
    assert_eq!(
        cycle_steps_in(planted),
        vec![
            (3, "let plans = core::plan(&fleet);".to_owned()),
            (4, "use airtime_scheduler::services::{burst_reserve, ScalePlan};".to_owned())
        ]
    );
    assert!(cycle_steps_in("let turn = cycle::run(&mut io, &evaluator).await?;\nlet p = plan.reason;").is_empty());
}

/// A line of code with the contents of its string literals taken out (a Content-Security-Policy's
/// `'unsafe-inline'` is not unsafe code).
fn without_strings(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in line.chars() {
        match (in_string, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, true, _) => escaped = false,
            (true, false, '"') => {
                in_string = false;
                out.push(c);
            }
            (true, false, _) => {}
            (false, _, '"') => {
                in_string = true;
                out.push(c);
            }
            (false, _, _) => out.push(c),
        }
    }
    out
}

#[test]
fn unsafe_code_appears_only_in_the_sdks_guest_exports_and_allocator() {
    assert_eq!(without_strings(r#"let csp = "style-src 'unsafe-inline'"; unsafe {"#), r#"let csp = ""; unsafe {"#);
    let allowed = ["sdk/src/guest.rs", "sdk/src/guest/alloc.rs", "sdk/src/guest/exports.rs"];
    let mut broken = Vec::new();
    for file in files(&root(), ".rs") {
        let name = relative(&file);
        if allowed.contains(&name.as_str()) || name == "tests/tests/tidy.rs" {
            continue;
        }
        for (n, line) in read(&file).lines().enumerate() {
            let code = without_strings(line.trim_start());
            let code = code.as_str();
            if code.starts_with("//") {
                continue;
            }
            let forbids = code.contains("forbid(unsafe_code)") || code.contains("deny(unsafe_code)");
            if !forbids
                && code.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| w == "unsafe" || w == "unsafe_code")
            {
                broken.push(format!("{name}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "unsafe code lives only in the SDK's guest exports and allocator (sdk/src/guest*):\n{}",
        broken.join("\n")
    );
}

/// The sha256 of `sources` (in order), hex.
fn digest(sources: &[PathBuf]) -> String {
    let mut hash = sha2::Sha256::new();
    for source in sources {
        hash.update(relative(source).as_bytes());
        hash.update(std::fs::read(source).unwrap());
    }
    hex(&hash.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A contract's sources and its document change together: the document carries the digest of the
/// sources it describes (`<!-- tidy: <digest> -->`), so changing them without touching it fails.
fn contract_changes_with_its_document(sources: &[PathBuf], document: &str) {
    let now = digest(sources);
    let doc = read(&root().join(document));
    let recorded = doc.lines().find_map(|l| l.trim().strip_prefix("<!-- tidy: ")?.strip_suffix(" -->"));
    let names: Vec<String> = sources.iter().map(|s| relative(s)).collect();
    assert_eq!(
        recorded,
        Some(now.as_str()),
        "{} changed without {document}: say in it what changed, then set its line `<!-- tidy: {now} -->`",
        names.join(", ")
    );
}

#[test]
fn the_policy_abi_changes_only_with_its_document() {
    contract_changes_with_its_document(&[root().join("sdk/src/abi.rs")], "docs/policy-abi.md");
}

/// The C header's layout sections and the document's record tables are generated from the one
/// declaration of each record (`sdk/src/abi.rs`); a hand edit, or a declaration changed without
/// regenerating, fails here.
#[test]
fn the_generated_abi_sections_are_current() {
    use airtime_policy_sdk::abi::generate;
    let stale = generate::stale(&root()).unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<String> =
        stale.iter().map(|s| format!("{}: generated sections {} differ", s.path, s.sections.join(", "))).collect();
    assert!(
        lines.is_empty(),
        "the ABI's generated sections are not what sdk/src/abi.rs declares; run `{}`:\n{}",
        generate::COMMAND,
        lines.join("\n")
    );
}

#[test]
fn the_agent_protocol_changes_only_with_its_document() {
    contract_changes_with_its_document(&files(&root().join("protocol/src"), ".rs"), "docs/agent-protocol.md");
}

/// The domain modules of the control plane: what they may not name (HTTP and the API's caller).
const DOMAIN_MODULES: [&str; 13] = [
    "control-plane/src/workloads",
    "control-plane/src/archive.rs",
    "control-plane/src/budgets.rs",
    "control-plane/src/fleet/maintenance.rs",
    "control-plane/src/services",
    "control-plane/src/policies",
    "control-plane/src/what_if",
    "control-plane/src/tenancy.rs",
    "control-plane/src/users.rs",
    "control-plane/src/invitations.rs",
    "control-plane/src/settings.rs",
    "control-plane/src/auth/tokens.rs",
    "control-plane/src/domain.rs",
];
const HTTP_WORDS: [&str; 5] = ["ApiError", "ApiResult", "Caller", "axum", "StatusCode"];

/// The lines of `source` (code, not comments or strings) that name HTTP or the API's caller.
fn http_in(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = without_strings(line.trim_start());
        if code.starts_with("//") {
            continue;
        }
        if code.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| HTTP_WORDS.contains(&w)) {
            found.push((n + 1, line.trim().to_owned()));
        }
    }
    found
}

#[test]
fn domain_code_returns_domain_errors_and_takes_a_scope_only_api_knows_http() {
    let mut broken = Vec::new();
    for module in DOMAIN_MODULES {
        let path = root().join(module);
        let sources = if path.is_dir() { files(&path, ".rs") } else { vec![path] };
        assert!(!sources.is_empty(), "{module}: no sources (a domain module moved? update DOMAIN_MODULES)");
        for file in sources {
            for (line, text) in http_in(&read(&file)) {
                broken.push(format!("{}:{line}: {text}", relative(&file)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "domain modules return domain::Error and take a domain::Scope; only api/ knows HTTP and the Caller:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_http_scan_finds_a_planted_api_error_and_ignores_words_in_comments_and_strings() {
    let planted = "// ApiError in a comment\nlet m = \"Caller\";\nreturn Err(ApiError::NotFound(\"x\"));\n";
    assert_eq!(http_in(planted), vec![(3, "return Err(ApiError::NotFound(\"x\"));".to_owned())]);
    assert_eq!(http_in("fn f(caller: &Caller) {}"), vec![(1, "fn f(caller: &Caller) {}".to_owned())]);
    assert!(http_in("fn f(scope: &Scope) -> domain::Result<()> {}").is_empty());
}

/// The contents of the string literals that start on a line (the opposite of [`without_strings`]).
fn strings_in(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut escaped = false;
    for c in line.chars() {
        match (&mut current, escaped, c) {
            (Some(_), false, '\\') => escaped = true,
            (Some(s), true, _) => {
                escaped = false;
                s.push(c);
            }
            (Some(_), false, '"') => out.extend(current.take()),
            (Some(s), false, _) => s.push(c),
            (None, _, '"') => current = Some(String::new()),
            (None, _, _) => {}
        }
    }
    out.extend(current);
    out
}

/// What begins an SQL statement in a string literal.
const SQL_VERBS: [&str; 6] = ["SELECT ", "INSERT INTO ", "UPDATE ", "DELETE FROM ", "WITH ", "TRUNCATE "];

/// The lines of `source` (code, not comments) that run SQL or hold a transaction: anything that
/// names `sqlx`, a transaction's `.begin()`, `.commit()` or `.rollback()`, `Transaction`, or a
/// string literal that starts an SQL statement.
fn sql_in(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let code = without_strings(trimmed);
        let words = || code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        let names_sqlx = words().any(|w| w == "sqlx" || w == "Transaction");
        let transaction = [".begin(", ".commit(", ".rollback("].iter().any(|call| code.contains(call));
        let statement =
            strings_in(trimmed).iter().any(|s| SQL_VERBS.iter().any(|verb| s.trim_start().starts_with(verb)));
        if names_sqlx || transaction || statement {
            found.push((n + 1, line.trim().to_owned()));
        }
    }
    found
}

#[test]
fn api_handlers_parse_call_and_map_without_sql_or_a_transaction() {
    let mut broken = Vec::new();
    let handlers = files(&root().join("control-plane/src/api"), ".rs");
    assert!(handlers.len() > 10, "control-plane/src/api holds the handlers (moved? update this test)");
    for file in handlers {
        for (line, text) in sql_in(&read(&file)) {
            broken.push(format!("{}:{line}: {text}", relative(&file)));
        }
    }
    assert!(
        broken.is_empty(),
        "handlers in control-plane/src/api/ parse, call a domain function and map its answer; SQL and \
         transactions (a change with its audit row included) live in the domain modules:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_sql_scan_finds_a_planted_query_and_transaction_and_ignores_comments_and_prose() {
    let planted = "// sqlx::query(\"SELECT 1\") in a comment\n\
                   let mut tx = state.db.begin().await?;\n\
                   let n = db::run(&state.db, \"DELETE FROM nodes WHERE id = $1\").await?;\n\
                   let m = \"Update the policy with its new version\";\n\
                   let (x,): (i64,) = sqlx::query_as(\"SELECT 1\").fetch_one(&state.db).await?;\n\
                   tx.commit().await?;\n";
    let lines: Vec<usize> = sql_in(planted).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, vec![2, 3, 5, 6]);
    assert_eq!(strings_in(r#"f("a \"b\"", "c")"#), vec![r#"a "b""#.to_owned(), "c".to_owned()]);
    assert!(sql_in("let wake = state.wake.clone(); // committed").is_empty());
}

/// The places that build SQL at run time, reviewed: with sqlx 0.9 a statement is a `&'static str`
/// unless it goes through `AssertSqlSafe` (or a `QueryBuilder`, a `SqlStr`), so these are every
/// place a value could reach SQL text instead of a bind parameter. Each interpolates only constants
/// of the same file (a column list, a shared `SELECT`, an interval) or one of a few literals the
/// code picks. The number is how many such places the file holds; a new one fails until it is
/// reviewed and counted here.
const RUNTIME_SQL: [(&str, usize, &str); 14] = [
    ("control-plane/src/auth/tokens.rs", 5, "API_TOKEN_SELECT, ENROLMENT_SELECT, NODE_CREDENTIAL_SELECT"),
    ("control-plane/src/fleet/mod.rs", 6, "NODE_SELECT, GPU_SELECT"),
    ("control-plane/src/invitations.rs", 2, "SELECT (an invitation's columns)"),
    ("control-plane/src/scheduler/fleet_view.rs", 3, "WORKLOAD_COLUMNS, ACTIVE"),
    ("control-plane/src/scheduler/record.rs", 2, "MOVE, with or without the version check"),
    ("control-plane/src/services/mod.rs", 2, "SERVICE_SELECT"),
    (
        "control-plane/src/services/serving.rs",
        2,
        "cost_sql(variant, bound expressions the code picks) with usage's GPU_COST",
    ),
    ("control-plane/src/scheduler/scale.rs", 2, "KEEP_LOADS (an interval constant)"),
    ("control-plane/src/usage.rs", 3, "GPU_COST (an expression constant)"),
    ("control-plane/src/users.rs", 3, "MEMBERSHIP_SELECT"),
    ("control-plane/src/what_if/mod.rs", 2, "VIEW_COLUMNS"),
    ("control-plane/src/what_if/runner.rs", 1, "STALE_AFTER (an interval constant)"),
    ("control-plane/src/workloads/logs.rs", 1, "the column `workload_id` or `tenant_id`, from two literals"),
    ("control-plane/src/workloads/mod.rs", 2, "workload_select(position) and the ranking CTE, from literals"),
];

/// How many places in `source` (code, not comments) build SQL at run time.
fn runtime_sql_in(source: &str) -> usize {
    source
        .lines()
        .map(|line| line.trim_start())
        .filter(|line| !line.starts_with("//"))
        .map(|line| {
            let code = without_strings(line);
            code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| matches!(*w, "AssertSqlSafe" | "QueryBuilder" | "SqlStr" | "raw_sql"))
                .count()
        })
        .sum()
}

#[test]
fn sql_is_built_at_run_time_only_in_the_reviewed_places() {
    let mut broken = Vec::new();
    for file in files(&root().join("control-plane/src"), ".rs") {
        let name = relative(&file);
        let found = runtime_sql_in(&read(&file));
        let reviewed = RUNTIME_SQL.iter().find(|(path, _, _)| *path == name).map_or(0, |(_, n, _)| *n);
        if found != reviewed {
            broken.push(format!("{name}: {found} place(s) build SQL at run time, {reviewed} reviewed"));
        }
    }
    assert!(
        broken.is_empty(),
        "SQL text is a constant; a statement built at run time (format! through sqlx::AssertSqlSafe, a \
         QueryBuilder) may interpolate only constants or literals the code picks, never a value — review \
         it, then count it in RUNTIME_SQL (tests/tests/tidy.rs):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_runtime_sql_scan_counts_a_planted_format_and_ignores_comments() {
    let planted = "// sqlx::AssertSqlSafe in a comment\n\
                   let q = sqlx::query(sqlx::AssertSqlSafe(format!(\"SELECT {COLUMNS} FROM t\")));\n\
                   let b = sqlx::QueryBuilder::new(\"SELECT \");\n\
                   let s = \"AssertSqlSafe\";\n";
    assert_eq!(runtime_sql_in(planted), 2);
}

/// ARCHITECTURE.md's words, code and tables included.
fn architecture_words() -> usize {
    read(&root().join("ARCHITECTURE.md")).split_whitespace().count()
}

#[test]
fn the_architecture_stays_a_map_of_at_most_4500_words() {
    // A map read in minutes before changing code; narratives belong in docs/design/ (issue 37).
    let words = architecture_words();
    assert!(words <= 4_500, "ARCHITECTURE.md has {words} words: move detail to docs/design/, keep the map");
}

/// The top-level modules of the crate a line of code names (`crate::x::…`, `use crate::{x, y}`).
fn crate_modules_named(line: &str) -> Vec<String> {
    let code = without_strings(line.trim_start());
    // Comments name modules without importing them.
    let code = code.split("//").next().unwrap_or("");
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names = if let Some(group) = rest.strip_prefix('{') {
            group.split('}').next().unwrap_or("")
        } else {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("")
        };
        for name in names.split(',') {
            let name = name.trim().split("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                named.push(name.to_owned());
            }
        }
    }
    named
}

/// Which of the crate's top-level modules each one names, from the sources under `src`.
fn module_graph(src: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let module_of = |file: &Path| -> Option<String> {
        let first = file.strip_prefix(src).ok()?.components().next()?.as_os_str().to_string_lossy().into_owned();
        let name = first.trim_end_matches(".rs").to_owned();
        (!matches!(name.as_str(), "lib" | "main")).then_some(name)
    };
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for file in files(src, ".rs") {
        let Some(module) = module_of(&file) else { continue };
        let entry = graph.entry(module.clone()).or_default();
        for line in read(&file).lines() {
            entry.extend(crate_modules_named(line).into_iter().filter(|m| *m != module));
        }
    }
    let known: std::collections::BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| known.contains(d));
    }
    graph
}

/// Every module that reaches itself through the graph, with the path that closes the cycle.
fn import_cycles(graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>) -> Vec<String> {
    let mut cycles = Vec::new();
    for start in graph.keys() {
        // Breadth first from the module's own imports, keeping how each module was reached.
        let mut came_from: std::collections::BTreeMap<&str, &str> = Default::default();
        let mut queue: std::collections::VecDeque<&str> = graph[start].iter().map(String::as_str).collect();
        for d in &graph[start] {
            came_from.insert(d, start);
        }
        while let Some(m) = queue.pop_front() {
            if m == start {
                let mut path = vec![start.as_str()];
                let mut at = came_from[start.as_str()];
                while at != start {
                    path.push(at);
                    at = came_from[at];
                }
                path.push(start);
                path.reverse();
                cycles.push(path.join(" → "));
                break;
            }
            for d in graph.get(m).into_iter().flatten() {
                if !came_from.contains_key(d.as_str()) {
                    came_from.insert(d, m);
                    queue.push_back(d);
                }
            }
        }
    }
    cycles
}

#[test]
fn the_control_planes_modules_import_one_another_without_a_cycle() {
    let cycles = import_cycles(&module_graph(&root().join("control-plane/src")));
    assert!(
        cycles.is_empty(),
        "the control plane's top-level modules form import cycles (a module that both names and is named \
         by another cannot be read, tested or moved alone; move the shared part down):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_import_scan_finds_a_planted_cycle_and_ignores_comments_and_strings() {
    assert_eq!(crate_modules_named("use crate::{api, fleet::health, web};"), vec!["api", "fleet", "web"]);
    assert_eq!(crate_modules_named("let x = crate::domain::Role::Viewer; // crate::auth"), vec!["domain"]);
    assert!(crate_modules_named("/// see [`crate::scheduler::record`]").is_empty());
    assert!(crate_modules_named("let s = \"crate::api\";").is_empty());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("scheduler")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod scheduler; pub mod services; pub mod domain;\n").unwrap();
    std::fs::write(src.join("scheduler/mod.rs"), "use crate::services::scale;\n").unwrap();
    std::fs::write(src.join("services.rs"), "use crate::domain::Error;\nuse crate::scheduler::Scheduler;\n").unwrap();
    std::fs::write(src.join("domain.rs"), "// crate::scheduler\n").unwrap();
    let cycles = import_cycles(&module_graph(src));
    assert_eq!(cycles, vec!["scheduler → services → scheduler", "services → scheduler → services"]);
}
