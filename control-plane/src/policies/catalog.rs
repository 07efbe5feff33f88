//! The policy catalogue: compiled modules cached by version, the version each scope runs, vetting
//! of uploads, and evaluation on blocking threads in the platform's or the tenants' lane.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airtime_policy_host::{
    CompiledPolicy, EvaluationPhases, EvaluationRecord, EvaluationRequest, Lane as HostLane, ParamsVerdict,
    PolicyError, PolicyLimits, PolicyRuntime, RuntimeConfig,
};
use airtime_policy_sdk::abi;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::model::PLATFORM_SCOPE;

use super::store::{ensure_policy, insert_version, sha256_hex};
use super::{DEFAULT_POLICY, FALLBACK_POLICY};

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
    // Evaluations run on blocking threads, each admitted by the runtime into its lane of bounded
    // concurrency (`airtime_policy_host::Lane`): the platform scope's (the cycle's first level,
    // its fallback, shadow) and everything a tenant can cause (tenant scopes, upload trials, dry
    // runs, parameter checks), so no number of hostile tenants can keep the platform policy from
    // an instance. The lanes live with the runtime's instance pool: no path here bypasses them.
    /// Scopes whose last evaluation is still running (abandoned past the cycle budget): they fall
    /// back at once rather than queueing a second evaluation behind the first.
    busy_scopes: Arc<Mutex<HashSet<String>>>,
    /// Compilations at once, across the control plane.
    compiles: Arc<Semaphore>,
    /// Owners (`None`: the platform) with an upload compiling: one at a time each.
    compiling: Arc<Mutex<HashSet<Option<Uuid>>>>,
    compile_timeout: Duration,
    limits: PolicyLimits,
    /// The control plane's own binary, which compiles each upload first in a process of its own
    /// ([`COMPILE_PROBE_ARG`]) that is killed at the compile deadline: a compilation past it is
    /// stopped, its core and its slot freed at once (a thread cannot be stopped). `None`: compiled
    /// in-process only (the library's tests).
    probe: Option<std::path::PathBuf>,
}

/// The first argument that makes the control plane's binary a compile probe: it compiles the
/// module on its stdin as an upload is compiled and exits 0 (compiled) or 1 (refused).
pub const COMPILE_PROBE_ARG: &str = "__compile-probe";

/// The compile probe's whole work (see [`COMPILE_PROBE_ARG`]); returns the exit code.
pub fn compile_probe_main() -> i32 {
    use std::io::Read as _;
    let mut wasm = Vec::new();
    if std::io::stdin().read_to_end(&mut wasm).is_err() {
        return 2;
    }
    match PolicyRuntime::new(RuntimeConfig::default()).map(|runtime| runtime.compile_uncached(&wasm).map(drop)) {
        Ok(Ok(())) => 0,
        Ok(Err(_)) => 1,
        Err(_) => 2,
    }
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
        Ok(Self {
            runtime: PolicyRuntime::new(RuntimeConfig::default())?,
            compiled: Mutex::new(HashMap::new()),
            busy_scopes: Arc::new(Mutex::new(HashSet::new())),
            compiles: Arc::new(Semaphore::new(compiles.max(1) as usize)),
            compiling: Arc::new(Mutex::new(HashSet::new())),
            compile_timeout,
            limits: PolicyLimits::default(),
            probe: None,
        })
    }

    /// Uploads are compiled first by `binary` run as a compile probe, killed at the deadline.
    pub fn with_compile_probe(mut self, binary: Option<std::path::PathBuf>) -> Self {
        self.probe = binary;
        self
    }

    /// Compiles `wasm` in a probe process within the compile timeout; past it the process is
    /// killed. `Ok(())`: it compiled, or was refused (the in-process compilation says why).
    async fn probe_compile(&self, binary: &std::path::Path, wasm: &[u8]) -> Result<(), VetError> {
        use tokio::io::AsyncWriteExt as _;
        let deadline = tokio::time::Instant::now() + self.compile_timeout;
        let spawned = tokio::process::Command::new(binary)
            .arg(COMPILE_PROBE_ARG)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                tracing::warn!(%error, "cannot start the compile probe; compiling in-process");
                return Ok(());
            }
        };
        let feed = async {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(wasm).await;
            }
            child.wait().await
        };
        match tokio::time::timeout_at(deadline, feed).await {
            Ok(Ok(status)) if status.code() == Some(0) || status.code() == Some(1) => Ok(()),
            Ok(_) => Err(VetError::Refused(PolicyError::Internal { message: "the compile probe failed".into() })),
            Err(_) => {
                // Killed now: the compilation's core and its slot are free at the deadline.
                let _ = child.kill().await;
                Err(VetError::TooSlow { timeout: self.compile_timeout })
            }
        }
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
        Ok(self.active_of(db, &[scope.to_owned()]).await?.remove(scope))
    }

    /// The active policies of several scopes, read at once (a cycle asks for every tenant with
    /// pending work): by scope, for the scopes that have one.
    pub async fn active_of(
        &self,
        db: &PgPool,
        scopes: &[String],
    ) -> anyhow::Result<std::collections::HashMap<String, Selected>> {
        let rows: Vec<(String, Uuid, serde_json::Value, serde_json::Value)> = sqlx::query_as(
            "SELECT a.scope, a.policy_version_id, a.params, p.limits FROM policy_activations a \
             JOIN policy_versions v ON v.id = a.policy_version_id JOIN policies p ON p.id = v.policy_id \
             WHERE a.scope = ANY($1) AND a.suspended_at IS NULL",
        )
        .bind(scopes)
        .fetch_all(db)
        .await?;
        let mut active = std::collections::HashMap::with_capacity(rows.len());
        for (scope, version_id, params, limits) in rows {
            active.insert(scope, self.select(db, version_id, params, limits).await?);
        }
        Ok(active)
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
    /// slot is held by the blocking thread itself, so an abandoned evaluation still counts.
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
            phases: EvaluationPhases::default(),
        };
        let lane = match lane {
            Lane::Platform => HostLane::Platform,
            Lane::Tenant => HostLane::Tenant,
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
            let _held = busy;
            runtime.evaluate(EvaluationRequest::new(&policy.compiled, &snapshot, &limits).in_lane(lane))
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
        let runtime = self.runtime.clone();
        let text = params.to_string();
        // The runtime admits a parameter check into the tenants' lane.
        let verdict = tokio::task::spawn_blocking(move || {
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
        if let Some(binary) = &self.probe {
            self.probe_compile(binary, &wasm).await?;
        }
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
            gpu_limit: 0,
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
