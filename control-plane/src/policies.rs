//! Policies as the control plane keeps them: versions in PostgreSQL, compiled modules cached by
//! version, the active version per scope, and evaluation off the async workers. The sandbox itself
//! (wasmtime and its limits) lives in `airtime-policy-host`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use airtime_policy_host::{
    CompiledPolicy, Evaluation, PolicyError, PolicyLimits, PolicyRuntime, RuntimeConfig,
};
use airtime_policy_sdk::abi;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::Digest as _;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::model::PLATFORM_SCOPE;

/// The built-in policy every scope falls back to when its own policy fails.
pub const FALLBACK_POLICY: &str = "priority-best-fit";

/// A policy version ready to evaluate.
pub struct LoadedPolicy {
    pub version_id: Uuid,
    pub name: String,
    pub version: i32,
    pub compiled: CompiledPolicy,
    pub params: String,
}

pub struct PolicyCatalog {
    runtime: PolicyRuntime,
    /// Compiled modules by version id; a version's bytes never change.
    compiled: Mutex<HashMap<Uuid, Arc<LoadedPolicy>>>,
    /// Evaluations run on blocking threads; this bounds how many at once.
    evaluations: Arc<Semaphore>,
    limits: PolicyLimits,
}

impl PolicyCatalog {
    pub fn new() -> anyhow::Result<Self> {
        let parallel = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        Ok(Self {
            runtime: PolicyRuntime::new(RuntimeConfig::default())?,
            compiled: Mutex::new(HashMap::new()),
            evaluations: Arc::new(Semaphore::new(parallel)),
            limits: PolicyLimits::default(),
        })
    }

    /// Stores each built-in policy as a platform policy (a new version when its bytes changed) and
    /// activates the fallback for the platform scope when nothing is active yet.
    pub async fn install_builtins(&self, db: &PgPool) -> anyhow::Result<()> {
        for (name, wasm) in airtime_builtin_policies::ALL {
            let mut tx = db.begin().await?;
            let policy_id = ensure_policy(&mut tx, None, name, true).await?;
            let sha = sha256_hex(wasm);
            let latest: Option<(String,)> = sqlx::query_as(
                "SELECT sha256 FROM policy_versions WHERE policy_id = $1 ORDER BY version DESC LIMIT 1",
            )
            .bind(policy_id)
            .fetch_optional(&mut *tx)
            .await?;
            if latest.map(|(s,)| s) != Some(sha) {
                insert_version(&mut tx, policy_id, None, wasm).await?;
                tracing::info!(policy = name, "installed built-in policy version");
            }
            tx.commit().await?;
        }
        let (fallback_version,): (Uuid,) = sqlx::query_as(
            "SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
             WHERE p.builtin AND p.name = $1 ORDER BY v.version DESC LIMIT 1",
        )
        .bind(FALLBACK_POLICY)
        .fetch_one(db)
        .await?;
        sqlx::query(
            "INSERT INTO policy_activations (scope, policy_version_id) VALUES ($1, $2) ON CONFLICT (scope) DO NOTHING",
        )
        .bind(PLATFORM_SCOPE)
        .bind(fallback_version)
        .execute(db)
        .await?;
        Ok(())
    }

    /// The version active for a scope, compiled (from the cache when it was compiled before).
    pub async fn active(
        &self,
        db: &PgPool,
        scope: &str,
    ) -> anyhow::Result<Option<Arc<LoadedPolicy>>> {
        let row: Option<(Uuid,)> =
            sqlx::query_as("SELECT policy_version_id FROM policy_activations WHERE scope = $1")
                .bind(scope)
                .fetch_optional(db)
                .await?;
        match row {
            Some((version_id,)) => Ok(Some(self.load(db, version_id).await?)),
            None => Ok(None),
        }
    }

    /// The latest version of the built-in fallback policy.
    pub async fn fallback(&self, db: &PgPool) -> anyhow::Result<Arc<LoadedPolicy>> {
        let (version_id,): (Uuid,) = sqlx::query_as(
            "SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
             WHERE p.builtin AND p.name = $1 ORDER BY v.version DESC LIMIT 1",
        )
        .bind(FALLBACK_POLICY)
        .fetch_one(db)
        .await?;
        self.load(db, version_id).await
    }

    async fn load(&self, db: &PgPool, version_id: Uuid) -> anyhow::Result<Arc<LoadedPolicy>> {
        if let Some(hit) = self.cached(version_id) {
            return Ok(hit);
        }
        let (name, version, wasm, params): (String, i32, Vec<u8>, serde_json::Value) =
            sqlx::query_as(
                "SELECT p.name, v.version, v.wasm, v.params FROM policy_versions v \
             JOIN policies p ON p.id = v.policy_id WHERE v.id = $1",
            )
            .bind(version_id)
            .fetch_one(db)
            .await?;
        let runtime = self.runtime.clone();
        let compiled = tokio::task::spawn_blocking(move || runtime.compile(&wasm)).await??;
        let loaded = Arc::new(LoadedPolicy {
            version_id,
            name,
            version,
            compiled,
            params: params.to_string(),
        });
        if let Ok(mut cache) = self.compiled.lock() {
            cache.insert(version_id, loaded.clone());
        }
        Ok(loaded)
    }

    fn cached(&self, version_id: Uuid) -> Option<Arc<LoadedPolicy>> {
        self.compiled
            .lock()
            .ok()
            .and_then(|cache| cache.get(&version_id).cloned())
    }

    /// Evaluates a policy on a snapshot on a blocking thread, bounded in concurrency.
    pub async fn evaluate(
        &self,
        policy: &Arc<LoadedPolicy>,
        snapshot: Vec<u8>,
    ) -> Result<Evaluation, EvaluateError> {
        let _permit = self
            .evaluations
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| EvaluateError::ShuttingDown)?;
        let runtime = self.runtime.clone();
        let policy = policy.clone();
        let limits = self.limits.clone();
        tokio::task::spawn_blocking(move || runtime.evaluate(&policy.compiled, &snapshot, &limits))
            .await
            .map_err(|_| EvaluateError::ShuttingDown)?
            .map_err(EvaluateError::Policy)
    }

    /// Checks an uploaded module: it compiles, speaks our ABI, imports nothing it may not, and
    /// evaluates a small fixture snapshot into well-formed decisions. Nothing is stored on failure.
    pub async fn vet(&self, wasm: Vec<u8>) -> Result<(), PolicyError> {
        let runtime = self.runtime.clone();
        let limits = self.limits.clone();
        tokio::task::spawn_blocking(move || {
            let compiled = runtime.compile(&wasm)?;
            let fixture = trial_snapshot();
            let evaluation =
                runtime.evaluate(&compiled, &abi::encode_snapshot(&fixture), &limits)?;
            abi::decode_decisions(&evaluation.output).map_err(PolicyError::MalformedOutput)?;
            Ok(())
        })
        .await
        .unwrap_or_else(|_| {
            Err(PolicyError::Trap {
                message: "the trial evaluation was aborted".into(),
            })
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    #[error(transparent)]
    Policy(PolicyError),
    #[error("the control plane is shutting down")]
    ShuttingDown,
}

impl EvaluateError {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Policy(err) => err.kind(),
            Self::ShuttingDown => "shutting_down",
        }
    }
}

/// A small, realistic fleet and queue every uploaded policy must handle before it is accepted.
fn trial_snapshot() -> abi::Snapshot<'static> {
    let gpu = |node: u32, device_index: u32, holder: Option<u32>| abi::Gpu {
        node,
        device_index,
        model: "H100-SXM",
        memory_mb: 81920,
        memory_used_mb: 0,
        util: 0.0,
        nvlink_group: Some(0),
        holder,
        simulated: true,
    };
    let workload = |id: &'static str,
                    gpu_count: u32,
                    state: abi::WorkloadState,
                    node: Option<u32>| abi::Workload {
        id,
        name: id,
        tenant: 0,
        class: abi::WorkloadClass::Training,
        state,
        priority: 0,
        gpu_count,
        gpu_memory_mb: 20000,
        gpu_models: "",
        cpu_millis: 1000,
        memory_mb: 1024,
        submitted_ms: 1_700_000_000_000,
        started_ms: 0,
        node,
        preemptible: true,
        checkpointable: true,
        cpu_capable: false,
        gang: gpu_count > 1,
        expected_duration_s: 3600,
    };
    abi::Snapshot {
        now_ms: 1_700_000_060_000,
        tenants: vec![abi::Tenant {
            name: "trial",
            guaranteed_gpus: 4,
            weight: 1,
            running_gpus: 1,
            tier: 0,
            decayed_gpu_hours: 0.0,
            may_borrow: true,
        }],
        nodes: vec![abi::Node {
            name: "trial-node",
            state: abi::NodeState::Ready,
            cpu_millis: 32000,
            cpu_millis_free: 31000,
            memory_mb: 262144,
            memory_mb_free: 261120,
            gpu_first: 0,
            gpu_count: 4,
            cost_per_hour: 12.0,
            cpu_util: 0.1,
            simulated: true,
        }],
        gpus: vec![
            gpu(0, 0, Some(2)),
            gpu(0, 1, None),
            gpu(0, 2, None),
            gpu(0, 3, None),
        ],
        workloads: vec![
            workload(
                "00000000-0000-0000-0000-00000000000a",
                2,
                abi::WorkloadState::Pending,
                None,
            ),
            workload(
                "00000000-0000-0000-0000-00000000000b",
                1,
                abi::WorkloadState::Pending,
                None,
            ),
            workload(
                "00000000-0000-0000-0000-00000000000c",
                1,
                abi::WorkloadState::Running,
                Some(0),
            ),
        ],
        settings: None,
        params: "{}",
        scope_tenant: None,
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

async fn ensure_policy(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    tenant_id: Option<Uuid>,
    name: &str,
    builtin: bool,
) -> sqlx::Result<Uuid> {
    let existing: Option<(Uuid,)> = sqlx::query_as(
        "SELECT id FROM policies WHERE tenant_id IS NOT DISTINCT FROM $1 AND name = $2 FOR UPDATE",
    )
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some((id,)) = existing {
        return Ok(id);
    }
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO policies (id, tenant_id, name, builtin) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(tenant_id)
        .bind(name)
        .bind(builtin)
        .execute(&mut **tx)
        .await?;
    Ok(id)
}

async fn insert_version(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    policy_id: Uuid,
    tenant_id: Option<Uuid>,
    wasm: &[u8],
) -> sqlx::Result<(Uuid, i32)> {
    let id = Uuid::now_v7();
    let (version,): (i32,) = sqlx::query_as(
        "INSERT INTO policy_versions (id, policy_id, tenant_id, version, sha256, wasm, size_bytes) \
         VALUES ($1, $2, $3, COALESCE((SELECT max(version) FROM policy_versions WHERE policy_id = $2), 0) + 1, \
                 $4, $5, $6) RETURNING version",
    )
    .bind(id)
    .bind(policy_id)
    .bind(tenant_id)
    .bind(sha256_hex(wasm))
    .bind(wasm)
    .bind(wasm.len() as i32)
    .fetch_one(&mut **tx)
    .await?;
    Ok((id, version))
}

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct VersionView {
    pub id: Uuid,
    pub version: i32,
    pub sha256: String,
    pub size_bytes: i32,
    pub params: serde_json::Value,
    pub uploaded_at: DateTime<Utc>,
    pub active: bool,
}

#[derive(Debug, Serialize)]
pub struct PolicyView {
    pub id: Uuid,
    pub name: String,
    /// None for a platform policy.
    pub tenant: Option<String>,
    pub builtin: bool,
    pub created_at: DateTime<Utc>,
    pub active_version: Option<i32>,
    pub versions: Vec<VersionView>,
}

#[derive(sqlx::FromRow)]
struct PolicyRow {
    id: Uuid,
    name: String,
    tenant: Option<String>,
    builtin: bool,
    created_at: DateTime<Utc>,
}

pub async fn list(db: &PgPool) -> sqlx::Result<Vec<PolicyView>> {
    let rows: Vec<PolicyRow> = sqlx::query_as(
        "SELECT p.id, p.name, t.name AS tenant, p.builtin, p.created_at FROM policies p \
         LEFT JOIN tenants t ON t.id = p.tenant_id ORDER BY p.builtin DESC, p.name",
    )
    .fetch_all(db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(view(db, row).await?);
    }
    Ok(out)
}

pub async fn get(db: &PgPool, id: Uuid) -> sqlx::Result<Option<PolicyView>> {
    let row: Option<PolicyRow> = sqlx::query_as(
        "SELECT p.id, p.name, t.name AS tenant, p.builtin, p.created_at FROM policies p \
         LEFT JOIN tenants t ON t.id = p.tenant_id WHERE p.id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    match row {
        Some(row) => Ok(Some(view(db, row).await?)),
        None => Ok(None),
    }
}

async fn view(db: &PgPool, row: PolicyRow) -> sqlx::Result<PolicyView> {
    let versions: Vec<VersionView> = sqlx::query_as(
        "SELECT v.id, v.version, v.sha256, v.size_bytes, v.params, v.uploaded_at, \
                EXISTS (SELECT 1 FROM policy_activations a WHERE a.policy_version_id = v.id) AS active \
         FROM policy_versions v WHERE v.policy_id = $1 ORDER BY v.version DESC",
    )
    .bind(row.id)
    .fetch_all(db)
    .await?;
    Ok(PolicyView {
        id: row.id,
        name: row.name,
        tenant: row.tenant,
        builtin: row.builtin,
        created_at: row.created_at,
        active_version: versions.iter().find(|v| v.active).map(|v| v.version),
        versions,
    })
}

/// Stores an uploaded module that passed `vet` as the next version of the named platform policy.
pub async fn store_upload(db: &PgPool, name: &str, wasm: &[u8]) -> ApiResult<PolicyView> {
    let valid_name = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if !valid_name {
        return Err(ApiError::bad_request(
            "invalid_name",
            "policy name must be 1 to 63 lowercase letters, digits or '-', not starting with '-'",
        ));
    }
    let mut tx = db.begin().await?;
    let existing: Option<(bool,)> =
        sqlx::query_as("SELECT builtin FROM policies WHERE tenant_id IS NULL AND name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
    if existing == Some((true,)) {
        return Err(ApiError::conflict(
            "builtin_policy",
            format!("{name} is a built-in policy; upload under another name"),
        ));
    }
    let policy_id = ensure_policy(&mut tx, None, name, false).await?;
    insert_version(&mut tx, policy_id, None, wasm).await?;
    tx.commit().await?;
    get(db, policy_id)
        .await?
        .ok_or(ApiError::NotFound("policy"))
}

/// Makes a version the one that decides for the platform scope.
pub async fn activate(db: &PgPool, policy_id: Uuid, version: Option<i32>) -> ApiResult<PolicyView> {
    let mut tx = db.begin().await?;
    let row: Option<(Uuid, Option<Uuid>)> = sqlx::query_as(
        "SELECT v.id, p.tenant_id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
         WHERE v.policy_id = $1 AND ($2::int IS NULL OR v.version = $2) ORDER BY v.version DESC LIMIT 1",
    )
    .bind(policy_id)
    .bind(version)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((version_id, tenant_id)) = row else {
        return Err(match version {
            Some(_) => ApiError::NotFound("policy version"),
            None => ApiError::NotFound("policy"),
        });
    };
    let scope = tenant_id
        .map(|t| t.to_string())
        .unwrap_or_else(|| PLATFORM_SCOPE.to_owned());
    sqlx::query(
        "INSERT INTO policy_activations (scope, policy_version_id) VALUES ($1, $2) \
         ON CONFLICT (scope) DO UPDATE SET policy_version_id = EXCLUDED.policy_version_id, activated_at = now()",
    )
    .bind(&scope)
    .bind(version_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    get(db, policy_id)
        .await?
        .ok_or(ApiError::NotFound("policy"))
}

/// Records a failed evaluation; the cycle went on with the fallback policy.
pub async fn record_failure(
    db: &PgPool,
    version_id: Uuid,
    kind: &str,
    message: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO policy_failures (policy_version_id, kind, message) VALUES ($1, $2, $3)",
    )
    .bind(version_id)
    .bind(kind)
    .bind(message.chars().take(2000).collect::<String>())
    .execute(db)
    .await?;
    Ok(())
}
