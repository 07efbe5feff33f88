//! Weng et al.'s fill experiment on a slice of the Alibaba trace: the protocol's arrivals, the
//! curve it reads, and what a placement policy makes of a cluster where nothing leaves.

use airtime_protocol::sharing::GpuSharing;
use airtime_sim::fill::{self, Protocol, STEPS};
use airtime_sim::policy::Catalog;

/// The first GPU nodes of the trace and its default pod list, as `fill` reads them.
fn slice() -> Option<Protocol> {
    let dir = airtime_sim::shared_traces();
    if !dir.join("alibaba-openb-2023").is_dir() {
        eprintln!("SKIPPED: no real traces at {} (set AIRTIME_TRACES)", dir.display());
        return None;
    }
    let options = airtime_sim::alibaba::Options {
        max_nodes: Some(24),
        gpu_sharing: GpuSharing::Mps,
        fill: true,
        ..airtime_sim::alibaba::Options::default()
    };
    let (fleet, trace) =
        airtime_sim::alibaba::load(&dir.join("alibaba-openb-2023"), &options).expect("the trace loads");
    let capacity_milli = fleet.gpu_count() * 1000;
    Some(Protocol { pods_file: "openb_pod_list_default.csv".into(), fleet, pods: trace.workloads, capacity_milli })
}

#[test]
fn filling_a_slice_of_the_cluster_the_fragmentation_aware_default_places_more_than_random_and_never_gives_back() {
    let Some(protocol) = slice() else { return };
    let catalog = Catalog::new().expect("the runtime starts");
    let random = fill::run(&catalog, &protocol, &catalog.load("weng-random").unwrap(), 1, 1.3).expect("fills");
    let default = fill::run(&catalog, &protocol, &catalog.load("slo-first").unwrap(), 1, 1.3).expect("fills");
    for run in [&random, &default] {
        assert_eq!(run.allocated_pct.len(), STEPS);
        assert!(run.at(130) <= 100.0 && run.at(100) > 50.0, "{}: {:?}", run.policy, run.allocated_pct);
        // Demand past the cluster's size: some pods find no place.
        assert!(run.unplaced > 0, "{}", run.policy);
    }
    // Random never preempts: its curve only climbs.
    assert!(random.allocated_pct.windows(2).all(|w| w[1] + 1e-9 >= w[0]), "{:?}", random.allocated_pct);
    assert_eq!(random.preemptions, 0);
    // The default keeps what it placed as demand goes on arriving: no preemption gives capacity back.
    assert!(default.at(130) + 1e-9 >= default.at(100), "{} at 100%, {} at 130%", default.at(100), default.at(130));
    assert!(default.at(100) >= random.at(100), "slo-first {} against random {}", default.at(100), random.at(100));
}
