#![allow(clippy::print_stdout, clippy::unwrap_used)]
use std::time::Instant;
use airtime_policy_sdk::guest::evaluate_encoded;
use airtime_policy_sdk::testing::SnapshotFixture;
use wasmtime::*;


struct Count;
static BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static REALLOCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Count {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 { BYTES.fetch_add(l.size() as u64, std::sync::atomic::Ordering::Relaxed); CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed); unsafe { std::alloc::System.alloc(l) } }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) { unsafe { std::alloc::System.dealloc(p, l) } }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 { REALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed); BYTES.fetch_add(n.saturating_sub(l.size()) as u64, std::sync::atomic::Ordering::Relaxed); unsafe { std::alloc::System.realloc(p, l, n) } }
}
#[global_allocator]
static A: Count = Count;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let mode = std::env::args().nth(2).unwrap_or_default();
    let iters: usize = std::env::args().nth(3).map(|s| s.parse().unwrap()).unwrap_or(100);
    let bytes = SnapshotFixture::synthetic_fleet(1000, 8, 10_000, 7).encode();
    if mode == "native" {
        let t = Instant::now();
        for _ in 0..iters { evaluate_encoded(&priority_best_fit::PriorityBestFit, &bytes, &mut Vec::new()).unwrap(); }
        println!("native {:?}/iter", t.elapsed() / iters as u32);
        let (b0, c0, r0) = (BYTES.load(std::sync::atomic::Ordering::Relaxed), CALLS.load(std::sync::atomic::Ordering::Relaxed), REALLOCS.load(std::sync::atomic::Ordering::Relaxed));
        evaluate_encoded(&priority_best_fit::PriorityBestFit, &bytes, &mut Vec::new()).unwrap();
        println!("one eval: {} bytes in {} allocs, {} reallocs", BYTES.load(std::sync::atomic::Ordering::Relaxed)-b0, CALLS.load(std::sync::atomic::Ordering::Relaxed)-c0, REALLOCS.load(std::sync::atomic::Ordering::Relaxed)-r0);
        return;
    }
    if mode == "golden" {
        use std::hash::{Hash, Hasher};
        for (n, p, seed) in [(10u32, 100u32, 1u64), (100, 1000, 2), (1000, 10000, 7), (50, 3000, 3), (300, 500, 4)] {
            let mut f = SnapshotFixture::synthetic_fleet(n, 8, p, seed);
            if seed == 3 { f = f.params(r#"{"max_placements": 200, "prefer_nvlink": false}"#); }
            let out = evaluate_encoded(&priority_best_fit::PriorityBestFit, &f.encode(), &mut Vec::new()).unwrap();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            out.hash(&mut h);
            println!("{n} {p} {seed}: {} bytes, hash {:x}", out.len(), h.finish());
        }
        return;
    }
    if mode == "parts" {
        use airtime_policy_sdk::abi::*;
        use airtime_policy_sdk::guest::{Policy, Context};
        let med = |mut v: Vec<std::time::Duration>| { v.sort(); v[v.len()/2] };
        let (mut a, mut b, mut c, mut d) = (vec![], vec![], vec![], vec![]);
        for _ in 0..iters {
            let t = Instant::now();
            let snap = decode_snapshot(&bytes).unwrap();
            a.push(t.elapsed());
            let t = Instant::now();
            let mut ctx = Context::new(snap.params);
            let dec = priority_best_fit::PriorityBestFit.evaluate(&snap, &mut ctx).unwrap();
            b.push(t.elapsed());
            let t = Instant::now();
            let out = try_encode_decisions(&dec).unwrap();
            c.push(t.elapsed());
            let t = Instant::now();
            let back = decode_decisions(&out).unwrap();
            d.push(t.elapsed());
            assert_eq!(back.len(), dec.len());
        }
        println!("decode snapshot {:?}, evaluate {:?}, encode decisions {:?}, host decode decisions {:?}", med(a), med(b), med(c), med(d));
        return;
    }
    if mode == "host" {
        let rt = airtime_policy_host::PolicyRuntime::new(Default::default()).unwrap();
        let pol = rt.compile(&std::fs::read(&path).unwrap()).unwrap();
        let lim = airtime_policy_host::PolicyLimits::default();
        let mut ts = Vec::new();
        let mut mem = 0;
        for _ in 0..iters { let t = Instant::now(); let e = rt.evaluate(&pol, &bytes, &lim).unwrap(); ts.push(t.elapsed()); mem = e.memory_bytes; }
        ts.sort();
        println!("host median {:?} min {:?} mem {} MiB", ts[ts.len()/2], ts[0], mem >> 20);
        return;
    }
    let mut cfg = Config::new();
    if mode == "pooled" { cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(PoolingAllocationConfig::new())); cfg.memory_init_cow(true); }
    cfg.profiler(ProfilingStrategy::PerfMap);
    cfg.cranelift_opt_level(OptLevel::Speed);
    if mode != "noepoch" { cfg.epoch_interruption(true); }
    let engine = Engine::new(&cfg).unwrap();
    let module = Module::from_file(&engine, &path).unwrap();
    let mut linker: Linker<()> = Linker::new(&engine);
    linker.func_wrap("airtime", "log", |_: i32, _: i32, _: i32| {}).unwrap();
    linker.func_wrap("airtime", "fail", |_: i32, _: i32| -> Result<()> { bail!("fail") }).unwrap();
    let pre = linker.instantiate_pre(&module).unwrap();
    let t = Instant::now();
    let mut call = 0u128;
    for _ in 0..iters {
        let mut store = Store::new(&engine, ());
        store.set_epoch_deadline(1 << 40);
        let inst = pre.instantiate(&mut store).unwrap();
        let mem = inst.get_memory(&mut store, "memory").unwrap();
        let alloc = inst.get_typed_func::<i32, i32>(&mut store, "airtime_alloc").unwrap();
        let eval = inst.get_typed_func::<(i32, i32), i64>(&mut store, "airtime_evaluate").unwrap();
        let p = alloc.call(&mut store, bytes.len() as i32).unwrap();
        mem.data_mut(&mut store)[p as usize..p as usize + bytes.len()].copy_from_slice(&bytes);
        let c = Instant::now();
        eval.call(&mut store, (p, bytes.len() as i32)).unwrap();
        call += c.elapsed().as_nanos();
    }
    println!("wasm {:?}/iter, call alone {} us", t.elapsed() / iters as u32, call / iters as u128 / 1000);
}
