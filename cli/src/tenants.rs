//! `airtime tenants`: the teams and their quotas — who holds what against its guarantee, creating a
//! tenant and changing its quota and limit (platform admins), with `--preview` to see first what
//! the next scheduling cycle would do differently; budgets; archiving a tenant.

use serde_json::{Map, Value, json};

use crate::args::{Output, QuotaArgs, TenantCommand};
use crate::client::Client;
use crate::error::Failure;
use crate::output;

pub async fn run(client: &Client, command: Option<&TenantCommand>, out: Output) -> Result<(), Failure> {
    match command {
        None | Some(TenantCommand::List) => list(client, out).await,
        Some(TenantCommand::Create { name, quota }) => {
            let mut body = quota_body(quota);
            body.insert("name".into(), json!(name));
            show(&client.post("/tenants", &Value::Object(body)).await?, out);
            Ok(())
        }
        Some(TenantCommand::Set { tenant, quota, preview }) => {
            let body = Value::Object(quota_body(quota));
            if body.as_object().is_some_and(Map::is_empty) {
                return Err(Failure::Usage(
                    "give at least one of --guaranteed-gpus, --weight, --tier, --may-borrow, --gpu-limit and --idle-reclaim-after-s".into(),
                ));
            }
            let id = resolve(client, tenant).await?;
            if *preview {
                let answer = client.post(&format!("/tenants/{id}/preview"), &body).await?;
                show_preview(&answer, out);
            } else {
                let answer = client.patch(&format!("/tenants/{id}"), &body).await?;
                show(&answer, out);
            }
            Ok(())
        }
        Some(TenantCommand::Archive { tenant }) => {
            let id = resolve(client, tenant).await?;
            let answer = client.post(&format!("/tenants/{id}/archive"), &json!({})).await?;
            if out == Output::Json {
                output::json(&answer);
            } else {
                output::line(&format!(
                    "tenant {} archived: {} pending workloads cancelled, {} stopping, {} services draining",
                    output::cell(&answer["tenant"]["name"]),
                    output::cell(&answer["cancelled_pending"]),
                    output::cell(&answer["stopping"]),
                    output::cell(&answer["draining_services"]),
                ));
            }
            Ok(())
        }
        Some(TenantCommand::Budgets { tenant }) => {
            let path = match tenant {
                Some(t) => format!("/tenants/budgets?tenant={}", resolve(client, t).await?),
                None => "/tenants/budgets".to_owned(),
            };
            show_budgets(&client.get(&path).await?, out);
            Ok(())
        }
        Some(TenantCommand::Budget { tenant, period, gpu_hours, action, remove }) => {
            let id = resolve(client, tenant).await?;
            let path = format!("/tenants/{id}/budgets/{}", period.trim());
            if *remove {
                client.delete(&path).await?;
                output::line(&format!("the {} budget of {tenant} is removed", period.trim()));
                return Ok(());
            }
            let body = json!({"gpu_hours": gpu_hours, "action": action.trim().replace('-', "_")});
            let answer = client.put(&path, &body).await?;
            show_budgets(&Value::Array(vec![answer]), out);
            Ok(())
        }
    }
}

/// Budgets with this period's use.
fn show_budgets(budgets: &Value, out: Output) {
    if out == Output::Json {
        output::json(budgets);
        return;
    }
    let mut t = output::table(&["TENANT", "PERIOD", "GPU-HOURS", "USED", "REMAINING", "ACTION", "EXHAUSTED", "UNTIL"]);
    for b in budgets.as_array().into_iter().flatten() {
        let hours = |v: &Value| format!("{:.2}", v.as_f64().unwrap_or(0.0));
        t.add_row(vec![
            output::cell(&b["tenant"]),
            output::cell(&b["period"]),
            hours(&b["gpu_hours"]),
            hours(&b["used_gpu_hours"]),
            hours(&b["remaining_gpu_hours"]),
            output::cell(&b["action"]),
            if b["exhausted"] == true { "yes".into() } else { "no".into() },
            output::cell(&b["period_end"]),
        ]);
    }
    output::print(&t);
}

/// The quota flags given, as the API's fields.
fn quota_body(q: &QuotaArgs) -> Map<String, Value> {
    let mut body = Map::new();
    if let Some(g) = q.guaranteed_gpus {
        body.insert("guaranteed_gpus".into(), json!(g));
    }
    if let Some(w) = q.weight {
        body.insert("weight".into(), json!(w));
    }
    if let Some(t) = q.tier {
        body.insert("tier".into(), json!(t));
    }
    if let Some(b) = q.may_borrow {
        body.insert("may_borrow".into(), json!(b));
    }
    if let Some(l) = q.gpu_limit {
        body.insert("gpu_limit".into(), json!(l));
    }
    if let Some(s) = q.idle_reclaim_after_s {
        body.insert("idle_reclaim_after_s".into(), json!(s));
    }
    body
}

/// A tenant's id: the argument itself when it is one, else the tenant of that name.
async fn resolve(client: &Client, tenant: &str) -> Result<uuid::Uuid, Failure> {
    if let Ok(id) = crate::client::id("tenant", tenant) {
        return Ok(id);
    }
    let tenants = client.get("/tenants").await?;
    let found = tenants.as_array().into_iter().flatten().find(|t| t["name"] == tenant.trim());
    match found.and_then(|t| t["id"].as_str()).and_then(|id| uuid::Uuid::parse_str(id).ok()) {
        Some(id) => Ok(id),
        None => Err(Failure::NotFound(format!("no tenant named {tenant:?}"))),
    }
}

/// Every tenant visible to the caller with its quota and where it stands now.
async fn list(client: &Client, out: Output) -> Result<(), Failure> {
    let summary = client.get("/tenants/summary").await?;
    if out == Output::Json {
        output::json(&summary);
        return Ok(());
    }
    let tenants = client.get("/tenants").await?;
    let quota_of = |id: &Value| tenants.as_array().into_iter().flatten().find(|t| t["id"] == *id).cloned();
    let mut t = output::table(&["NAME", "GUARANTEED", "WEIGHT", "TIER", "BORROW", "RUNNING", "PENDING", "STANDING"]);
    for s in summary.as_array().into_iter().flatten() {
        let quota = quota_of(&s["tenant_id"]).unwrap_or(Value::Null);
        t.add_row(vec![
            output::cell(&s["tenant"]),
            output::cell(&s["guaranteed_gpus"]),
            output::cell(&quota["weight"]),
            output::cell(&quota["tier"]),
            if s["may_borrow"] == true { "yes".into() } else { "no".into() },
            format!("{:.2}", s["running_gpus"].as_f64().unwrap_or(0.0)),
            output::cell(&s["pending_workloads"]),
            output::cell(&s["standing"]),
        ]);
    }
    output::print(&t);
    Ok(())
}

fn show(tenant: &Value, out: Output) {
    if out == Output::Json {
        output::json(tenant);
        return;
    }
    output::print(&output::fields(vec![
        ("id", output::cell(&tenant["id"])),
        ("name", output::cell(&tenant["name"])),
        ("guaranteed_gpus", output::cell(&tenant["guaranteed_gpus"])),
        ("weight", output::cell(&tenant["weight"])),
        ("tier", output::cell(&tenant["tier"])),
        ("may_borrow", output::cell(&tenant["may_borrow"])),
        ("gpu_limit", output::cell(&tenant["gpu_limit"])),
        ("archived_at", output::cell(&tenant["archived_at"])),
    ]));
}

/// What the next cycle would do differently: the counts, then each workload whose outcome changes.
fn show_preview(preview: &Value, out: Output) {
    if out == Output::Json {
        output::json(preview);
        return;
    }
    let c = &preview["comparison"];
    if let Some(error) = c["error"].as_str() {
        output::line(&format!("the policy could not be compared: {error}"));
        return;
    }
    output::line(&format!(
        "tenant {}: the next cycle under {} would place {} (now {}) and preempt {} (now {}); nothing is changed yet",
        output::cell(&preview["tenant"]),
        output::cell(&c["policy"]),
        output::cell(&c["placed_with_candidate"]),
        output::cell(&c["placed_now"]),
        output::cell(&c["preempted_with_candidate"]),
        output::cell(&c["preempted_now"]),
    ));
    let changes = c["changes"].as_array().map(Vec::as_slice).unwrap_or_default();
    if changes.is_empty() {
        return;
    }
    let mut t = output::table(&["WORKLOAD", "TENANT", "NOW", "WITH THE CHANGE", "WHY"]);
    let outcome = |o: &Value| match o["node"].as_str() {
        Some(node) => format!("{} on {node}", output::cell(&o["action"])),
        None => output::cell(&o["action"]),
    };
    for ch in changes {
        t.add_row(vec![
            output::cell(&ch["name"]),
            output::cell(&ch["tenant"]),
            outcome(&ch["current"]),
            outcome(&ch["candidate"]),
            output::cell(&ch["candidate"]["reason"]),
        ]);
    }
    output::print(&t);
}
