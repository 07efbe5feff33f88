//! A test policy for the host's tests: each parameter makes it take one path of the SDK inside a
//! real wasm module, so the host tests see what a Rust policy really does.
//!
//! - `{"panic": "text"}`: panics with `text` (the SDK's panic hook must report it via `airtime.fail`).
//! - `{"fail": "text"}`: returns `Err(Failure)` with `text`.
//! - `{"allocate_mb": n}`: allocates and touches `n` MiB (for the memory limit).
//! - `{"log_lines": n}`: logs `n` lines.
//! - otherwise: keeps every pending workload pending with a reason that echoes what the guest
//!   decoded (name, tenant, shape, models, node count), so tests check the encoding end to end.

use airtime_policy_sdk::prelude::*;

/// See the crate docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SdkProbe;

airtime_policy_sdk::export_policy!(SdkProbe);

impl Policy for SdkProbe {
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
