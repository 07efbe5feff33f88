//! Airtime's replay engine (`docs/simulator.md`): a workload trace on a simulated fleet in virtual
//! time through the production scheduling core — the second adapter of `airtime-scheduler`, beside
//! the control plane's PostgreSQL one — with real Wasm policies in the production runtime, scored.
//! The simulator's CLI (`airtime-sim`) and the control plane's what-if both run it; the trace
//! loaders, the generator and the plots are the CLI's alone.
//!
//! - [`format`]: the trace (JSON Lines) and fleet (JSON) formats, parsed strictly;
//! - [`policy`]: policies compiled and evaluated by `airtime-policy-host`, through the core's
//!   `Evaluator` trait;
//! - [`engine`]: the event-driven replay; [`services`]: elastic inference services in it (their
//!   demand reported, the core's autoscaler run every cycle) and the baselines they are compared
//!   with; [`score`]: what it measures.

pub mod engine;
pub mod format;
pub mod policy;
pub mod score;
pub mod services;

use anyhow::Context;

use crate::format::{FleetSpec, Trace};
use crate::policy::{Catalog, SimPolicy};
use crate::score::Scores;
use crate::services::ServiceMode;

/// The traces merged into one (workload ids and service names must stay unique; the replay checks).
pub fn merge(traces: Vec<Trace>) -> Trace {
    let mut all = Trace::default();
    for t in traces {
        all.workloads.extend(t.workloads);
        all.services.extend(t.services);
        all.node_downs.extend(t.node_downs);
    }
    all.workloads.sort_by(|a, b| a.arrive_s.cmp(&b.arrive_s).then_with(|| a.id.cmp(&b.id)));
    all
}

/// The tenants' own policies the fleet names, compiled (level 2 of every run).
pub fn tenant_policies(catalog: &Catalog, fleet: &FleetSpec) -> anyhow::Result<Vec<(usize, SimPolicy)>> {
    fleet
        .tenants
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.policy.as_ref().map(|p| (i, t, p)))
        .map(|(i, t, p)| Ok((i, catalog.load(p).with_context(|| format!("tenant {}'s policy", t.name))?)))
        .collect()
}

/// Every platform policy on every seed, and with services every way of running them in `modes`
/// (as the trace gives them when empty): the comparison's runs, in mode, policy then seed order.
#[allow(clippy::too_many_arguments)]
pub fn compare(
    catalog: &Catalog,
    fleet: &FleetSpec,
    trace: &Trace,
    policies: &[SimPolicy],
    seeds: &[u64],
    modes: &[ServiceMode],
    config: &engine::Config,
    mut progress: impl FnMut(&Scores),
) -> anyhow::Result<Vec<Scores>> {
    let tenants = tenant_policies(catalog, fleet)?;
    let modes = if trace.services.is_empty() || modes.is_empty() { &[ServiceMode::AsGiven][..] } else { modes };
    let mut runs = Vec::new();
    for &mode in modes {
        let trace = services::with_mode(trace, mode)?;
        for policy in policies {
            for &seed in seeds {
                let config = engine::Config { seed, ..config.clone() };
                let mut scores = engine::run(catalog, fleet, &trace, policy, &tenants, &config).with_context(|| {
                    format!("replaying with {} (seed {seed}, services {})", policy.name, mode.name())
                })?;
                if !trace.services.is_empty() {
                    scores.mode = mode.name().to_owned();
                }
                progress(&scores);
                runs.push(scores);
            }
        }
    }
    Ok(runs)
}

/// Shares every GPU node type's GPUs the way `sharing` says (`none`, `time_slicing`, `mps`): the
/// same fleet replayed with and without GPU sharing. MIG needs a layout per node type, so it is
/// refused here.
pub fn share_gpus(fleet: &mut FleetSpec, sharing: airtime_protocol::sharing::GpuSharing) -> anyhow::Result<()> {
    if sharing == airtime_protocol::sharing::GpuSharing::Mig {
        anyhow::bail!("MIG needs a layout per node type (`mig_layout` in the fleet file), not a flag");
    }
    for kind in fleet.node_types.iter_mut().filter(|k| k.gpus > 0) {
        kind.gpu_sharing = sharing;
        kind.mig_layout.clear();
    }
    Ok(())
}
