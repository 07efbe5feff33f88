//! `policies …`: list, upload, dry-run, shadow, activate and roll back policies over
//! `/api/v1/policies`. A policy is named by its id or, when that is unambiguous, its name.

use std::path::Path;

use reqwest::Method;
use serde_json::{Value, json};

use crate::args::{Output, PolicyCommand, VersionArgs};
use crate::client::{Client, SLOW_REQUEST_TIMEOUT};
use crate::error::Failure;
use crate::output;

pub async fn run(client: &Client, command: &PolicyCommand, out: Output) -> Result<(), Failure> {
    match command {
        PolicyCommand::List => {
            let list = client.get("/policies").await?;
            if out == Output::Json {
                output::json(&list);
            } else {
                print_list(&list);
            }
            Ok(())
        }
        PolicyCommand::Get { policy } => {
            let id = resolve(client, policy).await?;
            let p = client.get(&format!("/policies/{id}")).await?;
            show(&p, out);
            Ok(())
        }
        PolicyCommand::Push { file, name } => {
            let name = match name {
                Some(name) => name.clone(),
                None => name_from_file(file)?,
            };
            let module = read_module(file)?;
            let req = client
                .request(Method::POST, "/policies")
                .query(&[("name", &name)])
                .header("content-type", "application/wasm")
                .timeout(SLOW_REQUEST_TIMEOUT)
                .body(module);
            let p = client.json(req).await?;
            if out == Output::Json {
                output::json(&p);
            } else {
                let latest =
                    p["versions"].as_array().and_then(|v| v.iter().filter_map(|v| v["version"].as_i64()).max());
                output::line(&format!(
                    "policy {} ({}): version {} stored",
                    output::cell(&p["name"]),
                    output::cell(&p["id"]),
                    latest.map_or_else(|| "-".into(), |v| v.to_string())
                ));
            }
            Ok(())
        }
        PolicyCommand::DryRun { policy, file, version } => {
            let result = match (policy, file) {
                (_, Some(file)) => {
                    let mut query = Vec::new();
                    if let Some(params) = params(version)? {
                        query.push(("params", params.to_string()));
                    }
                    let req = client
                        .request(Method::POST, "/policies/dry-run")
                        .query(&query)
                        .header("content-type", "application/wasm")
                        .timeout(SLOW_REQUEST_TIMEOUT)
                        .body(read_module(file)?);
                    client.json(req).await?
                }
                (Some(policy), None) => {
                    let id = resolve(client, policy).await?;
                    let req = client
                        .request(Method::POST, &format!("/policies/{id}/dry-run"))
                        .timeout(SLOW_REQUEST_TIMEOUT)
                        .json(&version_body(version)?);
                    client.json(req).await?
                }
                (None, None) => return Err(Failure::Usage("name a policy, or a module with --file".into())),
            };
            if out == Output::Json {
                output::json(&result);
            } else {
                print_dry_run(&result);
            }
            Ok(())
        }
        PolicyCommand::Activate { policy, version } => {
            let id = resolve(client, policy).await?;
            let p = client.post(&format!("/policies/{id}/activate"), &version_body(version)?).await?;
            changed(&p, out, "active");
            Ok(())
        }
        PolicyCommand::Deactivate { policy } => {
            let id = resolve(client, policy).await?;
            let p = client.post(&format!("/policies/{id}/deactivate"), &json!({})).await?;
            changed(&p, out, "deactivated");
            Ok(())
        }
        PolicyCommand::Rollback { policy } => {
            let id = resolve(client, policy).await?;
            let p = client.json(client.request(Method::POST, &format!("/policies/{id}/rollback"))).await?;
            changed(&p, out, "rolled back");
            Ok(())
        }
        PolicyCommand::Shadow { policy, version, stop, results } => {
            let id = resolve(client, policy).await?;
            if *results {
                let list = client.get(&format!("/policies/{id}/shadow-results")).await?;
                if out == Output::Json {
                    output::json(&list);
                } else {
                    print_shadow_results(&list);
                }
            } else if *stop {
                client.delete(&format!("/policies/{id}/shadow")).await?;
                if out == Output::Json {
                    output::json(&json!({"id": id, "shadow": false}));
                } else {
                    output::line(&format!("policy {policy}: shadow stopped"));
                }
            } else {
                let p = client.put(&format!("/policies/{id}/shadow"), &version_body(version)?).await?;
                changed(&p, out, "in shadow");
            }
            Ok(())
        }
    }
}

/// A policy's id from its id or its name among the policies the caller sees.
async fn resolve(client: &Client, policy: &str) -> Result<uuid::Uuid, Failure> {
    if let Ok(id) = uuid::Uuid::parse_str(policy.trim()) {
        return Ok(id);
    }
    let list = client.get("/policies").await?;
    let named: Vec<&Value> = list.as_array().into_iter().flatten().filter(|p| p["name"] == policy).collect();
    match named.as_slice() {
        [] => Err(Failure::NotFound(format!("no policy named {policy:?}"))),
        [one] => one["id"]
            .as_str()
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .ok_or_else(|| Failure::Unreachable("the control plane listed a policy without an id".into())),
        several => {
            let owners: Vec<String> = several
                .iter()
                .map(|p| format!("{} ({})", output::cell(&p["id"]), p["tenant"].as_str().unwrap_or("platform")))
                .collect();
            Err(Failure::Usage(format!("several policies are named {policy:?}: use an id: {}", owners.join(", "))))
        }
    }
}

/// A policy's name from its file: `target/…/my_policy.wasm` → `my-policy`.
fn name_from_file(file: &Path) -> Result<String, Failure> {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let name: String = stem.to_ascii_lowercase().replace('_', "-");
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(name)
    } else {
        Err(Failure::Usage(format!("name the policy with --name: {} does not make a policy name", file.display())))
    }
}

fn read_module(file: &Path) -> Result<Vec<u8>, Failure> {
    let bytes = std::fs::read(file).map_err(|err| Failure::Usage(format!("cannot read {}: {err}", file.display())))?;
    if !bytes.starts_with(b"\0asm") {
        return Err(Failure::Usage(format!("{} is not a WebAssembly module (.wasm)", file.display())));
    }
    Ok(bytes)
}

/// `--params`: a JSON object, or `@FILE` holding one.
fn params(version: &VersionArgs) -> Result<Option<Value>, Failure> {
    let Some(text) = &version.params else { return Ok(None) };
    let text = match text.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|err| Failure::Usage(format!("cannot read {path}: {err}")))?
        }
        None => text.clone(),
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|err| Failure::Usage(format!("--params is not JSON: {err}")))?;
    if !value.is_object() {
        return Err(Failure::Usage("--params must be a JSON object".into()));
    }
    Ok(Some(value))
}

fn version_body(version: &VersionArgs) -> Result<Value, Failure> {
    let mut body = json!({});
    if let Some(v) = version.version {
        body["version"] = v.into();
    }
    if let Some(p) = params(version)? {
        body["params"] = p;
    }
    Ok(body)
}

fn changed(p: &Value, out: Output, what: &str) {
    if out == Output::Json {
        output::json(p);
        return;
    }
    output::line(&format!(
        "policy {}: {what} (active version {}, shadow {})",
        output::cell(&p["name"]),
        output::cell(&p["active_version"]),
        output::cell(&p["shadow_version"])
    ));
}

fn print_list(list: &Value) {
    let mut t = output::table(&["ID", "NAME", "SCOPE", "ACTIVE", "SHADOW", "VERSIONS", "STATUS"]);
    for p in list.as_array().into_iter().flatten() {
        let versions = p["versions"].as_array().map_or(0, Vec::len);
        let status = match (p["suspended_reason"].as_str(), p["builtin"].as_bool()) {
            (Some(reason), _) => format!("suspended: {}", output::one_line(reason, 80)),
            (None, Some(true)) => "built in".into(),
            (None, _) => "-".into(),
        };
        t.add_row(vec![
            output::cell(&p["id"]),
            output::cell(&p["name"]),
            p["tenant"].as_str().map_or_else(|| "platform".into(), |t| format!("tenant {t}")),
            output::cell(&p["active_version"]),
            output::cell(&p["shadow_version"]),
            versions.to_string(),
            status,
        ]);
    }
    output::print(&t);
}

fn show(p: &Value, out: Output) {
    if out == Output::Json {
        output::json(p);
        return;
    }
    print_list(&json!([p]));
    let mut t = output::table(&["VERSION", "SHA256", "BYTES", "UPLOADED", "ACTIVE", "SHADOW"]);
    for v in p["versions"].as_array().into_iter().flatten() {
        t.add_row(vec![
            output::cell(&v["version"]),
            output::cell(&v["sha256"]).chars().take(12).collect(),
            output::cell(&v["size_bytes"]),
            output::cell(&v["uploaded_at"]),
            if v["active"] == true { "yes" } else { "-" }.into(),
            if v["shadow"] == true { "yes" } else { "-" }.into(),
        ]);
    }
    output::line("");
    output::print(&t);
}

fn print_dry_run(result: &Value) {
    output::line(&format!(
        "{} decided in {:.1} ms (nothing applied)",
        output::cell(&result["policy"]),
        result["elapsed_ms"].as_f64().unwrap_or(0.0)
    ));
    if let Some(error) = result["error"].as_str() {
        output::line(&format!("error: {}", output::one_line(error, 500)));
    }
    let mut t = output::table(&["KIND", "WORKLOAD", "NODE", "GPUS", "REASON"]);
    for d in result["decisions"].as_array().into_iter().flatten() {
        t.add_row(vec![
            output::cell(&d["kind"]),
            output::cell(&d["workload_name"]),
            output::cell(&d["node"]),
            output::cell(&d["gpu_indices"]),
            output::one_line(d["reason"].as_str().unwrap_or("-"), 120),
        ]);
    }
    output::print(&t);
    if let Some(refused) = result["refused"].as_array().filter(|r| !r.is_empty()) {
        output::line("\nRefused by the host's checks:");
        for r in refused {
            output::line(&format!(
                "  {}: {}",
                output::cell(&r["workload_id"]),
                output::one_line(&output::cell(&r["reason"]), 200)
            ));
        }
    }
    if let Some(logs) = result["logs"].as_array().filter(|l| !l.is_empty()) {
        output::line("\nPolicy log:");
        for l in logs {
            let text = l["message"].as_str().map_or_else(|| l.to_string(), str::to_owned);
            output::line(&format!("  {}", output::one_line(&text, 500)));
        }
    }
}

fn print_shadow_results(list: &Value) {
    let mut t = output::table(&["AT", "VERSION", "AGAINST", "AGREED", "DIFFERED", "ERROR"]);
    for r in list.as_array().into_iter().flatten() {
        t.add_row(vec![
            output::cell(&r["at"]),
            output::cell(&r["version"]),
            output::cell(&r["active_policy_name"]),
            output::cell(&r["agreed"]),
            output::cell(&r["differed"]),
            r["error"].as_str().map_or_else(|| "-".into(), |e| output::one_line(e, 120)),
        ]);
    }
    output::print(&t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_file_names_its_policy() {
        assert_eq!(name_from_file(Path::new("target/wasm32/release/my_policy.wasm")).unwrap(), "my-policy");
        assert_eq!(name_from_file(Path::new("Fair-Share.wasm")).unwrap(), "fair-share");
        assert_eq!(name_from_file(Path::new("bad name!.wasm")).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn params_are_a_json_object() {
        let with = |p: &str| VersionArgs { version: Some(2), params: Some(p.into()) };
        assert_eq!(version_body(&with(r#"{"reserve": 2}"#)).unwrap(), json!({"version": 2, "params": {"reserve": 2}}));
        assert!(version_body(&with("[1]")).unwrap_err().to_string().contains("JSON object"));
        assert!(version_body(&with("{oops")).unwrap_err().to_string().contains("not JSON"));
        assert_eq!(version_body(&VersionArgs { version: None, params: None }).unwrap(), json!({}));
    }
}
