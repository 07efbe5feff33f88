//! Services priced per token (`docs/token-services.md`): replicas whose inference server the agent
//! reads in vLLM's metric format. What each read says is kept per replica ([`ingest`]); from those
//! rows come the service's load in tokens per second (each heartbeat), whether a replica serves
//! (its readiness endpoint answered for its attempt), the capacity a replica of each variant
//! sustains at the objective ([`Observed::estimate`], the declared capacity its prior) and what a
//! million tokens cost ([`report`]).

use std::collections::{BTreeSet, HashMap};

use airtime_protocol::serving::{ReplicaSample, ServingEndpoints, ServingObjective};
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::model::{ReplicaVariant, WHOLE_GPU_MILLI};

/// A service's serving: its objective and where the agent reads each replica.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServingSpec {
    pub objective: ServingObjective,
    /// Answers 200 once a replica can serve; until then the replica does not count (vLLM: `/health`).
    #[serde(default = "default_ready_path")]
    pub ready_path: String,
    /// Prometheus text in vLLM's metric names (vLLM: `/metrics`).
    #[serde(default = "default_metrics_path")]
    pub metrics_path: String,
}

fn default_ready_path() -> String {
    ServingEndpoints::default().ready_path
}

fn default_metrics_path() -> String {
    ServingEndpoints::default().metrics_path
}

impl ServingSpec {
    pub fn endpoints(&self) -> ServingEndpoints {
        ServingEndpoints { ready_path: self.ready_path.clone(), metrics_path: self.metrics_path.clone() }
    }

    pub fn check(&self) -> Result<(), String> {
        self.objective.check()?;
        self.endpoints().check()
    }
}

/// A read older than this no longer stands for its replica's load.
pub const FRESH: TimeDelta = TimeDelta::seconds(15);
/// What the learned capacity looks back over.
pub const LEARN_WINDOW: TimeDelta = TimeDelta::hours(1);
/// Saturated windows at the objective needed before their median replaces the declared capacity.
pub const MIN_SATURATED: i64 = 5;

#[derive(sqlx::FromRow)]
struct Replica {
    id: Uuid,
    service_id: Uuid,
    replica_variant: ReplicaVariant,
    serving: sqlx::types::Json<ServingSpec>,
}

/// Keeps what the agent of `node_id` read from its serving replicas: a row per replica it runs for
/// a token-priced service (others' samples are ignored: a node speaks only for its own work), a
/// ready replica's attempt marked ready, and each touched service's load written from the latest
/// read of every replica. One transaction. Returns the rows kept.
pub async fn ingest(db: &PgPool, node_id: Uuid, samples: &[ReplicaSample]) -> sqlx::Result<usize> {
    let ids: Vec<Uuid> = samples.iter().map(|s| s.workload_id).collect();
    let replicas: Vec<Replica> = sqlx::query_as(
        "SELECT w.id, w.service_id, w.replica_variant, s.serving FROM workloads w JOIN services s ON s.id = w.service_id \
         WHERE w.id = ANY($1) AND w.node_id = $2 AND w.state IN ('scheduled', 'running') AND s.serving IS NOT NULL",
    )
    .bind(&ids)
    .bind(node_id)
    .fetch_all(db)
    .await?;
    if replicas.is_empty() {
        return Ok(0);
    }
    let by_id: HashMap<Uuid, &Replica> = replicas.iter().map(|r| (r.id, r)).collect();
    let mut rows = SampleRows::default();
    let mut ready = Vec::new();
    let mut services = BTreeSet::new();
    for sample in samples {
        let Some(replica) = by_id.get(&sample.workload_id) else { continue };
        services.insert(replica.service_id);
        if sample.ready {
            ready.push(replica.id);
        }
        rows.push(replica, sample);
    }
    let kept = rows.workload.len();
    let mut tx = db.begin().await?;
    rows.insert(&mut tx, node_id).await?;
    sqlx::query(
        "UPDATE workloads SET ready_attempt = attempt WHERE id = ANY($1) AND node_id = $2 \
           AND ready_attempt IS DISTINCT FROM attempt",
    )
    .bind(&ready)
    .bind(node_id)
    .execute(&mut *tx)
    .await?;
    let services: Vec<Uuid> = services.into_iter().collect();
    write_loads(&mut tx, &services).await?;
    tx.commit().await?;
    Ok(kept)
}

/// The columns of the rows one heartbeat adds, for one `INSERT … SELECT FROM unnest`.
#[derive(Default)]
struct SampleRows {
    service: Vec<Uuid>,
    workload: Vec<Uuid>,
    variant: Vec<String>,
    ready: Vec<bool>,
    window_s: Vec<Option<f64>>,
    running: Vec<Option<f64>>,
    waiting: Vec<Option<f64>>,
    kv: Vec<Option<f64>>,
    prompt: Vec<Option<f64>>,
    generation: Vec<Option<f64>>,
    finished: Vec<Option<f64>>,
    ttft: Vec<Option<f64>>,
    tpot: Vec<Option<f64>>,
    request: Vec<Option<f64>>,
    pressure: Vec<Option<f64>>,
    saturated: Vec<Option<bool>>,
}

impl SampleRows {
    fn push(&mut self, replica: &Replica, sample: &ReplicaSample) {
        let m = sample.metrics.as_ref();
        self.service.push(replica.service_id);
        self.workload.push(replica.id);
        self.variant.push(replica.replica_variant.as_str().to_owned());
        self.ready.push(sample.ready);
        self.window_s.push(m.map(|m| m.window_s));
        self.running.push(m.map(|m| m.requests_running));
        self.waiting.push(m.map(|m| m.requests_waiting));
        self.kv.push(m.and_then(|m| m.kv_cache_usage));
        self.prompt.push(m.map(|m| m.prompt_tokens));
        self.generation.push(m.map(|m| m.generation_tokens));
        self.finished.push(m.map(|m| m.requests_finished));
        self.ttft.push(m.and_then(|m| m.ttft_p95_ms));
        self.tpot.push(m.and_then(|m| m.tpot_p95_ms));
        self.request.push(m.and_then(|m| m.request_p95_ms));
        self.pressure.push(m.and_then(|m| replica.serving.objective.pressure(m)));
        self.saturated.push(m.map(|m| m.saturated()));
    }

    async fn insert(&self, conn: &mut PgConnection, node_id: Uuid) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO replica_samples (service_id, workload_id, node_id, variant, ready, window_s, running, waiting, \
                 kv_cache_usage, prompt_tokens, generation_tokens, requests_finished, ttft_p95_ms, tpot_p95_ms, \
                 request_p95_ms, pressure, saturated) \
             SELECT s, w, $1, v, r, ws, ru, wa, kv, pt, gt, rf, tt, tp, rq, pr, sa \
             FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::bool[], $6::float8[], $7::float8[], $8::float8[], \
                         $9::float8[], $10::float8[], $11::float8[], $12::float8[], $13::float8[], $14::float8[], \
                         $15::float8[], $16::float8[], $17::bool[]) \
                  AS x(s, w, v, r, ws, ru, wa, kv, pt, gt, rf, tt, tp, rq, pr, sa)",
        )
        .bind(node_id)
        .bind(&self.service)
        .bind(&self.workload)
        .bind(&self.variant)
        .bind(&self.ready)
        .bind(&self.window_s)
        .bind(&self.running)
        .bind(&self.waiting)
        .bind(&self.kv)
        .bind(&self.prompt)
        .bind(&self.generation)
        .bind(&self.finished)
        .bind(&self.ttft)
        .bind(&self.tpot)
        .bind(&self.request)
        .bind(&self.pressure)
        .bind(&self.saturated)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

/// The latest read of one placed replica.
#[derive(Debug, sqlx::FromRow)]
struct Latest {
    service_id: Uuid,
    window_s: Option<f64>,
    running: Option<f64>,
    waiting: Option<f64>,
    tokens: Option<f64>,
    declared: f64,
}

/// The load one replica's latest read asks for, in tokens per second: what it served, scaled up by
/// the requests waiting behind the ones it runs (a queue is demand the replica did not serve); a
/// replica that served nothing while requests waited asks for a whole replica's declared capacity.
fn replica_demand(l: &Latest) -> (f64, f64) {
    let (Some(window), Some(running), Some(waiting), Some(tokens)) = (l.window_s, l.running, l.waiting, l.tokens)
    else {
        return (0.0, 0.0);
    };
    let served = if window > 0.0 { tokens / window } else { 0.0 };
    let demand = if served <= 1e-9 && waiting >= 1.0 {
        l.declared
    } else {
        served * ((running + waiting) / running.max(1.0)).max(1.0)
    };
    (demand, served)
}

/// Writes each service's load now (a `service_loads` row in tokens per second) from the latest
/// fresh read of each of its placed replicas.
async fn write_loads(conn: &mut PgConnection, services: &[Uuid]) -> sqlx::Result<()> {
    let latest: Vec<Latest> = sqlx::query_as(
        "SELECT DISTINCT ON (r.workload_id) r.service_id, r.window_s, r.running, r.waiting, \
                r.prompt_tokens + r.generation_tokens AS tokens, \
                CASE WHEN r.variant = 'cpu' THEN COALESCE((s.cpu_variant->>'capacity')::float8, s.capacity) \
                     ELSE s.capacity END AS declared \
         FROM replica_samples r JOIN workloads w ON w.id = r.workload_id AND w.node_id = r.node_id \
           AND w.state IN ('scheduled', 'running') JOIN services s ON s.id = r.service_id \
         WHERE r.service_id = ANY($1) AND r.at > now() - make_interval(secs => $2) \
         ORDER BY r.workload_id, r.at DESC",
    )
    .bind(services)
    .bind(FRESH.num_seconds() as f64)
    .fetch_all(&mut *conn)
    .await?;
    let mut totals: HashMap<Uuid, (f64, f64, f64, f64)> = services.iter().map(|s| (*s, (0.0, 0.0, 0.0, 0.0))).collect();
    for l in &latest {
        let (demand, served) = replica_demand(l);
        let t = totals.entry(l.service_id).or_default();
        t.0 += demand;
        t.1 += served;
        t.2 += l.running.unwrap_or(0.0);
        t.3 += l.waiting.unwrap_or(0.0);
    }
    for (service, (demand, served, running, waiting)) in totals {
        sqlx::query(
            "INSERT INTO service_loads (service_id, value, tokens_per_s, concurrent_requests, queue_depth) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(service)
        .bind(demand.clamp(0.0, 1e12))
        .bind(served.clamp(0.0, 1e12))
        .bind(running.clamp(0.0, 1e12))
        .bind(waiting.clamp(0.0, f64::from(i32::MAX)) as i32)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// What the last hour of reads says about one variant's capacity.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct Observed {
    /// Reads with a window.
    pub samples: i64,
    /// Reads with requests waiting (the replica served all it could) that held the objective.
    pub saturated_held: i64,
    /// Their median tokens per second.
    pub median_saturated_held: Option<f64>,
    /// The most a replica served in a window that held the objective.
    pub most_held: Option<f64>,
    /// The least a replica would have served at the objective in a window that broke it while it
    /// served: what
    /// it served divided by how far past the objective it was (its pressure).
    pub least_broken: Option<f64>,
}

/// The capacity a replica of a variant sustains at the objective, tokens per second, and why.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LearnedCapacity {
    pub tokens_per_s: f64,
    /// What the service declared: the prior.
    pub declared_tokens_per_s: f64,
    /// "measured: …", "declared", "declared, raised to …", "below …".
    pub basis: String,
    /// Reads of the last hour with a window.
    pub samples: i64,
    /// Of them, saturated ones that held the objective.
    pub saturated_samples: i64,
}

impl Observed {
    /// The declared capacity is the prior. Once [`MIN_SATURATED`] saturated windows held the
    /// objective, their median is the capacity: a saturated replica serves all it can, and it did
    /// so at the objective. Until then what was observed bounds the prior: a window that held the
    /// objective proves at least what it served; a busy window that broke it by a factor (its
    /// pressure, say 3× the target) proves the replica serves at most that share of what it served
    /// at the objective — latency is taken to fall in proportion to the load, which is how a
    /// batching server's decode time behaves — and the capacity is kept a tenth below the least of
    /// those. A variant whose latency breaks the objective even lightly loaded is thus priced out.
    pub fn estimate(&self, declared: f64) -> LearnedCapacity {
        let (tokens_per_s, basis) = match self.median_saturated_held {
            Some(median) if self.saturated_held >= MIN_SATURATED => {
                (median, format!("measured: median of {} saturated windows at the objective", self.saturated_held))
            }
            _ => {
                let mut c = declared;
                let mut basis = "declared".to_string();
                if let Some(most) = self.most_held.filter(|&m| m > c) {
                    c = most;
                    basis = format!("declared, raised to the most served at the objective ({})", tokens(most));
                }
                if let Some(least) = self.least_broken.filter(|&l| c > 0.9 * l) {
                    c = 0.9 * least;
                    basis = format!(
                        "below the least served while breaking the objective, scaled to it ({})",
                        tokens(least)
                    );
                }
                (c, basis)
            }
        };
        LearnedCapacity {
            // Never nothing: a variant that barely serves is priced out, not divided by zero.
            tokens_per_s: tokens_per_s.max(declared * 0.01).max(1e-3),
            declared_tokens_per_s: declared,
            basis,
            samples: self.samples,
            saturated_samples: self.saturated_held,
        }
    }
}

fn tokens(v: f64) -> String {
    format!("{v:.0} tokens/s")
}

/// The last hour's reads of each (service, variant) among `services`.
pub async fn observed(
    conn: &mut PgConnection,
    services: &[Uuid],
) -> sqlx::Result<HashMap<(Uuid, ReplicaVariant), Observed>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        service_id: Uuid,
        variant: ReplicaVariant,
        #[sqlx(flatten)]
        observed: Observed,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "WITH r AS (SELECT service_id, variant, pressure, saturated, \
                           (prompt_tokens + generation_tokens) / window_s AS tps \
                    FROM replica_samples WHERE service_id = ANY($1) AND window_s IS NOT NULL \
                      AND at > now() - make_interval(secs => $2)) \
         SELECT service_id, variant, count(*) AS samples, \
                count(*) FILTER (WHERE saturated AND pressure <= 1) AS saturated_held, \
                percentile_cont(0.5) WITHIN GROUP (ORDER BY tps) FILTER (WHERE saturated AND pressure <= 1) \
                  AS median_saturated_held, \
                max(tps) FILTER (WHERE pressure <= 1) AS most_held, \
                min(tps / pressure) FILTER (WHERE pressure > 1 AND tps > 0) \
                  AS least_broken \
         FROM r GROUP BY service_id, variant",
    )
    .bind(services)
    .bind(LEARN_WINDOW.num_seconds() as f64)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| ((r.service_id, r.variant), r.observed)).collect())
}

/// What the scheduling loop knows of the priced services' reads and the fleet's prices, read again
/// every [`Learned::MAX_AGE`] or when the priced services change. The learned capacity is an hour's
/// statistic, so half a minute of staleness changes nothing, while the read scans that hour: 260 ms
/// for 20 services of 10 replicas at 2 s heartbeats, too much for every cycle.
#[derive(Debug, Default)]
pub struct Learned {
    read_at: Option<std::time::Instant>,
    services: Vec<Uuid>,
    pub observed: HashMap<(Uuid, ReplicaVariant), Observed>,
    pub prices: FleetPrices,
}

impl Learned {
    pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30);

    /// Reads again when stale or when `services` (sorted) are not the ones last read.
    pub async fn refresh(&mut self, conn: &mut PgConnection, services: &[Uuid]) -> sqlx::Result<()> {
        let fresh = self.read_at.is_some_and(|at| at.elapsed() <= Self::MAX_AGE) && self.services == services;
        if !fresh {
            self.observed = observed(&mut *conn, services).await?;
            self.prices = prices(&mut *conn).await?;
            self.services = services.to_vec();
            self.read_at = Some(std::time::Instant::now());
        }
        Ok(())
    }
}

/// The fleet's prices of an hour: a GPU (its node's cost shared by its GPUs, averaged over the
/// priced GPU nodes) and a thousandth of a core on a CPU node (averaged over the priced CPU
/// nodes). `None` where no node of the kind is priced.
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct FleetPrices {
    pub gpu_hour: Option<f64>,
    pub cpu_milli_hour: Option<f64>,
}

pub async fn prices(conn: &mut PgConnection) -> sqlx::Result<FleetPrices> {
    sqlx::query_as(
        "SELECT (SELECT avg(n.cost_per_hour / g.gpus) FROM nodes n \
                   JOIN LATERAL (SELECT count(*)::float8 AS gpus FROM gpus x WHERE x.node_id = n.id AND x.present) g \
                     ON g.gpus > 0 \
                 WHERE n.cost_per_hour IS NOT NULL AND n.state <> 'lost') AS gpu_hour, \
                (SELECT avg(n.cost_per_hour / n.cpu_millis) FROM nodes n \
                 WHERE n.cost_per_hour IS NOT NULL AND n.cpu_millis > 0 AND n.state <> 'lost' \
                   AND NOT EXISTS (SELECT 1 FROM gpus x WHERE x.node_id = n.id AND x.present)) AS cpu_milli_hour",
    )
    .fetch_one(&mut *conn)
    .await
}

/// A service's serving as the API shows it, over the last hour.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServingReport {
    pub objective: ServingObjective,
    pub ready_path: String,
    pub metrics_path: String,
    /// Seconds the totals and the history cover.
    pub window_s: f64,
    /// Tokens per second now (prompt and generated), the latest reads summed.
    pub tokens_per_s: f64,
    /// Tokens served in the window.
    pub tokens: f64,
    /// What its replicas cost in the window: GPU replicas their grants as billed (a quarter GPU as
    /// a quarter) at their node's price, CPU replicas their share of their node's cores.
    pub cost: f64,
    pub cost_per_million_tokens: Option<f64>,
    /// What the same tokens would have cost on GPU replicas only, at the GPU variant's capacity
    /// and the fleet's GPU price.
    pub gpu_only_cost_per_million_tokens: Option<f64>,
    pub variants: Vec<VariantServing>,
    /// One point per five minutes over the window, oldest first.
    pub history: Vec<ServingPoint>,
}

/// One variant's serving.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VariantServing {
    pub variant: ReplicaVariant,
    /// Replicas placed now.
    pub replicas: i64,
    /// Of them, those whose readiness endpoint answered.
    pub ready_replicas: i64,
    /// Tokens per second now, the latest reads summed.
    pub tokens_per_s: f64,
    /// The worst of the latest reads' p95s, ms.
    pub ttft_p95_ms: Option<f64>,
    pub tpot_p95_ms: Option<f64>,
    pub request_p95_ms: Option<f64>,
    /// The worst observed p95 ÷ its target (1 or less: the objective holds).
    pub pressure: Option<f64>,
    /// Tokens per second one replica sustains at the objective.
    pub capacity: LearnedCapacity,
    pub tokens: f64,
    pub cost: f64,
    pub cost_per_million_tokens: Option<f64>,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ServingPoint {
    pub at: DateTime<Utc>,
    pub tokens_per_s: f64,
    pub cost_per_million_tokens: Option<f64>,
    pub pressure: Option<f64>,
}

/// The shape of the service [`report`] needs.
#[derive(Debug, Clone, Copy)]
struct ServiceShape<'a> {
    id: Uuid,
    spec: &'a ServingSpec,
    /// Declared capacities, tokens per second.
    gpu_capacity: f64,
    cpu_capacity: Option<f64>,
    /// GPUs one GPU replica holds, thousandths.
    gpu_milli_per_replica: u32,
}

/// The service's serving report, read from its stored definition (the API's detail and /metrics).
pub async fn report_for(
    db: &PgPool,
    id: Uuid,
    spec: &ServingSpec,
    template: &serde_json::Value,
    cpu_variant: Option<&serde_json::Value>,
    capacity: f64,
    with_history: bool,
) -> sqlx::Result<ServingReport> {
    let gpu_milli_per_replica = serde_json::from_value::<super::ReplicaTemplate>(template.clone())
        .map_or(WHOLE_GPU_MILLI, |t| t.resources.gpu_milli_per_replica());
    let cpu_capacity = cpu_variant.and_then(|c| c.get("capacity")).and_then(serde_json::Value::as_f64);
    let shape = ServiceShape { id, spec, gpu_capacity: capacity, cpu_capacity, gpu_milli_per_replica };
    report(db, &shape, with_history).await
}

/// Per million tokens: `None` without tokens.
fn per_million(cost: f64, tokens: f64) -> Option<f64> {
    (tokens > 0.0).then(|| cost / tokens * 1e6)
}

/// What the service's (`$1`) replicas of `variant` cost between the SQL expressions `from` and
/// `to`, as a scalar subquery: GPU replicas their grants' overlap, as billed, at their GPU's price
/// (`usage::GPU_COST`); CPU replicas the time each ran (its latest attempt) at its share of its
/// node's cores. One definition for the report's totals and its history.
fn cost_sql(variant: ReplicaVariant, from: &str, to: &str) -> String {
    match variant {
        ReplicaVariant::Gpu => format!(
            "(SELECT COALESCE(sum(extract(epoch FROM least(COALESCE(h.released_at, now()), {to}) \
                 - greatest(h.granted_at, {from})) / 3600.0 * h.milli / 1000.0 * ({gpu_cost})), 0)::float8 \
              FROM gpu_grant_history h JOIN workloads w ON w.id = h.workload_id JOIN gpus g ON g.id = h.gpu_id \
              JOIN nodes n ON n.id = g.node_id \
              WHERE w.service_id = $1 AND w.replica_variant = 'gpu' AND h.granted_at < {to} \
                AND COALESCE(h.released_at, now()) > {from})",
            gpu_cost = crate::usage::GPU_COST
        ),
        ReplicaVariant::Cpu => format!(
            "(SELECT COALESCE(sum(extract(epoch FROM least(COALESCE(w.finished_at, now()), {to}) \
                 - greatest(w.started_at, {from})) / 3600.0 * COALESCE(n.cost_per_hour, 0) * w.cpu_millis \
                 / greatest(n.cpu_millis, 1)), 0)::float8 \
              FROM workloads w JOIN nodes n ON n.id = w.node_id \
              WHERE w.service_id = $1 AND w.replica_variant = 'cpu' AND w.started_at IS NOT NULL \
                AND w.started_at < {to} AND COALESCE(w.finished_at, now()) > {from})"
        ),
    }
}

async fn replica_cost(
    conn: &mut PgConnection,
    service: Uuid,
    variant: ReplicaVariant,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<f64> {
    let sql = format!("SELECT {}", cost_sql(variant, "$2", "$3"));
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(service).bind(from).bind(to).fetch_one(&mut *conn).await
}

/// The service's serving over the last hour: now, per variant, in total and against GPUs only.
async fn report(db: &PgPool, service: &ServiceShape<'_>, with_history: bool) -> sqlx::Result<ServingReport> {
    let mut conn = db.acquire().await?;
    let (now,): (DateTime<Utc>,) = sqlx::query_as("SELECT now()").fetch_one(&mut *conn).await?;
    let from = now - LEARN_WINDOW;
    let observed = observed(&mut conn, &[service.id]).await?;
    let prices = prices(&mut conn).await?;
    #[derive(sqlx::FromRow)]
    struct Now {
        variant: ReplicaVariant,
        replicas: i64,
        ready_replicas: i64,
        tokens_per_s: Option<f64>,
        ttft_p95_ms: Option<f64>,
        tpot_p95_ms: Option<f64>,
        request_p95_ms: Option<f64>,
        pressure: Option<f64>,
        tokens: Option<f64>,
    }
    let rows: Vec<Now> = sqlx::query_as(
        "WITH placed AS (SELECT id, replica_variant AS variant, ready_attempt = attempt AS ready FROM workloads \
                         WHERE service_id = $1 AND state IN ('scheduled', 'running')), \
              latest AS (SELECT DISTINCT ON (r.workload_id) r.* FROM replica_samples r JOIN placed p ON p.id = r.workload_id \
                         WHERE r.service_id = $1 AND r.at > now() - make_interval(secs => $2) \
                         ORDER BY r.workload_id, r.at DESC), \
              variants AS (SELECT unnest(ARRAY['gpu', 'cpu']) AS variant) \
         SELECT v.variant, \
                (SELECT count(*) FROM placed p WHERE p.variant = v.variant) AS replicas, \
                (SELECT count(*) FROM placed p WHERE p.variant = v.variant AND p.ready) AS ready_replicas, \
                (SELECT sum((l.prompt_tokens + l.generation_tokens) / l.window_s) FROM latest l \
                   WHERE l.variant = v.variant AND l.window_s IS NOT NULL) AS tokens_per_s, \
                (SELECT max(l.ttft_p95_ms) FROM latest l WHERE l.variant = v.variant) AS ttft_p95_ms, \
                (SELECT max(l.tpot_p95_ms) FROM latest l WHERE l.variant = v.variant) AS tpot_p95_ms, \
                (SELECT max(l.request_p95_ms) FROM latest l WHERE l.variant = v.variant) AS request_p95_ms, \
                (SELECT max(l.pressure) FROM latest l WHERE l.variant = v.variant) AS pressure, \
                (SELECT sum(r.prompt_tokens + r.generation_tokens) FROM replica_samples r \
                   WHERE r.service_id = $1 AND r.variant = v.variant AND r.at > $3 AND r.at <= $4) AS tokens \
         FROM variants v",
    )
    .bind(service.id)
    .bind(FRESH.num_seconds() as f64)
    .bind(from)
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    let mut variants = Vec::new();
    for row in rows {
        let declared = match row.variant {
            ReplicaVariant::Gpu => service.gpu_capacity,
            ReplicaVariant::Cpu => match service.cpu_capacity {
                Some(c) => c,
                None => continue,
            },
        };
        let cost = replica_cost(&mut conn, service.id, row.variant, from, now).await?;
        let tokens = row.tokens.unwrap_or(0.0);
        variants.push(VariantServing {
            variant: row.variant,
            replicas: row.replicas,
            ready_replicas: row.ready_replicas,
            tokens_per_s: row.tokens_per_s.unwrap_or(0.0),
            ttft_p95_ms: row.ttft_p95_ms,
            tpot_p95_ms: row.tpot_p95_ms,
            request_p95_ms: row.request_p95_ms,
            pressure: row.pressure,
            capacity: observed.get(&(service.id, row.variant)).cloned().unwrap_or_default().estimate(declared),
            tokens,
            cost,
            cost_per_million_tokens: per_million(cost, tokens),
        });
    }
    let tokens: f64 = variants.iter().map(|v| v.tokens).sum();
    let cost: f64 = variants.iter().map(|v| v.cost).sum();
    let gpu_capacity = variants
        .iter()
        .find(|v| v.variant == ReplicaVariant::Gpu)
        .map_or(service.gpu_capacity, |v| v.capacity.tokens_per_s);
    // The replica-hours GPU replicas alone would have needed for these tokens, at their price.
    let gpu_only = prices.gpu_hour.map(|gpu_hour| {
        let replica_hours = tokens / (gpu_capacity * 3600.0);
        replica_hours * gpu_hour * f64::from(service.gpu_milli_per_replica) / f64::from(WHOLE_GPU_MILLI)
    });
    let history = if with_history { history(&mut conn, service.id, from, now).await? } else { Vec::new() };
    Ok(ServingReport {
        objective: service.spec.objective,
        ready_path: service.spec.ready_path.clone(),
        metrics_path: service.spec.metrics_path.clone(),
        window_s: LEARN_WINDOW.num_seconds() as f64,
        tokens_per_s: variants.iter().map(|v| v.tokens_per_s).sum(),
        tokens,
        cost,
        cost_per_million_tokens: per_million(cost, tokens),
        gpu_only_cost_per_million_tokens: gpu_only.and_then(|c| per_million(c, tokens)),
        variants,
        history,
    })
}

/// Five-minute points, in one query: tokens per second, the cost of a million tokens in the bucket
/// (both variants' replicas, priced by [`cost_sql`] as the totals are) and the worst pressure read.
async fn history(
    conn: &mut PgConnection,
    service: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<ServingPoint>> {
    #[derive(sqlx::FromRow)]
    struct Bucket {
        at: DateTime<Utc>,
        seconds: f64,
        tokens: Option<f64>,
        pressure: Option<f64>,
        cost: f64,
    }
    let sql = format!(
        "WITH b AS (SELECT f, least(f + interval '5 minutes', $3) AS t \
                    FROM generate_series($2::timestamptz, $3::timestamptz - interval '1 microsecond', \
                                         interval '5 minutes') f) \
         SELECT b.f AS at, extract(epoch FROM b.t - b.f)::float8 AS seconds, \
                (SELECT sum(r.prompt_tokens + r.generation_tokens) FROM replica_samples r \
                   WHERE r.service_id = $1 AND r.at > b.f AND r.at <= b.t) AS tokens, \
                (SELECT max(r.pressure) FROM replica_samples r \
                   WHERE r.service_id = $1 AND r.at > b.f AND r.at <= b.t) AS pressure, \
                {} + {} AS cost \
         FROM b ORDER BY b.f",
        cost_sql(ReplicaVariant::Gpu, "b.f", "b.t"),
        cost_sql(ReplicaVariant::Cpu, "b.f", "b.t"),
    );
    let buckets: Vec<Bucket> =
        sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(service).bind(from).bind(to).fetch_all(&mut *conn).await?;
    Ok(buckets
        .into_iter()
        .map(|b| {
            let tokens = b.tokens.unwrap_or(0.0);
            ServingPoint {
                at: b.at,
                tokens_per_s: if b.seconds > 0.0 { tokens / b.seconds } else { 0.0 },
                cost_per_million_tokens: per_million(b.cost, tokens),
                pressure: b.pressure,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_capacity_is_the_prior_until_saturated_windows_at_the_objective_measure_it() {
        let none = Observed::default().estimate(1000.0);
        assert_eq!((none.tokens_per_s, none.basis.as_str()), (1000.0, "declared"));
        let raised = Observed { samples: 20, most_held: Some(1400.0), ..Default::default() }.estimate(1000.0);
        assert_eq!(raised.tokens_per_s, 1400.0);
        let broken = Observed { samples: 20, least_broken: Some(500.0), ..Default::default() }.estimate(1000.0);
        assert_eq!(broken.tokens_per_s, 450.0);
        assert!(broken.basis.starts_with("below the least served while breaking"), "{}", broken.basis);
        let measured = Observed {
            samples: 40,
            saturated_held: 6,
            median_saturated_held: Some(800.0),
            most_held: Some(900.0),
            least_broken: Some(700.0),
        }
        .estimate(1000.0);
        assert_eq!(measured.tokens_per_s, 800.0);
        assert!(measured.basis.starts_with("measured: median of 6"), "{}", measured.basis);
        let barely = Observed { samples: 5, least_broken: Some(1.0), ..Default::default() }.estimate(1000.0);
        assert_eq!(barely.tokens_per_s, 10.0, "never below a hundredth of the declared capacity");
    }

    #[test]
    fn a_queue_is_demand_the_replica_did_not_serve() {
        let l = |running, waiting, tokens| Latest {
            service_id: Uuid::nil(),
            window_s: Some(2.0),
            running: Some(running),
            waiting: Some(waiting),
            tokens: Some(tokens),
            declared: 500.0,
        };
        assert_eq!(replica_demand(&l(4.0, 0.0, 2000.0)), (1000.0, 1000.0));
        assert_eq!(replica_demand(&l(4.0, 4.0, 2000.0)), (2000.0, 1000.0));
        assert_eq!(replica_demand(&l(0.0, 3.0, 0.0)), (500.0, 0.0));
        assert_eq!(replica_demand(&l(0.0, 0.0, 0.0)), (0.0, 0.0));
        // Read between requests: nothing runs now, but what it served is demand.
        assert_eq!(replica_demand(&l(0.0, 0.0, 600.0)), (300.0, 300.0));
    }
}
