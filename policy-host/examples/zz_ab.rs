#![allow(clippy::print_stdout, clippy::unwrap_used, unsafe_code)]
//! scratch A/B: zz_ab ROUNDS file1.wasm file2.wasm ... ; interleaved with native.
use std::time::{Duration, Instant};
use airtime_policy_sdk::guest::evaluate_encoded;
use airtime_policy_sdk::testing::SnapshotFixture;

fn cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args[1].parse().unwrap();
    let nodes: u32 = std::env::var("NODES").ok().map(|s| s.parse().unwrap()).unwrap_or(1000);
    let pending: u32 = std::env::var("PENDING").ok().map(|s| s.parse().unwrap()).unwrap_or(10000);
    let bytes = SnapshotFixture::synthetic_fleet(nodes, 8, pending, 7).encode();
    let rt = airtime_policy_host::PolicyRuntime::new(Default::default()).unwrap();
    let lim = airtime_policy_host::PolicyLimits::default();
    let pols: Vec<_> = args[2..].iter().map(|p| (p.clone(), rt.compile(&std::fs::read(p).unwrap()).unwrap())).collect();
    let mut wall = vec![Vec::new(); pols.len() + 1];
    let mut cpus = vec![Vec::new(); pols.len() + 1];
    let mut mem = vec![0; pols.len()];
    for _ in 0..rounds {
        for (i, (_, p)) in pols.iter().enumerate() {
            let (t, c) = (Instant::now(), cpu());
            let e = rt.evaluate(p, &bytes, &lim).unwrap();
            wall[i].push(t.elapsed()); cpus[i].push(cpu() - c); mem[i] = e.memory_bytes;
        }
        let (t, c) = (Instant::now(), cpu());
        evaluate_encoded(&priority_best_fit::PriorityBestFit, &bytes, &mut Vec::new()).unwrap();
        wall[pols.len()].push(t.elapsed()); cpus[pols.len()].push(cpu() - c);
    }
    let med = |v: &mut Vec<Duration>| { v.sort(); v[v.len() / 2].as_secs_f64() * 1e3 };
    let nw = med(&mut wall[pols.len()]); let nc = med(&mut cpus[pols.len()]);
    for (i, (name, _)) in pols.iter().enumerate() {
        let (w, c) = (med(&mut wall[i]), med(&mut cpus[i]));
        println!("{name:40} wall {w:7.2} ms ({:.2}x)  cpu {c:7.2} ms ({:.2}x)  mem {} MiB", w / nw, c / nc, mem[i] >> 20);
    }
    println!("{:40} wall {nw:7.2} ms          cpu {nc:7.2} ms", "native");
}
#[allow(dead_code)]
fn counts() {}
#[allow(dead_code)]
fn xx() {}
