//! Policies as the control plane keeps them: versions in PostgreSQL, compiled modules cached by
//! version, the active version per scope, and evaluation off the async workers. The sandbox itself
//! (wasmtime and its limits) lives in `airtime-policy-host`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airtime_policy_host::{
    CompiledPolicy, EvaluationRecord, ParamsVerdict, PolicyError, PolicyLimits, PolicyRuntime, RuntimeConfig,
};
use airtime_policy_sdk::abi;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::Digest as _;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::auth::audit::{self, AuditActor, Change};
use crate::error::{ApiError, ApiResult};
use crate::model::PLATFORM_SCOPE;

/// The built-in policy every scope falls back to when its own policy fails.
pub const FALLBACK_POLICY: &str = "priority-best-fit";

/// The built-in policy the platform scope starts with (the fallback when it is not built).
pub const DEFAULT_POLICY: &str = "slo-first";

/// A policy version ready to evaluate.
pub struct LoadedPolicy {
    pub policy_id: Uuid,
    pub version_id: Uuid,
    pub name: String,
    pub version: i32,
    /// One of Airtime's own policies (what every scope falls back to), not a tenant's upload.
    pub builtin: bool,
    pub compiled: CompiledPolicy,
}

/// A version chosen for a scope, with the parameters it was activated with and its limits.
#[derive(Clone)]
pub struct Selected {
    pub policy: Arc<LoadedPolicy>,
    /// JSON handed to the policy in the snapshot.
    pub params: String,
    pub limits: PolicyLimits,
}

impl Selected {
    pub fn label(&self) -> String {
        format!("{} v{}", self.policy.name, self.policy.version)
    }
}

pub struct PolicyCatalog {
    runtime: PolicyRuntime,
    /// Compiled modules by version id; a version's bytes never change.
    compiled: Mutex<HashMap<Uuid, Arc<LoadedPolicy>>>,
    /// Evaluations run on blocking threads, in two lanes of bounded concurrency: the platform
    /// scope's (the cycle's first level, its fallback, shadow) and everything a tenant can cause
    /// (tenant scopes, upload trials, dry runs), so no number of hostile tenants can keep the
    /// platform policy from a thread.
    platform_lane: Arc<Semaphore>,
    tenant_lane: Arc<Semaphore>,
    /// Scopes whose last evaluation is still running (abandoned past the cycle budget): they fall
    /// back at once rather than queueing a second evaluation behind the first.
    busy_scopes: Arc<Mutex<HashSet<String>>>,
    /// Compilations at once, across the control plane.
    compiles: Arc<Semaphore>,
    /// Owners (`None`: the platform) with an upload compiling: one at a time each.
    compiling: Arc<Mutex<HashSet<Option<Uuid>>>>,
    compile_timeout: Duration,
    limits: PolicyLimits,
}

/// Which lane an evaluation runs in (see [`PolicyCatalog`]); the scheduling core names it.
pub use airtime_scheduler::cycle::Lane;

/// Why an uploaded module was not accepted.
#[derive(Debug)]
pub enum VetError {
    /// The module itself was refused: invalid, over a bound, or failing its trial.
    Refused(PolicyError),
    /// Compiling it took longer than the compile timeout.
    TooSlow { timeout: Duration },
    /// Other uploads are compiling (the owner's own, or as many as the control plane allows).
    Busy { retry_after: Duration },
}

impl From<PolicyError> for VetError {
    fn from(error: PolicyError) -> Self {
        VetError::Refused(error)
    }
}

/// Releases an owner's compile slot when the compilation ends, even one abandoned at its timeout.
struct CompileSlot {
    owners: Arc<Mutex<HashSet<Option<Uuid>>>>,
    owner: Option<Uuid>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        if let Ok(mut owners) = self.owners.lock() {
            owners.remove(&self.owner);
        }
    }
}

/// Marks a scope busy while its evaluation runs on its blocking thread.
struct BusyScope {
    scopes: Arc<Mutex<HashSet<String>>>,
    scope: String,
}

impl Drop for BusyScope {
    fn drop(&mut self) {
        if let Ok(mut scopes) = self.scopes.lock() {
            scopes.remove(&self.scope);
        }
    }
}

impl PolicyCatalog {
    /// `compiles`: uploads compiled at once; `compile_timeout`: the longest one may take.
    pub fn new(compiles: u32, compile_timeout: Duration) -> anyhow::Result<Self> {
        let parallel = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        Ok(Self {
            runtime: PolicyRuntime::new(RuntimeConfig::default())?,
            compiled: Mutex::new(HashMap::new()),
            platform_lane: Arc::new(Semaphore::new(parallel)),
            tenant_lane: Arc::new(Semaphore::new(parallel)),
            busy_scopes: Arc::new(Mutex::new(HashSet::new())),
            compiles: Arc::new(Semaphore::new(compiles.max(1) as usize)),
            compiling: Arc::new(Mutex::new(HashSet::new())),
            compile_timeout,
            limits: PolicyLimits::default(),
        })
    }

    /// How many compiled modules the runtime keeps (refused uploads are never kept).
    pub fn cached_modules(&self) -> usize {
        self.runtime.cached_policies()
    }

    /// Stores each built-in policy as a platform policy (a new version when its bytes changed) and
    /// activates the fallback for the platform scope when nothing is active yet.
    pub async fn install_builtins(&self, db: &PgPool) -> anyhow::Result<()> {
        for (name, wasm) in airtime_builtin_policies::ALL {
            let mut tx = db.begin().await?;
            let policy_id = ensure_policy(&mut tx, None, name, true).await?;
            let sha = sha256_hex(wasm);
            let latest: Option<(String,)> =
                sqlx::query_as("SELECT sha256 FROM policy_versions WHERE policy_id = $1 ORDER BY version DESC LIMIT 1")
                    .bind(policy_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            if latest.map(|(s,)| s) != Some(sha) {
                insert_version(&mut tx, policy_id, None, wasm).await?;
                tracing::info!(policy = name, "installed built-in policy version");
            }
            tx.commit().await?;
        }
        let default = if airtime_builtin_policies::ALL.iter().any(|(name, _)| *name == DEFAULT_POLICY) {
            DEFAULT_POLICY
        } else {
            FALLBACK_POLICY
        };
        let fallback_version = latest_builtin(db, default).await?;
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
    /// None when nothing is active or the active policy is suspended: the scope runs the fallback.
    pub async fn active(&self, db: &PgPool, scope: &str) -> anyhow::Result<Option<Selected>> {
        let row: Option<(Uuid, serde_json::Value, serde_json::Value)> = sqlx::query_as(
            "SELECT a.policy_version_id, a.params, p.limits FROM policy_activations a \
             JOIN policy_versions v ON v.id = a.policy_version_id JOIN policies p ON p.id = v.policy_id \
             WHERE a.scope = $1 AND a.suspended_at IS NULL",
        )
        .bind(scope)
        .fetch_optional(db)
        .await?;
        match row {
            Some((version_id, params, limits)) => Ok(Some(self.select(db, version_id, params, limits).await?)),
            None => Ok(None),
        }
    }

    /// The candidate evaluated in shadow for a scope, if any.
    pub async fn shadow(&self, db: &PgPool, scope: &str) -> anyhow::Result<Option<Selected>> {
        let row: Option<(Uuid, serde_json::Value, serde_json::Value)> = sqlx::query_as(
            "SELECT s.policy_version_id, s.params, p.limits FROM policy_shadows s \
             JOIN policy_versions v ON v.id = s.policy_version_id JOIN policies p ON p.id = v.policy_id \
             WHERE s.scope = $1",
        )
        .bind(scope)
        .fetch_optional(db)
        .await?;
        match row {
            Some((version_id, params, limits)) => Ok(Some(self.select(db, version_id, params, limits).await?)),
            None => Ok(None),
        }
    }

    /// A stored version by id, as it would run with its policy's limits and the given parameters.
    pub async fn version(&self, db: &PgPool, version_id: Uuid, params: serde_json::Value) -> anyhow::Result<Selected> {
        let (limits,): (serde_json::Value,) = sqlx::query_as(
            "SELECT p.limits FROM policy_versions v JOIN policies p ON p.id = v.policy_id WHERE v.id = $1",
        )
        .bind(version_id)
        .fetch_one(db)
        .await?;
        self.select(db, version_id, params, limits).await
    }

    async fn select(
        &self,
        db: &PgPool,
        version_id: Uuid,
        params: serde_json::Value,
        limits: serde_json::Value,
    ) -> anyhow::Result<Selected> {
        let policy = self.load(db, version_id).await?;
        // Limits were validated when set; a row that no longer parses runs with the defaults.
        let limits = serde_json::from_value::<PolicyLimits>(limits).unwrap_or_default();
        Ok(Selected { policy, params: params.to_string(), limits })
    }

    /// The latest version of the built-in fallback policy, with default parameters and limits.
    pub async fn fallback(&self, db: &PgPool) -> anyhow::Result<Selected> {
        let version_id = latest_builtin(db, FALLBACK_POLICY).await?;
        Ok(Selected { policy: self.load(db, version_id).await?, params: "{}".into(), limits: PolicyLimits::default() })
    }

    async fn load(&self, db: &PgPool, version_id: Uuid) -> anyhow::Result<Arc<LoadedPolicy>> {
        if let Some(hit) = self.cached(version_id) {
            return Ok(hit);
        }
        let (policy_id, name, version, builtin, wasm): (Uuid, String, i32, bool, Vec<u8>) = sqlx::query_as(
            "SELECT p.id, p.name, v.version, p.builtin, v.wasm FROM policy_versions v \
             JOIN policies p ON p.id = v.policy_id WHERE v.id = $1",
        )
        .bind(version_id)
        .fetch_one(db)
        .await?;
        let runtime = self.runtime.clone();
        let compiled = tokio::task::spawn_blocking(move || runtime.compile(&wasm)).await??;
        let loaded = Arc::new(LoadedPolicy { policy_id, version_id, name, version, builtin, compiled });
        if let Ok(mut cache) = self.compiled.lock() {
            cache.insert(version_id, loaded.clone());
        }
        Ok(loaded)
    }

    fn cached(&self, version_id: Uuid) -> Option<Arc<LoadedPolicy>> {
        self.compiled.lock().ok().and_then(|cache| cache.get(&version_id).cloned())
    }

    /// Whether a scope's last evaluation is still running (it ran past the cycle budget).
    pub fn scope_busy(&self, scope: &str) -> bool {
        self.busy_scopes.lock().map(|s| s.contains(scope)).unwrap_or(false)
    }

    /// Evaluates a policy on a snapshot on a blocking thread, in its lane and bounded by the
    /// policy's limits. Logs written before a failure are kept. With `scope`, the scope is marked
    /// busy until the evaluation really ends, even when the caller stops waiting for it. The lane's
    /// permit is held by the blocking thread itself, so an abandoned evaluation still counts.
    pub async fn evaluate(
        &self,
        selected: &Selected,
        snapshot: Vec<u8>,
        lane: Lane,
        scope: Option<&str>,
    ) -> EvaluationRecord {
        let failed = |error| EvaluationRecord {
            result: Err(error),
            logs: Vec::new(),
            logs_dropped: 0,
            elapsed: std::time::Duration::ZERO,
            memory_bytes: 0,
        };
        let semaphore = match lane {
            Lane::Platform => self.platform_lane.clone(),
            Lane::Tenant => self.tenant_lane.clone(),
        };
        let Ok(permit) = semaphore.acquire_owned().await else {
            return failed(PolicyError::Internal { message: "the control plane is shutting down".into() });
        };
        let busy = scope.map(|scope| {
            if let Ok(mut scopes) = self.busy_scopes.lock() {
                scopes.insert(scope.to_owned());
            }
            BusyScope { scopes: self.busy_scopes.clone(), scope: scope.to_owned() }
        });
        let runtime = self.runtime.clone();
        let policy = selected.policy.clone();
        let limits = selected.limits;
        tokio::task::spawn_blocking(move || {
            let _held = (permit, busy);
            runtime.evaluate_recorded(&policy.compiled, &snapshot, &limits)
        })
        .await
        .unwrap_or_else(|_| failed(PolicyError::Internal { message: "the evaluation thread was lost".into() }))
    }

    /// Offers `params` to a version's own check (`airtime_validate_params`, ABI 1.1) in the tenants'
    /// lane, bounded by the default limits: what an activation asks before it is written.
    pub async fn validate_params(
        &self,
        db: &PgPool,
        version_id: Uuid,
        params: &serde_json::Value,
    ) -> anyhow::Result<Result<ParamsVerdict, PolicyError>> {
        let policy = self.load(db, version_id).await?;
        let Ok(permit) = self.tenant_lane.clone().acquire_owned().await else {
            anyhow::bail!("the control plane is shutting down");
        };
        let runtime = self.runtime.clone();
        let text = params.to_string();
        let verdict = tokio::task::spawn_blocking(move || {
            let _held = permit;
            runtime.validate_params(&policy.compiled, &text, &PolicyLimits::default())
        })
        .await?;
        Ok(verdict)
    }

    /// Takes a compile slot for an upload by `owner`, or says when to come back.
    fn compile_slot(&self, owner: Option<Uuid>) -> Result<CompileSlot, VetError> {
        let busy = VetError::Busy { retry_after: Duration::from_secs(2) };
        let mut owners = self.compiling.lock().map_err(|_| VetError::Busy { retry_after: Duration::from_secs(2) })?;
        if owners.contains(&owner) {
            return Err(busy);
        }
        let permit = self.compiles.clone().try_acquire_owned().map_err(|_| busy)?;
        owners.insert(owner);
        Ok(CompileSlot { owners: self.compiling.clone(), owner, _permit: permit })
    }

    /// Compiles a module in a compile slot, within the compile timeout, without caching it.
    async fn compile_bounded(&self, owner: Option<Uuid>, wasm: Vec<u8>) -> Result<CompiledPolicy, VetError> {
        let slot = self.compile_slot(owner)?;
        let runtime = self.runtime.clone();
        let work = tokio::task::spawn_blocking(move || {
            let _slot = slot; // held until the compilation really ends
            runtime.compile_uncached(&wasm)
        });
        match tokio::time::timeout(self.compile_timeout, work).await {
            Ok(Ok(result)) => result.map_err(VetError::Refused),
            Ok(Err(_)) => Err(VetError::Refused(PolicyError::Internal { message: "compilation was aborted".into() })),
            Err(_) => Err(VetError::TooSlow { timeout: self.compile_timeout }),
        }
    }

    /// A compiled module that is no stored version, as it runs with the default limits.
    fn unstored(&self, name: &str, compiled: CompiledPolicy, params: String) -> Selected {
        let policy = Arc::new(LoadedPolicy {
            policy_id: Uuid::nil(),
            version_id: Uuid::nil(),
            name: name.to_owned(),
            version: 0,
            builtin: false,
            compiled,
        });
        Selected { policy, params, limits: self.limits }
    }

    /// Compiles a module that is not stored (a dry run of a candidate before upload). Bounded like
    /// an upload; never cached.
    pub async fn compile_unstored(&self, wasm: Vec<u8>, params: String) -> Result<Selected, VetError> {
        let compiled = self.compile_bounded(None, wasm).await?;
        Ok(self.unstored("unstored module", compiled, params))
    }

    /// Checks a module uploaded by `owner` (None: the platform): it compiles within the bounds,
    /// speaks our ABI, imports nothing it may not, and evaluates a small fixture snapshot into
    /// well-formed decisions, in the tenants' evaluation lane. Only a module that passes is kept
    /// compiled; nothing is stored on failure.
    pub async fn vet(&self, owner: Option<Uuid>, wasm: Vec<u8>) -> Result<(), VetError> {
        let compiled = self.compile_bounded(owner, wasm).await?;
        let selected = self.unstored("upload trial", compiled.clone(), "{}".into());
        let record = self.evaluate(&selected, abi::encode_snapshot(&trial_snapshot()), Lane::Tenant, None).await;
        let evaluation = record.into_result()?;
        abi::decode_decisions(&evaluation.output).map_err(PolicyError::MalformedOutput)?;
        self.runtime.remember(&compiled);
        Ok(())
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
        // Shared through MPS: the trial exercises ABI 1.2's shares too.
        sharing: abi::Sharing::Mps,
        free_milli: if holder.is_some() { 0 } else { abi::WHOLE_GPU_MILLI },
        memory_reserved_mb: 0,
        sharers: u32::from(holder.is_some()),
        mig_profile: "",
    };
    let workload = |id: &'static str, gpu_count: u32, state: abi::WorkloadState, node: Option<u32>| abi::Workload {
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
        gpu_milli: abi::WHOLE_GPU_MILLI,
        mig_profile: "",
        ..abi::Workload::default()
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
            running_gpu_milli: 1000,
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
            containers: true,
        }],
        gpus: vec![gpu(0, 0, Some(2)), gpu(0, 1, None), gpu(0, 2, None), gpu(0, 3, None)],
        workloads: vec![
            workload("00000000-0000-0000-0000-00000000000a", 2, abi::WorkloadState::Pending, None),
            workload("00000000-0000-0000-0000-00000000000b", 1, abi::WorkloadState::Pending, None),
            workload("00000000-0000-0000-0000-00000000000c", 1, abi::WorkloadState::Running, Some(0)),
            abi::Workload {
                gpu_milli: 250,
                gpu_memory_mb: 10000,
                ..workload("00000000-0000-0000-0000-00000000000d", 1, abi::WorkloadState::Pending, None)
            },
        ],
        settings: None,
        params: "{}",
        scope_tenant: None,
        ..abi::Snapshot::default()
    }
}

/// The latest version of a built-in policy.
async fn latest_builtin(db: &PgPool, name: &str) -> sqlx::Result<Uuid> {
    let (version_id,): (Uuid,) = sqlx::query_as(
        "SELECT v.id FROM policy_versions v JOIN policies p ON p.id = v.policy_id \
         WHERE p.builtin AND p.name = $1 ORDER BY v.version DESC LIMIT 1",
    )
    .bind(name)
    .fetch_one(db)
    .await?;
    Ok(version_id)
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
    let existing: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM policies WHERE tenant_id IS NOT DISTINCT FROM $1 AND name = $2 FOR UPDATE")
            .bind(tenant_id)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await?;
    if let Some((id,)) = existing {
        // Uploading under the name of a deleted policy brings it back, with its history.
        sqlx::query("UPDATE policies SET deleted_at = NULL WHERE id = $1 AND deleted_at IS NOT NULL")
            .bind(id)
            .execute(&mut **tx)
            .await?;
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

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct VersionView {
    pub id: Uuid,
    pub version: i32,
    pub sha256: String,
    pub size_bytes: i32,
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    pub uploaded_at: DateTime<Utc>,
    /// Decides for its scope now.
    pub active: bool,
    /// Evaluated beside the active version every cycle, never applied.
    pub shadow: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PolicyView {
    pub id: Uuid,
    pub name: String,
    /// None for a platform policy.
    pub tenant: Option<String>,
    pub builtin: bool,
    pub created_at: DateTime<Utc>,
    pub active_version: Option<i32>,
    /// The parameters the active version runs with.
    #[schema(value_type = Option<Object>)]
    pub active_params: Option<serde_json::Value>,
    /// Set when the policy failed too many cycles in a row; its scope runs the built-in meanwhile.
    pub suspended_reason: Option<String>,
    pub shadow_version: Option<i32>,
    pub consecutive_failures: i32,
    /// Per-evaluation limits (defaults where absent).
    #[schema(value_type = Object)]
    pub limits: PolicyLimits,
    pub versions: Vec<VersionView>,
}

#[derive(sqlx::FromRow)]
struct PolicyRow {
    id: Uuid,
    name: String,
    tenant: Option<String>,
    builtin: bool,
    created_at: DateTime<Utc>,
    limits: serde_json::Value,
    consecutive_failures: i32,
}

/// Policies visible in `scope`: every one for `None` (platform admins); else the platform's and
/// that tenant's own.
pub async fn list(db: &PgPool, scope: Option<Uuid>) -> sqlx::Result<Vec<PolicyView>> {
    let rows: Vec<PolicyRow> = sqlx::query_as(
        "SELECT p.id, p.name, t.name AS tenant, p.builtin, p.created_at, p.limits, p.consecutive_failures \
         FROM policies p LEFT JOIN tenants t ON t.id = p.tenant_id WHERE p.deleted_at IS NULL \
         AND ($1::uuid IS NULL OR p.tenant_id IS NULL OR p.tenant_id = $1) \
         ORDER BY p.builtin DESC, p.name",
    )
    .bind(scope)
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
        "SELECT p.id, p.name, t.name AS tenant, p.builtin, p.created_at, p.limits, p.consecutive_failures \
         FROM policies p LEFT JOIN tenants t ON t.id = p.tenant_id WHERE p.id = $1 AND p.deleted_at IS NULL",
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
                EXISTS (SELECT 1 FROM policy_activations a WHERE a.policy_version_id = v.id) AS active, \
                EXISTS (SELECT 1 FROM policy_shadows s WHERE s.policy_version_id = v.id) AS shadow \
         FROM policy_versions v WHERE v.policy_id = $1 AND v.deleted_at IS NULL ORDER BY v.version DESC",
    )
    .bind(row.id)
    .fetch_all(db)
    .await?;
    let activation: Option<(serde_json::Value, Option<String>)> = sqlx::query_as(
        "SELECT a.params, a.suspended_reason FROM policy_activations a \
         JOIN policy_versions v ON v.id = a.policy_version_id WHERE v.policy_id = $1",
    )
    .bind(row.id)
    .fetch_optional(db)
    .await?;
    let (active_params, suspended_reason) = match activation {
        Some((params, reason)) => (Some(params), reason),
        None => (None, None),
    };
    Ok(PolicyView {
        id: row.id,
        name: row.name,
        tenant: row.tenant,
        builtin: row.builtin,
        created_at: row.created_at,
        active_version: versions.iter().find(|v| v.active).map(|v| v.version),
        active_params,
        suspended_reason,
        shadow_version: versions.iter().find(|v| v.shadow).map(|v| v.version),
        consecutive_failures: row.consecutive_failures,
        limits: serde_json::from_value(row.limits).unwrap_or_default(),
        versions,
    })
}

/// Stores an uploaded module that passed `vet` as the next version of the named policy: a platform
/// policy (`tenant_id` None) or the tenant's own. Audited in the same transaction.
pub async fn store_upload(
    db: &PgPool,
    tenant_id: Option<Uuid>,
    name: &str,
    wasm: &[u8],
    actor: &AuditActor,
) -> ApiResult<PolicyView> {
    let valid_name = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if !valid_name {
        return Err(ApiError::bad_request(
            "invalid_name",
            "policy name must be 1 to 63 lowercase letters, digits or '-', not starting with '-'",
        ));
    }
    let mut tx = db.begin().await?;
    let existing: Option<(bool,)> =
        sqlx::query_as("SELECT builtin FROM policies WHERE tenant_id IS NOT DISTINCT FROM $2 AND name = $1")
            .bind(name)
            .bind(tenant_id)
            .fetch_optional(&mut *tx)
            .await?;
    if existing == Some((true,)) {
        return Err(ApiError::conflict(
            "builtin_policy",
            format!("{name} is a built-in policy; upload under another name"),
        ));
    }
    let policy_id = ensure_policy(&mut tx, tenant_id, name, false).await?;
    let (version_id, version) = insert_version(&mut tx, policy_id, tenant_id, wasm).await?;
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.upload", "policy", policy_id).tenant(tenant_id).detail(serde_json::json!({
            "name": name, "version": version, "version_id": version_id, "sha256": sha256_hex(wasm), "size_bytes": wasm.len(),
        })),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(ApiError::NotFound("policy"))
}

/// The tenant of a scope (`None` for the platform scope), for the audit log.
fn tenant_of_scope(scope: &str) -> Option<Uuid> {
    Uuid::parse_str(scope).ok()
}

/// The tenant that owns a policy (`None` for a platform policy); not found when deleted or absent.
pub async fn owner(db: &PgPool, policy_id: Uuid) -> ApiResult<Option<Uuid>> {
    let row: Option<(Option<Uuid>,)> =
        sqlx::query_as("SELECT tenant_id FROM policies WHERE id = $1 AND deleted_at IS NULL")
            .bind(policy_id)
            .fetch_optional(db)
            .await?;
    row.map(|(t,)| t).ok_or(ApiError::NotFound("policy"))
}

/// The scope a policy decides for: `platform`, or the tenant id of a tenant's own policy.
async fn scope_of(conn: &mut sqlx::PgConnection, policy_id: Uuid) -> ApiResult<String> {
    let row: Option<(Option<Uuid>,)> =
        sqlx::query_as("SELECT tenant_id FROM policies WHERE id = $1 AND deleted_at IS NULL")
            .bind(policy_id)
            .fetch_optional(&mut *conn)
            .await?;
    let (tenant_id,) = row.ok_or(ApiError::NotFound("policy"))?;
    Ok(tenant_id.map(|t| t.to_string()).unwrap_or_else(|| PLATFORM_SCOPE.to_owned()))
}

async fn version_id(conn: &mut sqlx::PgConnection, policy_id: Uuid, version: Option<i32>) -> ApiResult<Uuid> {
    let row: Option<(Uuid,)> = sqlx::query_as(
        "SELECT id FROM policy_versions WHERE policy_id = $1 AND deleted_at IS NULL \
         AND ($2::int IS NULL OR version = $2) ORDER BY version DESC LIMIT 1",
    )
    .bind(policy_id)
    .bind(version)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|(id,)| id).ok_or(ApiError::NotFound("policy version"))
}

/// Largest magnitude of a number in policy parameters. PostgreSQL's JSONB keeps numbers as exact
/// decimals, and one near `f64::MAX` (1.8e308) comes back as a 309-digit integer that does not
/// parse as a double: refused here, where parameters enter, so what is stored can be read back.
const MAX_PARAM_NUMBER: f64 = 1e300;

fn check_params(params: &serde_json::Value) -> ApiResult<()> {
    if !params.is_object() {
        return Err(ApiError::unprocessable("invalid_params", "params must be a JSON object"));
    }
    if params.to_string().len() > 64 * 1024 {
        return Err(ApiError::unprocessable("invalid_params", "params must be at most 64 KiB of JSON"));
    }
    fn numbers_in_range(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Number(n) => n.as_f64().is_some_and(|x| x.abs() <= MAX_PARAM_NUMBER),
            serde_json::Value::Array(items) => items.iter().all(numbers_in_range),
            serde_json::Value::Object(map) => map.values().all(numbers_in_range),
            _ => true,
        }
    }
    if !numbers_in_range(params) {
        return Err(ApiError::unprocessable(
            "invalid_params",
            format!("numbers in params must be at most {MAX_PARAM_NUMBER:e} in magnitude"),
        ));
    }
    Ok(())
}

/// Makes a version (the latest when none is named) the one that decides for its policy's scope,
/// with these parameters. Clears a suspension and the failure count.
pub async fn activate(
    db: &PgPool,
    catalog: &PolicyCatalog,
    policy_id: Uuid,
    version: Option<i32>,
    params: serde_json::Value,
    actor: &AuditActor,
) -> ApiResult<PolicyView> {
    check_params(&params)?;
    let mut tx = db.begin().await?;
    let scope = scope_of(&mut tx, policy_id).await?;
    let version_id = version_id(&mut tx, policy_id, version).await?;
    // The policy's own word on its parameters, before anything is written: a bad value is refused
    // now with the policy's message, not three failed cycles later with a suspension.
    match catalog.validate_params(db, version_id, &params).await? {
        Ok(ParamsVerdict::Accepted | ParamsVerdict::NotChecked) => {}
        Ok(ParamsVerdict::Refused(message)) => {
            return Err(ApiError::unprocessable(
                "invalid_params",
                format!("the policy refused its parameters: {message}"),
            ));
        }
        Err(error) => {
            return Err(ApiError::unprocessable(
                "invalid_params",
                format!("the policy failed checking its parameters ({}): {error}", error.kind()),
            ));
        }
    }
    let previous: Option<(Uuid,)> =
        sqlx::query_as("SELECT policy_version_id FROM policy_activations WHERE scope = $1 FOR UPDATE")
            .bind(&scope)
            .fetch_optional(&mut *tx)
            .await?;
    sqlx::query(
        "INSERT INTO policy_activations (scope, policy_version_id, params) VALUES ($1, $2, $3) \
         ON CONFLICT (scope) DO UPDATE SET policy_version_id = EXCLUDED.policy_version_id, \
             params = EXCLUDED.params, activated_at = now(), suspended_at = NULL, suspended_reason = NULL",
    )
    .bind(&scope)
    .bind(version_id)
    .bind(&params)
    .execute(&mut *tx)
    .await?;
    // A new version starts with a clean record; re-activating the version that was failing keeps
    // its history, so a policy that is suspended and re-activated is suspended at its next failure
    // rather than given another full run of failed cycles.
    if previous.map(|(v,)| v) != Some(version_id) {
        sqlx::query("UPDATE policies SET consecutive_failures = 0 WHERE id = $1")
            .bind(policy_id)
            .execute(&mut *tx)
            .await?;
    }
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.activate", "policy", policy_id)
            .tenant(tenant_of_scope(&scope))
            .detail(serde_json::json!({"scope": scope, "version_id": version_id, "params": params})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(ApiError::NotFound("policy"))
}

/// Ends a tenant policy's activation: its scope's work is placed by the platform policy again. The
/// platform scope always has a policy (activate another instead).
pub async fn deactivate(db: &PgPool, policy_id: Uuid, actor: &AuditActor) -> ApiResult<PolicyView> {
    let mut tx = db.begin().await?;
    let scope = scope_of(&mut tx, policy_id).await?;
    if scope == PLATFORM_SCOPE {
        return Err(ApiError::conflict(
            "platform_scope",
            "the platform scope always has a policy; activate another one instead",
        ));
    }
    let removed = sqlx::query(
        "DELETE FROM policy_activations a USING policy_versions v \
         WHERE a.scope = $1 AND v.id = a.policy_version_id AND v.policy_id = $2",
    )
    .bind(&scope)
    .bind(policy_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if removed == 0 {
        return Err(ApiError::conflict("not_active", "this policy is not active"));
    }
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.deactivate", "policy", policy_id)
            .tenant(tenant_of_scope(&scope))
            .detail(serde_json::json!({"scope": scope})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(ApiError::NotFound("policy"))
}

/// Activates the version before the active one of this policy (its parameters kept).
pub async fn rollback(
    db: &PgPool,
    catalog: &PolicyCatalog,
    policy_id: Uuid,
    actor: &AuditActor,
) -> ApiResult<PolicyView> {
    let mut conn = db.acquire().await?;
    let scope = scope_of(&mut conn, policy_id).await?;
    let current: Option<(i32, serde_json::Value)> = sqlx::query_as(
        "SELECT v.version, a.params FROM policy_activations a JOIN policy_versions v ON v.id = a.policy_version_id \
         WHERE a.scope = $1 AND v.policy_id = $2",
    )
    .bind(&scope)
    .bind(policy_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((current, params)) = current else {
        return Err(ApiError::conflict("not_active", "this policy is not active; nothing to roll back"));
    };
    let previous: Option<(i32,)> = sqlx::query_as(
        "SELECT version FROM policy_versions WHERE policy_id = $1 AND version < $2 AND deleted_at IS NULL \
         ORDER BY version DESC LIMIT 1",
    )
    .bind(policy_id)
    .bind(current)
    .fetch_optional(&mut *conn)
    .await?;
    drop(conn);
    let Some((previous,)) = previous else {
        return Err(ApiError::conflict("no_previous_version", format!("version {current} is the oldest version")));
    };
    activate(db, catalog, policy_id, Some(previous), params, actor).await
}

/// Deletes one version (or, with `version` None, the whole policy). An active or shadowed version
/// cannot be deleted; the bytes stay for the decisions that name them, hidden from listings.
pub async fn delete(db: &PgPool, policy_id: Uuid, version: Option<i32>, actor: &AuditActor) -> ApiResult<()> {
    let mut tx = db.begin().await?;
    let (builtin, tenant_id): (bool, Option<Uuid>) =
        sqlx::query_as("SELECT builtin, tenant_id FROM policies WHERE id = $1 AND deleted_at IS NULL")
            .bind(policy_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(ApiError::NotFound("policy"))?;
    if builtin {
        return Err(ApiError::conflict("builtin_policy", "built-in policies cannot be deleted"));
    }
    let in_use: Option<(i32,)> = sqlx::query_as(
        "SELECT v.version FROM policy_versions v WHERE v.policy_id = $1 AND ($2::int IS NULL OR v.version = $2) \
         AND (EXISTS (SELECT 1 FROM policy_activations a WHERE a.policy_version_id = v.id) \
              OR EXISTS (SELECT 1 FROM policy_shadows s WHERE s.policy_version_id = v.id)) LIMIT 1",
    )
    .bind(policy_id)
    .bind(version)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((v,)) = in_use {
        return Err(ApiError::conflict(
            "version_in_use",
            format!("version {v} is active or in shadow; activate another or stop the shadow first"),
        ));
    }
    match version {
        Some(v) => {
            let n = sqlx::query(
                "UPDATE policy_versions SET deleted_at = now() WHERE policy_id = $1 AND version = $2 AND deleted_at IS NULL",
            )
            .bind(policy_id)
            .bind(v)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                return Err(ApiError::NotFound("policy version"));
            }
        }
        None => {
            sqlx::query("UPDATE policy_versions SET deleted_at = now() WHERE policy_id = $1 AND deleted_at IS NULL")
                .bind(policy_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE policies SET deleted_at = now() WHERE id = $1")
                .bind(policy_id)
                .execute(&mut *tx)
                .await?;
        }
    }
    audit::record(
        &mut tx,
        actor,
        Change::new(if version.is_some() { "policy.delete_version" } else { "policy.delete" }, "policy", policy_id)
            .tenant(tenant_id)
            .detail(serde_json::json!({"version": version})),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Starts evaluating a version in shadow beside its scope's active policy.
pub async fn start_shadow(
    db: &PgPool,
    policy_id: Uuid,
    version: Option<i32>,
    params: serde_json::Value,
    actor: &AuditActor,
) -> ApiResult<PolicyView> {
    check_params(&params)?;
    let mut tx = db.begin().await?;
    let scope = scope_of(&mut tx, policy_id).await?;
    let version_id = version_id(&mut tx, policy_id, version).await?;
    sqlx::query(
        "INSERT INTO policy_shadows (scope, policy_version_id, params) VALUES ($1, $2, $3) \
         ON CONFLICT (scope) DO UPDATE SET policy_version_id = EXCLUDED.policy_version_id, params = EXCLUDED.params, \
             started_at = now()",
    )
    .bind(&scope)
    .bind(version_id)
    .bind(&params)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.shadow_start", "policy", policy_id)
            .tenant(tenant_of_scope(&scope))
            .detail(serde_json::json!({"scope": scope, "version_id": version_id, "params": params})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(ApiError::NotFound("policy"))
}

pub async fn stop_shadow(db: &PgPool, policy_id: Uuid, actor: &AuditActor) -> ApiResult<()> {
    let mut conn = db.begin().await?;
    let scope = scope_of(&mut conn, policy_id).await?;
    sqlx::query(
        "DELETE FROM policy_shadows s USING policy_versions v WHERE s.scope = $1 AND v.id = s.policy_version_id \
         AND v.policy_id = $2",
    )
    .bind(&scope)
    .bind(policy_id)
    .execute(&mut *conn)
    .await?;
    audit::record(
        &mut conn,
        actor,
        Change::new("policy.shadow_stop", "policy", policy_id).tenant(tenant_of_scope(&scope)),
    )
    .await?;
    conn.commit().await?;
    Ok(())
}

/// Sets the per-evaluation limits of a policy (every version), checked against the host's bounds.
pub async fn set_limits(
    db: &PgPool,
    policy_id: Uuid,
    limits: &PolicyLimits,
    actor: &AuditActor,
) -> ApiResult<PolicyView> {
    limits.validate().map_err(|e| ApiError::unprocessable("invalid_limits", e.to_string()))?;
    let value = serde_json::to_value(limits).map_err(anyhow::Error::from)?;
    let mut tx = db.begin().await?;
    let updated: Option<(Option<Uuid>,)> =
        sqlx::query_as("UPDATE policies SET limits = $2 WHERE id = $1 AND deleted_at IS NULL RETURNING tenant_id")
            .bind(policy_id)
            .bind(&value)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((tenant_id,)) = updated else {
        return Err(ApiError::NotFound("policy"));
    };
    audit::record(
        &mut tx,
        actor,
        Change::new("policy.limits", "policy", policy_id)
            .tenant(tenant_id)
            .detail(serde_json::json!({"limits": value})),
    )
    .await?;
    tx.commit().await?;
    get(db, policy_id).await?.ok_or(ApiError::NotFound("policy"))
}

/// Records a failed evaluation (the cycle went on with the fallback) and suspends the policy's
/// activation once it has failed `suspend_after` cycles in a row. Returns whether it was suspended.
pub async fn record_failure(
    db: &PgPool,
    selected: &Selected,
    cycle_id: Option<i64>,
    kind: &str,
    message: &str,
    suspend_after: u32,
) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    // Trap messages name the guest's functions (its name section): guest text, cleaned here too.
    let message = airtime_policy_sdk::text::clean(message, airtime_policy_sdk::text::MAX_FAILURE_CHARS);
    sqlx::query(
        "INSERT INTO policy_failures (cycle_id, policy_version_id, tenant_id, kind, message) \
         SELECT $1, v.id, v.tenant_id, $3, $4 FROM policy_versions v WHERE v.id = $2",
    )
    .bind(cycle_id)
    .bind(selected.policy.version_id)
    .bind(kind)
    .bind(message.as_ref())
    .execute(&mut *tx)
    .await?;
    let (failures,): (i32,) = sqlx::query_as(
        "UPDATE policies SET consecutive_failures = consecutive_failures + 1 WHERE id = $1 RETURNING consecutive_failures",
    )
    .bind(selected.policy.policy_id)
    .fetch_one(&mut *tx)
    .await?;
    let suspended = failures >= suspend_after as i32
        && sqlx::query(
            "UPDATE policy_activations SET suspended_at = now(), suspended_reason = $2 \
             WHERE policy_version_id = $1 AND suspended_at IS NULL",
        )
        .bind(selected.policy.version_id)
        .bind(format!("failed {failures} cycles in a row; last: {kind}: {message}"))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
    tx.commit().await?;
    Ok(suspended)
}

/// A good evaluation ends a run of failures.
pub async fn record_success(db: &PgPool, selected: &Selected) -> sqlx::Result<()> {
    sqlx::query("UPDATE policies SET consecutive_failures = 0 WHERE id = $1 AND consecutive_failures <> 0")
        .bind(selected.policy.policy_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Keeps what a policy logged in a cycle.
pub async fn record_logs(
    db: &PgPool,
    selected: &Selected,
    cycle_id: Option<i64>,
    logs: &[airtime_policy_host::PolicyLog],
) -> sqlx::Result<()> {
    if logs.is_empty() {
        return Ok(());
    }
    let levels: Vec<String> = logs.iter().map(|l| format!("{:?}", l.level).to_lowercase()).collect();
    // Cleaned and bounded already, where the host read them from the guest (`airtime.log`).
    let messages: Vec<&str> = logs.iter().map(|l| l.message.as_str()).collect();
    sqlx::query(
        "INSERT INTO policy_logs (policy_version_id, tenant_id, cycle_id, level, message) \
         SELECT v.id, v.tenant_id, $2, l.level, l.message FROM policy_versions v, \
                UNNEST($3::text[], $4::text[]) AS l(level, message) WHERE v.id = $1",
    )
    .bind(selected.policy.version_id)
    .bind(cycle_id)
    .bind(&levels)
    .bind(&messages)
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FailureView {
    pub id: i64,
    pub cycle_id: Option<i64>,
    pub version: i32,
    pub kind: String,
    pub message: String,
    pub at: DateTime<Utc>,
}

pub async fn failures(db: &PgPool, policy_id: Uuid) -> sqlx::Result<Vec<FailureView>> {
    sqlx::query_as(
        "SELECT f.id, f.cycle_id, v.version, f.kind, f.message, f.at FROM policy_failures f \
         JOIN policy_versions v ON v.id = f.policy_version_id WHERE v.policy_id = $1 ORDER BY f.id DESC LIMIT 200",
    )
    .bind(policy_id)
    .fetch_all(db)
    .await
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct LogView {
    pub id: i64,
    pub cycle_id: Option<i64>,
    pub version: i32,
    pub level: String,
    pub message: String,
    pub at: DateTime<Utc>,
}

pub async fn logs(db: &PgPool, policy_id: Uuid) -> sqlx::Result<Vec<LogView>> {
    sqlx::query_as(
        "SELECT l.id, l.cycle_id, v.version, l.level, l.message, l.at FROM policy_logs l \
         JOIN policy_versions v ON v.id = l.policy_version_id WHERE v.policy_id = $1 ORDER BY l.id DESC LIMIT 500",
    )
    .bind(policy_id)
    .fetch_all(db)
    .await
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ShadowResultView {
    pub id: i64,
    pub cycle_id: i64,
    pub version: i32,
    pub active_policy_name: String,
    pub agreed: i32,
    pub differed: i32,
    /// The decisions that differed, one object each.
    #[schema(value_type = Vec<Object>)]
    pub diff: serde_json::Value,
    pub error: Option<String>,
    pub at: DateTime<Utc>,
}

pub async fn shadow_results(db: &PgPool, policy_id: Uuid) -> sqlx::Result<Vec<ShadowResultView>> {
    sqlx::query_as(
        "SELECT r.id, r.cycle_id, v.version, r.active_policy_name, r.agreed, r.differed, r.diff, r.error, r.at \
         FROM shadow_results r JOIN policy_versions v ON v.id = r.shadow_version_id \
         WHERE v.policy_id = $1 ORDER BY r.id DESC LIMIT 200",
    )
    .bind(policy_id)
    .fetch_all(db)
    .await
}
