//! GPU sharing as a policy's own tests see it (ABI 1.2): shares of a shared GPU add up to at most
//! the whole GPU, whole-GPU work never lands on a shared GPU, memory slices must fit, and MIG
//! instances go only to work asking for their profile. The same checker runs in the host.

use airtime_policy_sdk::abi::{Decision, Sharing, decode_snapshot};
use airtime_policy_sdk::check::check_decisions;
use airtime_policy_sdk::frag::{FragPlacer, Workmix};
use airtime_policy_sdk::plan::Plan;
use airtime_policy_sdk::testing::SnapshotFixture;

fn shared_fleet() -> SnapshotFixture {
    SnapshotFixture::new()
        .node("shared", 2, "H100", 81920)
        .sharing("shared", Sharing::Mps)
        .pending_share("q1", 250, 10240)
        .pending_share("q2", 250, 10240)
        .pending_share("q3", 250, 10240)
        .pending_share("q4", 250, 10240)
        .pending_share("q5", 250, 10240)
        .pending("whole", 1, 0)
}

#[test]
fn four_quarters_fill_one_gpu_and_a_fifth_is_refused() {
    let fixture = shared_fleet();
    let bytes = fixture.encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let quarters: Vec<Decision<'_>> = (0..5).map(|w| Decision::place(w, 0, vec![0], "quarter")).collect();
    let problems = check_decisions(&snapshot, &quarters);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].workload, 4);
    assert!(problems[0].problem.contains("has 0/1000 unshared"), "{}", problems[0].problem);
}

#[test]
fn whole_gpu_work_is_refused_on_a_gpu_that_is_shared() {
    let fixture = shared_fleet().running_share("serving", "shared", 1, 250, 1024);
    let bytes = fixture.encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let whole = snapshot.workloads.iter().position(|w| w.name == "whole").unwrap() as u32;
    let problems =
        check_decisions(&snapshot, &[Decision::place(0, 0, vec![0], "q"), Decision::place(whole, 0, vec![0], "w")]);
    assert!(problems[0].problem.contains("taken by an earlier decision"), "{problems:?}");
    let problems = check_decisions(&snapshot, &[Decision::place(whole, 0, vec![1], "w")]);
    assert!(problems[0].problem.contains("held by serving"), "{problems:?}");
}

#[test]
fn a_memory_slice_that_does_not_fit_is_refused_with_its_reason() {
    let fixture = SnapshotFixture::new()
        .node("shared", 1, "H100", 81920)
        .sharing("shared", Sharing::TimeSlicing)
        .running_share("big", "shared", 0, 250, 70000)
        .pending_share("slice", 250, 20000);
    let bytes = fixture.encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let problems = check_decisions(&snapshot, &[Decision::place(1, 0, vec![0], "slice")]);
    assert_eq!(
        problems[0].problem,
        "place: GPU 0 (shared device 0) has 11920 MiB unreserved; workload slice's memory slice is 20000 MiB"
    );
    let plan = Plan::new(&snapshot);
    assert!(!plan.fits_share(&snapshot.workloads[1], 0));
}

#[test]
fn a_share_on_a_gpu_that_is_not_shared_takes_it_whole() {
    let fixture =
        SnapshotFixture::new().node("plain", 1, "H100", 81920).pending_share("a", 250, 0).pending_share("b", 250, 0);
    let bytes = fixture.encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let problems =
        check_decisions(&snapshot, &[Decision::place(0, 0, vec![0], "a"), Decision::place(1, 0, vec![0], "b")]);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].problem.contains("taken by an earlier decision"), "{problems:?}");
}

#[test]
fn mig_instances_serve_only_their_profile() {
    let fixture = SnapshotFixture::new()
        .mig_node("mig", "H100", &[("3g.40gb", 40960), ("1g.10gb", 10240)])
        .pending_with("small", 1, 0, |w| w.mig_profile = "1G.10GB".into())
        .pending("whole", 1, 0);
    let bytes = fixture.encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let problems = check_decisions(&snapshot, &[Decision::place(0, 0, vec![0], "wrong profile")]);
    assert_eq!(
        problems[0].problem,
        "place: GPU 0 (mig device 0) is a MIG 3g.40gb instance; workload small asks for 1G.10GB"
    );
    assert!(check_decisions(&snapshot, &[Decision::place(0, 0, vec![1], "its profile")]).is_empty());
    let problems = check_decisions(&snapshot, &[Decision::place(1, 0, vec![0], "whole on MIG")]);
    assert!(problems[0].problem.contains("asks for no MIG instance"), "{problems:?}");
    let plan = Plan::new(&snapshot);
    assert_eq!(plan.first_fit(0, [0]), Some((0, vec![1])));
    assert_eq!(plan.first_fit(1, [0]), None, "whole-GPU work does not fit a MIG node");
}

#[test]
fn the_plan_places_shares_where_they_fragment_least() {
    // GPU 0 has 700 free, GPU 1 has 500 free; the mix is mostly half-GPU work. A 200 share
    // placed by best fit would go to GPU 1 and leave 300, which no half-GPU task can use.
    let fixture = SnapshotFixture::new()
        .node("shared", 2, "H100", 81920)
        .sharing("shared", Sharing::Mps)
        .running_share("a", "shared", 0, 300, 0)
        .running_share("b", "shared", 1, 500, 0)
        .pending_share("h1", 500, 0)
        .pending_share("h2", 500, 0)
        .pending_share("small", 200, 0);
    let bytes = fixture.encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let plan = Plan::new(&snapshot);
    let mut placer = FragPlacer::new(Workmix::of(&snapshot));
    let small = 4;
    let placement = placer.place(&plan, small, |node| node == 0, |_| true).expect("room");
    assert_eq!((placement.node, placement.gpus), (0, vec![0]));
    let mut plan = plan;
    plan.place(small, 0, vec![0], "least fragmenting").unwrap();
    assert_eq!(plan.free_milli(0), 500);
    assert_eq!(plan.free_gpu_count(0), 0);
}
