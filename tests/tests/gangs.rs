//! Training bigger than one server: a gang of members, one per node, placed all together or not
//! at all, started together with the rendezvous the frameworks expect, and requeued together.
//! Three agents, each in a network namespace of its own with its own address (servers of one
//! cluster), a real control plane and PostgreSQL, and a real rendezvous program: a small allreduce
//! over TCP that every member must join, which succeeds only if every member got consistent
//! `MASTER_ADDR`, `MASTER_PORT`, `RANK` and `WORLD_SIZE`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{ControlPlane, Netns, NodeAgent, TestDb, eventually, nodes_ready};
use serde_json::{Value, json};

/// The allreduce: rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects and sends
/// its value with what it was told; rank 0 checks that everyone was told the same, sums and
/// answers the sum. Each rank prints what it got and exits 0 only if the sum is right and its
/// hostfile lists every member.
const ALLREDUCE: &str = r#"
import json, os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
told = [world, addr, port, os.environ["NODE_RANK"] == str(rank)]
hosts = open(os.environ["AIRTIME_HOSTFILE"]).read().splitlines()
assert len(hosts) == world and hosts[0].startswith(addr + " "), hosts
value = rank + 1
if rank == 0:
    server = socket.create_server(("0.0.0.0", port))
    server.settimeout(60)
    peers, total = [], value
    while len(peers) < world - 1:
        conn, _ = server.accept()
        r, v, t = json.loads(conn.makefile().readline())
        assert t == told, (r, t, told)
        total += v
        peers.append(conn)
    for conn in peers:
        conn.sendall(f"{total}\n".encode())
else:
    for _ in range(240):
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(0.25)
    conn.sendall((json.dumps([rank, value, told]) + "\n").encode())
    total = int(conn.makefile().readline())
print(f"rank {rank} of {world} at {addr}:{port}: allreduce {total}", flush=True)
sys.exit(0 if total == world * (world + 1) // 2 else 1)
"#;

fn gang(name: &str, nodes: u32, command: Vec<&str>) -> Value {
    json!({"name": name, "class": "training", "nodes": nodes, "checkpointable": true, "preemptible": true,
           "resources": {"gpu_count": 2, "cpu_millis": 100, "memory_mb": 64}, "command": command})
}

/// The members of the gang whose rank-0 member is `id`, by rank.
async fn members(api: &airtime_tests::Api, id: &str) -> Vec<Value> {
    let detail = api.ok(&format!("/api/v1/workloads/{id}")).await.unwrap();
    detail["gang"].as_array().cloned().unwrap_or_default()
}

async fn gang_reaches(api: &airtime_tests::Api, id: &str, state: &str, attempt: i64, timeout: Duration) -> Vec<Value> {
    eventually(&format!("every member of gang {id} {state} (attempt {attempt})"), timeout, || {
        let (api, id) = (api.clone(), id.to_owned());
        let state = state.to_owned();
        async move {
            let m = members(&api, &id).await;
            Ok((!m.is_empty() && m.iter().all(|m| m["state"] == state.as_str() && m["attempt"] == attempt))
                .then_some(m))
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_gang_meets_at_its_rendezvous_waits_whole_and_is_requeued_whole_when_a_node_dies() {
    let db = TestDb::create().await.unwrap();
    let cp = ControlPlane::start(
        &db,
        &[
            "--listen",
            "0.0.0.0:0",
            "--heartbeat-interval-ms",
            "300",
            "--node-lost-after-ms",
            "1500",
            "--node-fence-after-ms",
            "3000",
        ],
    )
    .await
    .unwrap();
    let api = cp.api();
    let mut settings = api.ok("/api/v1/settings/priorities").await.unwrap();
    settings["grace_period_s"] = json!(1);
    assert_eq!(api.put("/api/v1/settings/priorities", &settings).await.unwrap().status, 200);
    let spaces = Netns::joined(3).await.unwrap();
    let mut agents: Vec<NodeAgent> = Vec::new();
    for (i, ns) in spaces.iter().enumerate() {
        let name = format!("trainer-{i}");
        let extra = ["--no-nvml", "--simulate-gpus", "2:H100:81920", "--advertise-address"];
        let mut args: Vec<&str> = extra.to_vec();
        args.push(ns.address.as_str());
        agents.push(NodeAgent::start_in(&cp, ns, &name, &args).await.unwrap());
    }
    nodes_ready(&api, 3).await.unwrap();

    // A gang of three members of two GPUs each meets at its rendezvous: every member gets the same
    // MASTER_ADDR (the rank-0 member's node address) and port and its own rank.
    let job = api.created("/api/v1/workloads", &gang("allreduce", 3, vec!["python3", "-c", ALLREDUCE])).await.unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!((job["gang_size"].as_i64(), job["gang_rank"].as_i64()), (Some(3), Some(0)), "{job}");
    let done = gang_reaches(&api, &id, "succeeded", 1, Duration::from_secs(90)).await;
    let nodes: std::collections::BTreeSet<&str> = done.iter().filter_map(|m| m["node"].as_str()).collect();
    assert_eq!(nodes.len(), 3, "one member per node: {done:?}");
    let master = spaces.iter().map(|ns| ns.address.clone()).collect::<Vec<_>>();
    for (rank, member) in done.iter().enumerate() {
        let path = format!("/api/v1/workloads/{}/logs", member["id"].as_str().unwrap());
        let text = eventually("the member's output", Duration::from_secs(20), || {
            let (api, path) = (api.clone(), path.clone());
            async move {
                let logs = api.ok(&path).await?;
                Ok((!logs["lines"].as_array().is_none_or(Vec::is_empty)).then(|| logs.to_string()))
            }
        })
        .await
        .unwrap();
        assert!(text.contains(&format!("rank {rank} of 3 at ")) && text.contains("allreduce 6"), "rank {rank}: {text}");
        assert!(master.iter().any(|a| text.contains(&format!("at {a}:"))), "{text}");
    }

    // A gang bigger than the fleet holds no GPU while it waits, and says what it needs.
    let big = api.created("/api/v1/workloads", &gang("too-big", 4, vec!["sleep", "60"])).await.unwrap();
    let big_id = big["id"].as_str().unwrap().to_owned();
    let reason = eventually("the big gang's reason", Duration::from_secs(20), || {
        let (api, path) = (api.clone(), format!("/api/v1/workloads/{big_id}"));
        async move {
            let w = api.ok(&path).await?;
            Ok(w["pending_reason"].as_str().filter(|r| r.contains("needs 4 nodes")).map(str::to_owned))
        }
    })
    .await
    .unwrap();
    assert!(reason.contains("3 ready nodes have that now"), "{reason}");
    let gpus = api.ok("/api/v1/gpus").await.unwrap();
    let held: Vec<&Value> = gpus.as_array().unwrap().iter().filter(|g| g["held"] == true).collect();
    assert!(held.is_empty(), "a waiting gang holds GPUs: {held:?}");
    assert_eq!(api.post(&format!("/api/v1/workloads/{big_id}/cancel"), &json!({})).await.unwrap().status, 202);
    let cancelled = gang_reaches(&api, &big_id, "cancelled", 0, Duration::from_secs(10)).await;
    assert_eq!(cancelled.len(), 4, "cancelling one member cancels the gang");

    // A long gang runs; one member's node dies: the whole gang is requeued once, no member left
    // running, and it waits (two nodes are not enough) until the node is back.
    let long = api.created("/api/v1/workloads", &gang("long", 3, vec!["sleep", "600"])).await.unwrap();
    let long_id = long["id"].as_str().unwrap().to_owned();
    let running = gang_reaches(&api, &long_id, "running", 1, Duration::from_secs(60)).await;
    let victim_node = running[1]["node"].as_str().unwrap().to_owned();
    let victim = agents.iter().position(|a| a.name == victim_node).unwrap();
    agents[victim].crash().await;
    let requeued = gang_reaches(&api, &long_id, "pending", 1, Duration::from_secs(60)).await;
    assert!(requeued.iter().all(|m| m["node_id"].is_null()), "{requeued:?}");
    for member in &requeued {
        let detail = api.ok(&format!("/api/v1/workloads/{}", member["id"].as_str().unwrap())).await.unwrap();
        let runs = detail["history"].as_array().unwrap().iter().filter(|e| e["to_state"] == "running").count();
        assert_eq!(runs, 1, "each member ran once: {}", detail["history"]);
    }
    agents[victim].restart().await.unwrap();
    gang_reaches(&api, &long_id, "running", 2, Duration::from_secs(60)).await;
    assert_eq!(api.post(&format!("/api/v1/workloads/{long_id}/cancel"), &json!({})).await.unwrap().status, 202);
    gang_reaches(&api, &long_id, "cancelled", 2, Duration::from_secs(30)).await;
    drop(agents);
    cp.stop().await;
}
