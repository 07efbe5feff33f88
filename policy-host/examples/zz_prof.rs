#![allow(clippy::print_stdout, clippy::unwrap_used)]
use std::time::Instant;
use airtime_policy_sdk::guest::evaluate_encoded;
use airtime_policy_sdk::testing::SnapshotFixture;
use wasmtime::*;

fn main() {
    let path = std::env::args().nth(1).unwrap();
    let mode = std::env::args().nth(2).unwrap_or_default();
    let iters: usize = std::env::args().nth(3).map(|s| s.parse().unwrap()).unwrap_or(100);
    let bytes = SnapshotFixture::synthetic_fleet(1000, 8, 10_000, 7).encode();
    if mode == "native" {
        let t = Instant::now();
        for _ in 0..iters { evaluate_encoded(&priority_best_fit::PriorityBestFit, &bytes, &mut Vec::new()).unwrap(); }
        println!("native {:?}/iter", t.elapsed() / iters as u32);
        return;
    }
    let mut cfg = Config::new();
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
