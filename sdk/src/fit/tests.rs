//! The toolkit against brute force: each index answers what a pass over the whole fleet answers.

use super::*;
use crate::abi::{Sharing, decode_snapshot};
use crate::testing::{SnapshotFixture, SplitMix64};

/// A small deterministic generator, so the randomised checks are the same every run.
struct Random(SplitMix64);

impl Random {
    fn below(&mut self, n: u64) -> u32 {
        self.0.below(n) as u32
    }
}

#[test]
fn nodes_by_free_groups_tightest_first_and_moves_nodes_and_versions() {
    let mut index = NodesByFree::new(5, [(3, 2), (0, 8), (1, 2), (4, 0)]);
    let groups: Vec<Vec<u32>> = index.at_least(1).map(<[u32]>::to_vec).collect();
    assert_eq!(groups, vec![vec![], vec![1, 3], vec![], vec![], vec![], vec![], vec![], vec![0]]);
    assert_eq!(index.version(3), 1);
    index.moved(3, 2, 1);
    assert_eq!(index.at_least(1).next(), Some(&[3][..]));
    assert_eq!(index.free_of(3), Some(1));
    assert_eq!(index.version(3), 2);
    // No change, no new version.
    index.moved(1, 2, 2);
    assert_eq!(index.version(1), 1);
    // Node 2 was never indexed: it stays out, though its version moves.
    index.moved(2, 4, 3);
    assert_eq!(index.free_of(2), None);
    assert!(index.at_least(0).flatten().all(|&n| n != 2));
    assert_eq!(index.version(9), 0);
}

#[test]
fn nodes_by_free_of_ready_nodes_follows_the_plan() {
    let bytes = SnapshotFixture::new()
        .node("a", 4, "H100", 81920)
        .node_with("down", 8, "H100", 81920, |n| n.state = crate::abi::NodeState::Draining)
        .cpu_node("cpu", 64_000, 262_144)
        .running("r", "a", &[0, 1, 2])
        .encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let plan = Plan::new(&snapshot);
    let index = NodesByFree::of_ready_nodes(&snapshot, &plan);
    assert_eq!(index.free_of(0), Some(1));
    assert_eq!(index.free_of(1), None, "a node that takes no work is not indexed");
    assert_eq!(index.free_of(2), Some(0));
}

/// The brute-force answer [`RoomIndex::best`] must give.
fn best_by_scan(rooms: &[NodeRoom], cpu: u32, memory: u32, can_run: impl Fn(u32) -> bool) -> Option<u32> {
    rooms
        .iter()
        .filter(|r| r.cpu >= cpu && r.memory >= memory && can_run(r.node))
        .min_by_key(|r| (r.tier, r.cpu, r.tie, r.node))
        .map(|r| r.node)
}

#[test]
fn room_index_answers_what_a_scan_answers_as_rooms_shrink_and_grow() {
    let mut random = Random(SplitMix64::new(11));
    for round in 0..50 {
        let nodes = 1 + random.below(40) as usize;
        let mut rooms: Vec<NodeRoom> = (0..nodes as u32)
            .map(|node| NodeRoom {
                node,
                tier: u64::from(random.below(3)) * 100,
                cpu: random.below(10) * 1000,
                memory: random.below(8) * 1024,
                tie: u64::from(random.below(3)),
            })
            .collect();
        let mut index = RoomIndex::new(nodes, rooms.iter().copied());
        for _ in 0..200 {
            let (cpu, memory) = (random.below(10) * 1000, random.below(8) * 1024);
            let odd_only = random.below(2) == 0;
            let can_run = |node: u32| !odd_only || node % 2 == 1;
            assert_eq!(index.best(cpu, memory, can_run), best_by_scan(&rooms, cpu, memory, can_run), "round {round}");
            // Change one node's room, up or down.
            let node = random.below(nodes as u64) as usize;
            let room = &mut rooms[node];
            room.cpu = random.below(10) * 1000;
            room.memory = random.below(8) * 1024;
            room.tie = u64::from(random.below(3));
            index.set(room.node, room.cpu, room.memory, room.tie);
            assert_eq!(index.room(room.node), Some((room.cpu, room.memory)));
        }
    }
}

#[test]
fn room_index_ignores_nodes_it_does_not_index() {
    let mut index = RoomIndex::new(3, [NodeRoom { node: 0, tier: 0, cpu: 4000, memory: 1024, tie: 0 }]);
    index.set(1, 64_000, 65_536, 0);
    assert_eq!(index.room(1), None);
    assert_eq!(index.best(8000, 0, |_| true), None);
    assert_eq!(index.best(2000, 512, |_| true), Some(0));
}

#[test]
fn tightest_gpus_takes_the_tightest_fitting_free_gpus_and_prefers_one_nvlink_domain() {
    // n0: devices 0-3 with 4, 2, 6, 1 GiB in use; devices 0-1 NVLink group 1, 2-3 group 2.
    let used = [4096, 2048, 6144, 1024];
    let mut fixture = SnapshotFixture::new().node("n0", 4, "H100", 81920).pending("two", 2, 40960);
    for (device, &mb) in used.iter().enumerate() {
        fixture = fixture.gpu("n0", device as u32, |g| {
            g.memory_used_mb = mb;
            g.nvlink_group = Some(1 + device as u32 / 2);
        });
    }
    let bytes = fixture.running("holds-2", "n0", &[2]).encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let plan = Plan::new(&snapshot);
    let gpus = TightestGpus::new(&snapshot);
    let order: Vec<u32> = gpus.node(0).iter().map(|c| c.device_index).collect();
    assert_eq!(order, vec![2, 0, 1, 3], "least free memory first");
    let need = snapshot.workloads[0].gpu_need();
    let allowed = gpus.kinds_allowed(&need);
    let mut scratch = Vec::new();

    // Without NVLink preference: the tightest free ones, devices 0 and 1 (2 is held).
    let fit = gpus.fit(&plan, 0, &need, &allowed, false, &mut scratch).unwrap();
    let waste: u64 = (81920 - 4096 - 40960) + (81920 - 2048 - 40960);
    assert_eq!(fit, NodeFit { domain: None, waste });
    let taken = gpus.take(&plan, 0, &need, &allowed, false, &mut scratch).unwrap();
    assert_eq!((taken.gpus, taken.one_nvlink_domain), (vec![0, 1], true));

    // With it: group 1 has both of its GPUs free, group 2 only one: group 1.
    let fit = gpus.fit(&plan, 0, &need, &allowed, true, &mut scratch).unwrap();
    assert_eq!(fit.domain, Some(1));

    // Three GPUs: no domain has three, so the tightest three, across domains.
    let three = GpuNeed { count: 3, ..need.clone() };
    let taken = gpus.take(&plan, 0, &three, &allowed, true, &mut scratch).unwrap();
    assert_eq!((taken.gpus, taken.one_nvlink_domain), (vec![0, 1, 3], false));
    // Four: only three are free.
    let four = GpuNeed { count: 4, ..need };
    assert_eq!(gpus.fit(&plan, 0, &four, &allowed, true, &mut scratch), None);
}

#[test]
fn tightest_gpus_follows_the_plan_models_and_mig_rules() {
    let bytes = SnapshotFixture::new()
        .node("h", 2, " h100 ", 81920)
        .mig_node("m", "A100", &[("1g.10gb", 10240), ("3g.40gb", 40960)])
        .pending("whole", 1, 8192)
        .pending_with("pinned", 1, 8192, |w| w.gpu_models = "A100".to_owned())
        .pending_with("slice", 1, 8192, |w| w.mig_profile = "1G.10GB".to_owned())
        .encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let mut plan = Plan::new(&snapshot);
    let gpus = TightestGpus::new(&snapshot);
    let mut scratch = Vec::new();
    let fits_on = |plan: &Plan<'_, '_>, workload: usize, scratch: &mut Vec<Candidate>| -> Vec<u32> {
        let need = snapshot.workloads[workload].gpu_need();
        let allowed = gpus.kinds_allowed(&need);
        (0..2).filter(|&node| gpus.fit(plan, node, &need, &allowed, true, scratch).is_some()).collect()
    };
    // Whole-GPU work never goes to a MIG instance; MIG work only to an instance of its profile.
    assert_eq!(fits_on(&plan, 0, &mut scratch), vec![0]);
    assert_eq!(fits_on(&plan, 1, &mut scratch), Vec::<u32>::new(), "no whole A100");
    assert_eq!(fits_on(&plan, 2, &mut scratch), vec![1]);
    // The same answers as `GpuNeed::fits`, GPU by GPU.
    for workload in &snapshot.workloads {
        let need = workload.gpu_need();
        let allowed = gpus.kinds_allowed(&need);
        for node in 0..2 {
            for candidate in gpus.node(node) {
                let gpu = &snapshot.gpus[candidate.gpu as usize];
                assert_eq!(
                    allowed[candidate.kind as usize],
                    need.allows_model(gpu.model) && need.device_kind_fits(gpu)
                );
            }
        }
    }
    // Once the plan takes the 1g instance, the slice no longer fits.
    plan.place(2, 1, vec![2], "slice").unwrap();
    assert_eq!(fits_on(&plan, 2, &mut scratch), Vec::<u32>::new());
    assert_eq!(snapshot.gpus[2].sharing, Sharing::Mig);
}

#[test]
fn fit_memo_remembers_per_need_and_version_and_never_retries_a_miss() {
    let bytes = SnapshotFixture::new()
        .node("n", 1, "H100", 81920)
        .pending("a", 2, 1024)
        .pending("b", 2, 1024)
        .pending_with("c", 2, 1024, |w| w.mig_profile = "1g.10gb".to_owned())
        .pending("d", 1, 1024)
        .encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    let mut memo = FitMemo::new(snapshot.nodes.len());
    let ids: Vec<usize> = snapshot.workloads.iter().map(|w| memo.id(w)).collect();
    assert_eq!(ids, vec![0, 0, 1, 2], "same GPUs, same need; a MIG profile is another");
    assert_eq!(memo.needs(), 3);

    let mut calls = 0;
    let mut look = |memo: &mut FitMemo<'_>, id, version, answer: Option<u64>| {
        memo.waste(id, 0, version, || {
            calls += 1;
            answer
        })
    };
    assert_eq!(look(&mut memo, 0, 1, Some(5)), Some(5));
    assert_eq!(look(&mut memo, 0, 1, Some(9)), Some(5), "same version: remembered");
    assert_eq!(look(&mut memo, 0, 2, Some(9)), Some(9), "new version: looked at again");
    assert_eq!(look(&mut memo, 2, 1, None), None);
    assert_eq!(look(&mut memo, 2, 2, Some(1)), None, "a miss stays a miss");
    assert_eq!(calls, 3);
    assert!(memo.need(2).never_fits(0));
    assert!(!memo.need(0).never_fits(0), "it fitted");
    assert!(!memo.need(1).never_fits(0), "never looked at");
    // A node or need out of range is never remembered.
    assert_eq!(memo.waste(0, 7, 1, || Some(3)), Some(3));
    assert_eq!(memo.waste(9, 0, 1, || Some(4)), Some(4));
}

#[test]
fn gpu_lists_and_numbers_read_as_reasons_print_them() {
    let bytes = SnapshotFixture::new().node("n", 3, "H100", 81920).encode();
    let snapshot = decode_snapshot(&bytes).unwrap();
    assert_eq!(gpu_list(&snapshot, &[2]), "GPU [2]");
    assert_eq!(gpu_list(&snapshot, &[0, 2]), "GPUs [0,2]");
    let mut text = String::new();
    for n in [0, 7, 10, 4_294_967_295] {
        push_number(&mut text, n);
        text.push(' ');
    }
    assert_eq!(text, "0 7 10 4294967295 ");
}
