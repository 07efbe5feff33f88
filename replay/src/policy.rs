//! Policies as the simulator runs them: compiled by the production runtime (`airtime-policy-host`),
//! evaluated through the scheduling core's [`Evaluator`] trait — the same modules, limits and
//! failure handling as the control plane's policy catalogue, with the built-in
//! `priority-best-fit` standing in for a failing platform policy as it does there.

use std::sync::Arc;

use airtime_policy_host::{
    CompiledPolicy, EvaluationRequest, ParamsVerdict, PolicyLimits, PolicyLog, PolicyRuntime, RuntimeConfig,
};
use airtime_scheduler::cycle::{Evaluated, Evaluator, Lane, PolicyHandle};
use anyhow::{Context, bail};
use uuid::Uuid;

/// The control plane's fallback (`control-plane/src/policies.rs`, `FALLBACK_POLICY`).
pub const FALLBACK: &str = "priority-best-fit";

/// Airtime's built-in policies and the baselines, as `(name, module)`.
pub fn known() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    use airtime_builtin_policies::{ALL, BASELINES, FILL_BASELINES};
    ALL.iter().chain(BASELINES.iter()).chain(FILL_BASELINES.iter()).copied()
}

/// The policies a run compares when none are named: every built-in, then every baseline (not the
/// fill experiment's placement baselines).
pub fn default_names() -> Vec<String> {
    use airtime_builtin_policies::{ALL, BASELINES};
    ALL.iter().chain(BASELINES.iter()).map(|(name, _)| (*name).to_owned()).collect()
}

/// A compiled policy with its parameters.
#[derive(Clone)]
pub struct SimPolicy {
    id: Uuid,
    pub name: String,
    compiled: CompiledPolicy,
    params: Arc<str>,
    builtin: bool,
}

impl PolicyHandle for SimPolicy {
    fn version(&self) -> Uuid {
        self.id
    }
    fn label(&self) -> String {
        format!("{} v1", self.name)
    }
    fn builtin(&self) -> bool {
        self.builtin
    }
    fn params(&self) -> &str {
        &self.params
    }
}

/// The production runtime and the fallback.
pub struct Catalog {
    runtime: PolicyRuntime,
    limits: PolicyLimits,
    fallback: SimPolicy,
}

impl Catalog {
    pub fn new() -> anyhow::Result<Catalog> {
        let runtime = PolicyRuntime::new(RuntimeConfig::default()).context("starting the policy runtime")?;
        let limits = PolicyLimits::default();
        let bytes = known().find(|(n, _)| *n == FALLBACK).map(|(_, b)| b).context("the fallback is built in")?;
        let compiled = runtime.compile(bytes).context("compiling the built-in fallback")?;
        let fallback =
            SimPolicy { id: Uuid::new_v4(), name: FALLBACK.into(), compiled, params: "{}".into(), builtin: true };
        Ok(Catalog { runtime, limits, fallback })
    }

    /// A policy from `NAME[=PARAMS]` or `PATH.wasm[=PARAMS]`: a built-in or baseline by name, or a
    /// module file; the parameters are offered to the policy's own check as an activation would.
    pub fn load(&self, spec: &str) -> anyhow::Result<SimPolicy> {
        let (what, params) = match spec.split_once('=') {
            Some((what, params)) => (what, params),
            None => (spec, "{}"),
        };
        let (name, bytes, builtin) = if what.ends_with(".wasm") {
            let bytes = std::fs::read(what).with_context(|| format!("reading the policy module {what}"))?;
            let name = std::path::Path::new(what).file_stem().and_then(|s| s.to_str()).unwrap_or(what).to_owned();
            (name, std::borrow::Cow::Owned(bytes), false)
        } else {
            let Some((_, bytes)) = known().find(|(n, _)| *n == what) else {
                bail!("no policy named {what} (known: {}; or give a .wasm path)", default_names().join(", "));
            };
            (what.to_owned(), std::borrow::Cow::Borrowed(bytes), true)
        };
        self.module(&name, &bytes, params, builtin)
    }

    /// A policy from its module's bytes (a stored version, say), named `name`, with `params`
    /// offered to the policy's own check as an activation would.
    pub fn module(&self, name: &str, bytes: &[u8], params: &str, builtin: bool) -> anyhow::Result<SimPolicy> {
        serde_json::from_str::<serde_json::Value>(params)
            .with_context(|| format!("the parameters of {name} are not JSON: {params}"))?;
        let compiled = self.runtime.compile(bytes).with_context(|| format!("the policy module {name}"))?;
        match self.runtime.validate_params(&compiled, params, &self.limits) {
            Ok(ParamsVerdict::Refused(message)) => bail!("{name} refused its parameters: {message}"),
            Ok(_) => {}
            Err(err) => bail!("{name} failed checking its parameters: {err}"),
        }
        Ok(SimPolicy { id: Uuid::new_v4(), name: name.to_owned(), compiled, params: params.into(), builtin })
    }
}

impl Evaluator for Catalog {
    type Policy = SimPolicy;
    type Log = PolicyLog;

    async fn evaluate(&self, policy: &SimPolicy, snapshot: Vec<u8>, _: Lane, _: Option<&str>) -> Evaluated<PolicyLog> {
        let record = self.runtime.evaluate(EvaluationRequest::new(&policy.compiled, &snapshot, &self.limits));
        Evaluated { output: record.result.map_err(|e| (e.kind(), e.to_string())), logs: record.logs }
    }

    async fn fallback(&self) -> Result<SimPolicy, String> {
        Ok(self.fallback.clone())
    }
}
