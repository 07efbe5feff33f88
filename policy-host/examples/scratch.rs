#![allow(clippy::print_stdout)]
use std::time::Instant;
use airtime_policy_sdk::abi::{decode_snapshot, encode_decisions, decode_decisions};
use airtime_policy_sdk::guest::{Context, Policy};
use airtime_policy_sdk::testing::SnapshotFixture;
use priority_best_fit::PriorityBestFit;
fn main() {
    for (nodes, pending) in [(100, 1000), (1000, 10000)] {
        let bytes = SnapshotFixture::synthetic_fleet(nodes, 8, pending, 7).encode();
        for _ in 0..3 {
            let t = Instant::now();
            let s = decode_snapshot(&bytes).unwrap();
            let t1 = t.elapsed();
            let mut ctx = Context::new(s.params);
            let d = PriorityBestFit.evaluate(&s, &mut ctx).unwrap();
            let t2 = t.elapsed();
            let out = encode_decisions(&d);
            let t3 = t.elapsed();
            let back = decode_decisions(&out).unwrap();
            let t4 = t.elapsed();
            println!("{nodes} {pending}: decode {:?} evaluate {:?} encode {:?} host-decode {:?} ({} decisions)", t1, t2 - t1, t3 - t2, t4 - t3, back.len());
        }
    }
}
