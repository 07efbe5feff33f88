//! A test policy for the host's tests: each parameter makes it take one path of the SDK inside a
//! real wasm module, so the host tests see what a Rust policy really does.
//!
//! - `{"panic": "text"}`: panics with `text` (the SDK's panic hook must report it via `airtime.fail`).
//! - `{"fail": "text"}`: returns `Err(Failure)` with `text`.
//! - `{"allocate_mb": n}`: allocates and touches `n` MiB (for the memory limit).
//! - `{"log_lines": n}`: logs `n` lines.
//! - `{"churn": n}`: `n` rounds of allocating, growing, shrinking, zero-allocating and freeing
//!   blocks of many sizes, checking every live block's contents throughout (for the SDK's
//!   allocator); logs "churn: … checked".
//! - `{"refuse_params": "text"}`: its `airtime_validate_params` refuses the parameters with `text`.
//! - otherwise: keeps every pending workload pending with a reason that echoes what the guest
//!   decoded (name, tenant, shape, models, node count), so tests check the encoding end to end.

use airtime_policy_sdk::prelude::*;

/// See the crate docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SdkProbe;

airtime_policy_sdk::export_policy!(SdkProbe);

impl Policy for SdkProbe {
    /// `{"refuse_params": "text"}` refuses the parameters with `text`; anything else is accepted.
    fn validate_params(&self, params: &airtime_policy_sdk::params::Params<'_>) -> Result<(), Failure> {
        match params.get::<String>("refuse_params")? {
            Some(text) => Err(Failure::new(text)),
            None => Ok(()),
        }
    }

    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
        if let Some(text) = ctx.params().get::<String>("panic")? {
            panic!("{text}");
        }
        if let Some(text) = ctx.params().get::<String>("fail")? {
            return Err(Failure::new(text));
        }
        if let Some(mb) = ctx.params().get::<u32>("allocate_mb")? {
            let mut block = vec![0u8; mb as usize * (1 << 20)];
            for page in block.chunks_mut(4096) {
                page[0] = 1;
            }
            ctx.info(format_args!("allocated {} bytes", block.iter().map(|&b| b as usize).sum::<usize>() * 4096));
        }
        if let Some(rounds) = ctx.params().get::<u32>("churn")? {
            let summary = churn(rounds)?;
            ctx.info(summary);
        }
        for line in 0..ctx.param_or("log_lines", 0u32)? {
            ctx.debug(format_args!("line {line}"));
        }
        let mut plan = Plan::new(snapshot);
        for (index, workload) in snapshot.pending() {
            let tenant = snapshot.tenant(workload.tenant).map_or("?", |t| t.name);
            let reason = format!(
                "{} of {tenant}: {}×{} MiB [{}], {} nodes, {} GPUs, now {}",
                workload.name,
                workload.gpu_count,
                workload.gpu_memory_mb,
                workload.gpu_models,
                snapshot.nodes.len(),
                snapshot.gpus.len(),
                snapshot.now_ms
            );
            plan.keep_pending(index, reason)?;
        }
        Ok(plan.into_decisions())
    }
}

/// Exercises the allocator: a pool of live blocks of pseudo-random sizes (16 bytes to 64 KiB, a few
/// up to 1 MiB), each filled with a pattern of its own; every round replaces, grows or shrinks some,
/// or takes zeroed memory (which must read as zeros even where a freed block is reused), and checks
/// that no live block was touched by another's allocation.
fn churn(rounds: u32) -> Result<String, Failure> {
    struct Block {
        bytes: Vec<u8>,
        seed: u8,
    }
    let pattern = |seed: u8, i: usize| seed.wrapping_add((i % 251) as u8);
    let check = |block: &Block| block.bytes.iter().enumerate().all(|(i, &b)| b == pattern(block.seed, i));
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut pool: Vec<Block> = Vec::new();
    let mut allocated: u64 = 0;
    for round in 0..rounds {
        let roll = random();
        let size = match roll % 16 {
            0 => (roll >> 8) as usize % (1 << 20),
            1..=4 => (roll >> 8) as usize % (64 << 10),
            _ => (roll >> 8) as usize % 512,
        };
        let seed = (roll >> 40) as u8;
        let slot = (roll >> 48) as usize % 64;
        match (roll >> 4) % 4 {
            // A zeroed block: must be all zeros, whatever was freed before.
            0 => {
                let zeros = vec![0u8; size];
                if zeros.iter().any(|&b| b != 0) {
                    return Err(Failure::new(format!("round {round}: vec![0; {size}] is not all zeros")));
                }
                let mut bytes = zeros;
                bytes.iter_mut().enumerate().for_each(|(i, b)| *b = pattern(seed, i));
                put(&mut pool, slot, Block { bytes, seed });
            }
            // Grow a live block by pushing (reallocating, in place or not).
            1 if slot < pool.len() => {
                let block = &mut pool[slot];
                for _ in 0..size.min(4096) {
                    let i = block.bytes.len();
                    block.bytes.push(pattern(block.seed, i));
                }
            }
            // Shrink a live block.
            2 if slot < pool.len() => {
                let block = &mut pool[slot];
                block.bytes.truncate(block.bytes.len() / 2);
                block.bytes.shrink_to_fit();
            }
            _ => {
                let bytes: Vec<u8> = (0..size).map(|i| pattern(seed, i)).collect();
                put(&mut pool, slot, Block { bytes, seed });
            }
        }
        allocated += size as u64;
        if round % 256 == 0
            && let Some(bad) = pool.iter().position(|b| !check(b))
        {
            return Err(Failure::new(format!("round {round}: block {bad} was overwritten")));
        }
    }
    if let Some(bad) = pool.iter().position(|b| !check(b)) {
        return Err(Failure::new(format!("at the end: block {bad} was overwritten")));
    }
    let live: usize = pool.iter().map(|b| b.bytes.len()).sum();
    Ok(format!(
        "churn: {rounds} rounds, {allocated} bytes allocated, {live} live in {} blocks, all checked",
        pool.len()
    ))
}

/// Puts `block` at `slot` (dropping what was there), or at the end while the pool is short.
fn put<T>(pool: &mut Vec<T>, slot: usize, block: T) {
    match pool.get_mut(slot) {
        Some(old) => *old = block,
        None => pool.push(block),
    }
}
