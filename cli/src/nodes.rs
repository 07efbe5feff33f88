//! `airtime nodes`: the fleet, one node, and an operator's holds on a node — cordon, drain (with
//! `--wait`, until nothing is left on it) and uncordon; and clearing a GPU's quarantine.

use std::time::Duration;

use serde_json::{Value, json};

use crate::args::{NodeCommand, Output};
use crate::client::{self, Client};
use crate::error::Failure;
use crate::output;

pub async fn run(client: &Client, command: Option<&NodeCommand>, out: Output) -> Result<(), Failure> {
    match command {
        None | Some(NodeCommand::List) => list(client, out).await,
        Some(NodeCommand::Get { node }) => {
            let id = resolve(client, node).await?;
            show(&client.get(&format!("/nodes/{id}")).await?, out);
            Ok(())
        }
        Some(NodeCommand::Cordon { node, reason }) => {
            let id = resolve(client, node).await?;
            show(&client.post(&format!("/nodes/{id}/cordon"), &json!({"reason": reason})).await?, out);
            Ok(())
        }
        Some(NodeCommand::Uncordon { node }) => {
            let id = resolve(client, node).await?;
            show(&client.post(&format!("/nodes/{id}/uncordon"), &json!({})).await?, out);
            Ok(())
        }
        Some(NodeCommand::ClearFault { node, gpu, reason }) => {
            let id = resolve(client, node).await?;
            let gpus = client.get("/gpus").await?;
            let found = gpus.as_array().into_iter().flatten().find(|g| {
                g["node_id"] == id.to_string().as_str() && g["device_index"].as_u64() == Some(u64::from(*gpu))
            });
            let Some(gpu_id) = found.and_then(|g| g["id"].as_str()) else {
                return Err(Failure::NotFound(format!("node {node:?} has no GPU {gpu}")));
            };
            let answer = client.post(&format!("/gpus/{gpu_id}/clear-fault"), &json!({"reason": reason})).await?;
            if out == Output::Json {
                output::json(&answer);
            } else {
                output::line(&format!("GPU {gpu} of node {} takes work again", output::cell(&answer["node_name"])));
            }
            Ok(())
        }
        Some(NodeCommand::Drain { node, reason, deadline, wait, timeout }) => {
            let id = resolve(client, node).await?;
            let body = json!({"reason": reason, "deadline_s": deadline});
            let mut answer = client.post(&format!("/nodes/{id}/drain"), &body).await?;
            if !*wait {
                show(&answer, out);
                return Ok(());
            }
            let until = tokio::time::Instant::now() + Duration::from_secs(u64::from(*timeout));
            let mut said = String::new();
            while answer["maintenance"]["drained"] != true {
                if answer["state"] != "draining" {
                    return Err(Failure::Local(format!(
                        "node {} is {} now: the drain was lifted or replaced",
                        output::cell(&answer["name"]),
                        output::cell(&answer["state"])
                    )));
                }
                let left = progress(&answer);
                if out == Output::Table && left != said {
                    output::line(&left);
                    said = left;
                }
                if tokio::time::Instant::now() >= until {
                    return Err(Failure::Local(format!(
                        "the drain of node {} did not finish in time: {said}",
                        output::cell(&answer["name"])
                    )));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                answer = client.get(&format!("/nodes/{id}")).await?;
            }
            show(&answer, out);
            Ok(())
        }
    }
}

/// A node's id: the argument itself when it is one, else the node of that name.
async fn resolve(client: &Client, node: &str) -> Result<uuid::Uuid, Failure> {
    if let Ok(id) = client::id("node", node) {
        return Ok(id);
    }
    let nodes = client.get("/nodes").await?;
    let found = nodes.as_array().into_iter().flatten().find(|n| n["name"] == node.trim());
    match found.and_then(|n| n["id"].as_str()).and_then(|id| uuid::Uuid::parse_str(id).ok()) {
        Some(id) => Ok(id),
        None => Err(Failure::NotFound(format!("no node named {node:?}"))),
    }
}

/// "node gpu-1: 2 workloads left (1 to finish, 1 stopping)".
fn progress(node: &Value) -> String {
    let work = node["work"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut by: Vec<(String, usize)> = Vec::new();
    for w in work {
        let action = match w["drain"].as_str() {
            Some("requeue") => "to requeue",
            Some("replace") => "to replace",
            Some("finish") => "to finish",
            _ => "stopping",
        };
        match by.iter_mut().find(|(a, _)| a == action) {
            Some(entry) => entry.1 += 1,
            None => by.push((action.to_owned(), 1)),
        }
    }
    let parts: Vec<String> = by.iter().map(|(a, n)| format!("{n} {a}")).collect();
    let plural = if work.len() == 1 { "" } else { "s" };
    format!("node {}: {} workload{plural} left ({})", output::cell(&node["name"]), work.len(), parts.join(", "))
}

/// One node as the API answered it: its fields, its hold, and what runs on it.
fn show(node: &Value, out: Output) {
    if out == Output::Json {
        output::json(node);
        return;
    }
    let m = &node["maintenance"];
    let mut rows = vec![
        ("id", output::cell(&node["id"])),
        ("name", output::cell(&node["name"])),
        ("state", output::cell(&node["state"])),
        (
            "agent",
            format!("{} (protocol {})", output::cell(&node["agent_version"]), output::cell(&node["agent_protocol"])),
        ),
    ];
    if !m.is_null() {
        rows.push(("reason", output::one_line(&output::cell(&m["reason"]), 120)));
        rows.push(("since", output::cell(&m["since"])));
        rows.push(("by", output::cell(&m["by"])));
        rows.push(("deadline", output::cell(&m["deadline"])));
        rows.push(("remaining", output::cell(&m["remaining"])));
        rows.push(("drained", output::cell(&m["drained"])));
    }
    output::print(&output::fields(rows));
    let work = node["work"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !work.is_empty() {
        let mut t = output::table(&["WORKLOAD", "NAME", "CLASS", "STATE", "DRAIN"]);
        for w in work {
            t.add_row(vec![
                output::cell(&w["workload_id"]),
                output::one_line(&output::cell(&w["name"]), 40),
                output::cell(&w["class"]),
                output::cell(&w["state"]),
                output::cell(&w["drain"]),
            ]);
        }
        output::line("");
        output::print(&t);
    }
}

/// Every node, one line each.
async fn list(client: &Client, out: Output) -> Result<(), Failure> {
    let list = client.get("/nodes").await?;
    if out == Output::Json {
        output::json(&list);
        return Ok(());
    }
    let mut t = output::table(&[
        "ID", "NAME", "STATE", "GPUS", "HELD", "CPU", "MEMORY", "CPU UTIL", "AGENT", "PROTOCOL", "SEEN",
    ]);
    for n in list.as_array().into_iter().flatten() {
        let gpus = n["gpus"].as_array().map(Vec::as_slice).unwrap_or_default();
        let mut models: Vec<(String, usize)> = Vec::new();
        for g in gpus {
            let model = output::cell(&g["model"]);
            match models.iter_mut().find(|(m, _)| *m == model) {
                Some(entry) => entry.1 += 1,
                None => models.push((model, 1)),
            }
        }
        let mut gpu_text = models.iter().map(|(m, c)| format!("{c}× {m}")).collect::<Vec<_>>().join(", ");
        if gpu_text.is_empty() {
            gpu_text = "-".into();
        } else if n["simulated"] == true {
            gpu_text.push_str(" (simulated)");
        }
        let held = gpus.iter().filter(|g| g["held"] == true).count();
        let util = n["telemetry"]["cpu_util"].as_f64().map_or_else(|| "-".into(), |u| format!("{:.0}%", u * 100.0));
        t.add_row(vec![
            output::cell(&n["id"]),
            output::cell(&n["name"]),
            output::cell(&n["state"]),
            gpu_text,
            if gpus.is_empty() { "-".into() } else { format!("{held}/{}", gpus.len()) },
            output::cpu(&n["cpu_millis"]),
            output::mib(&n["memory_mb"]),
            util,
            output::cell(&n["agent_version"]),
            output::cell(&n["agent_protocol"]),
            output::age(&n["last_seen_at"]),
        ]);
    }
    output::print(&t);
    Ok(())
}
