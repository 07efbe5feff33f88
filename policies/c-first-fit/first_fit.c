/*
 * c-first-fit: a complete Airtime scheduling policy in C, against sdk/c/airtime_policy.h only.
 *
 * For each pending workload of the scope, in snapshot order, it takes the first ready node that
 * has the workload's CPU and memory free and, for GPU work, `gpu_count` GPUs that are free (not
 * held, not taken earlier this cycle), of an allowed model, with `gpu_memory_mb` free by live
 * telemetry; the node's lowest-numbered such GPUs are used. CPU-only work (gpu_count 0) takes the
 * first ready node with CPU and memory room. A container workload (AIRTIME_WORKLOAD_FLAG_CONTAINER,
 * ABI 1.4) only goes to a node with a container engine (AIRTIME_NODE_FLAG_CONTAINERS). What fits
 * nowhere is kept pending with the reason.
 * CPU and memory taken by earlier placements of the cycle count, as the host counts them.
 *
 * In a tenant scope (snapshot scope_tenant set) it decides only that tenant's workloads.
 *
 * Build: scripts/build-c-policy.sh out.wasm
 */
#include "airtime_policy.h"

int32_t airtime_abi_version(void) { return (int32_t)AIRTIME_ABI_VERSION; }

int32_t airtime_alloc(int32_t len) { return airtime_default_alloc(len); }

/* What the decisions so far took: per node, the CPU and memory left; per GPU, whether taken. */
typedef struct cycle {
    uint32_t *cpu_free;
    uint32_t *memory_free;
    uint8_t *gpu_taken;
    uint32_t *chosen; /* scratch: the GPUs picked on the node being tried */
} cycle;

/* Picks `need` GPUs of node `n` (index `node`) that serve `w`, into c->chosen; how many it found
 * (stops at `need`). */
static uint32_t pick_gpus(const airtime_snapshot *s, const cycle *c, uint32_t node, const airtime_node *n,
                          const airtime_workload *w, uint32_t need) {
    uint32_t found = 0;
    for (uint32_t k = 0; k < n->gpu_count && found < need; k++) {
        uint32_t index = n->gpu_first + k;
        airtime_gpu g;
        if (!airtime_read_gpu(s, index, &g)) break; /* past the table: the host never sends that */
        if (g.node != node || g.holder != AIRTIME_NONE || c->gpu_taken[index]) continue;
        if (!airtime_model_allowed(w->gpu_models, g.model)) continue;
        if (airtime_gpu_memory_free_mb(&g) < w->gpu_memory_mb) continue;
        c->chosen[found++] = index;
    }
    return found;
}

/* "first fit on gpu-b: GPUs 0,1,2,3 (A100)": device indexes on the node, as tenants see them. */
static void place_reason(airtime_writer *out, const airtime_snapshot *s, const airtime_node *n, const cycle *c,
                         uint32_t gpus) {
    airtime_reason_cstr(out, "first fit on ");
    airtime_reason_str(out, n->name);
    if (gpus == 0) {
        airtime_reason_cstr(out, ": CPU only");
        return;
    }
    airtime_reason_cstr(out, gpus == 1 ? ": GPU " : ": GPUs ");
    airtime_gpu g;
    for (uint32_t i = 0; i < gpus; i++) {
        airtime_read_gpu(s, c->chosen[i], &g);
        if (i != 0) airtime_reason_cstr(out, ",");
        airtime_reason_u32(out, g.device_index);
    }
    airtime_read_gpu(s, c->chosen[0], &g);
    airtime_reason_cstr(out, " (");
    airtime_reason_str(out, airtime_str_trim(g.model));
    airtime_reason_cstr(out, ")");
}

/* "no ready node has 4 free GPUs with ≥ 30000 MiB (H100, A100) and 1000 mCPU, 4096 MiB free";
 * for a container workload, "no ready node runs containers" when none does, else "no ready node
 * that runs containers has …". */
static void pending_reason(airtime_writer *out, const airtime_workload *w, int any_engine) {
    int container = (w->flags & AIRTIME_WORKLOAD_FLAG_CONTAINER) != 0;
    if (container && !any_engine) {
        airtime_reason_cstr(out, "no ready node runs containers");
        return;
    }
    airtime_reason_cstr(out, container ? "no ready node that runs containers has " : "no ready node has ");
    if (w->gpu_count != 0) {
        airtime_reason_u32(out, w->gpu_count);
        airtime_reason_cstr(out, w->gpu_count == 1 ? " free GPU with \xE2\x89\xA5 " : " free GPUs with \xE2\x89\xA5 ");
        airtime_reason_u32(out, w->gpu_memory_mb);
        airtime_reason_cstr(out, " MiB");
        airtime_str models = airtime_str_trim(w->gpu_models);
        if (models.len != 0) {
            airtime_reason_cstr(out, " (");
            airtime_reason_str(out, models);
            airtime_reason_cstr(out, ")");
        }
        airtime_reason_cstr(out, " and ");
    }
    airtime_reason_u32(out, w->cpu_millis);
    airtime_reason_cstr(out, " mCPU, ");
    airtime_reason_u32(out, w->memory_mb);
    airtime_reason_cstr(out, " MiB free");
}

int64_t airtime_evaluate(int32_t ptr, int32_t len) {
    airtime_snapshot s;
    enum airtime_snapshot_error error = airtime_snapshot_open(&s, (const void *)(uintptr_t)(uint32_t)ptr, (uint32_t)len);
    if (error != AIRTIME_SNAPSHOT_OK) airtime_give_up_cstr(airtime_snapshot_error_message(error));

    /* Scratch first: what is allocated after airtime_writer_init travels in the output. */
    cycle c;
    c.cpu_free = (uint32_t *)airtime_arena_alloc(s.nodes.count * 4u, 4);
    c.memory_free = (uint32_t *)airtime_arena_alloc(s.nodes.count * 4u, 4);
    c.gpu_taken = (uint8_t *)airtime_arena_alloc(s.gpus.count, 1);
    c.chosen = (uint32_t *)airtime_arena_alloc(s.gpus.count * 4u, 4);
    int any_engine = 0; /* some ready node has a container engine */
    for (uint32_t i = 0; i < s.nodes.count; i++) {
        airtime_node n;
        airtime_read_node(&s, i, &n);
        c.cpu_free[i] = n.cpu_millis_free;
        c.memory_free[i] = n.memory_mb_free;
        if (n.state == AIRTIME_NODE_READY && (n.flags & AIRTIME_NODE_FLAG_CONTAINERS)) any_engine = 1;
    }
    for (uint32_t i = 0; i < s.gpus.count; i++) c.gpu_taken[i] = 0;

    airtime_writer out;
    airtime_writer_init(&out, s.workloads.count);
    uint32_t pending = 0, placed = 0;

    for (uint32_t i = 0; i < s.workloads.count; i++) {
        airtime_workload w;
        airtime_read_workload(&s, i, &w);
        if (w.state != AIRTIME_WORKLOAD_PENDING || !airtime_in_scope(&s, &w)) continue;
        pending++;
        int container = (w.flags & AIRTIME_WORKLOAD_FLAG_CONTAINER) != 0;
        uint32_t node = AIRTIME_NONE;
        airtime_node n;
        for (uint32_t j = 0; j < s.nodes.count && (!container || any_engine); j++) {
            airtime_read_node(&s, j, &n);
            if (n.state != AIRTIME_NODE_READY) continue;
            if (container && !(n.flags & AIRTIME_NODE_FLAG_CONTAINERS)) continue; /* no container engine */
            if (c.cpu_free[j] < w.cpu_millis || c.memory_free[j] < w.memory_mb) continue;
            if (w.gpu_count > n.gpu_count) continue;
            if (w.gpu_count == 0 || pick_gpus(&s, &c, j, &n, &w, w.gpu_count) == w.gpu_count) {
                node = j;
                break;
            }
        }
        if (node == AIRTIME_NONE) {
            airtime_keep_pending(&out, i);
            pending_reason(&out, &w, any_engine);
            continue;
        }
        airtime_place(&out, i, node, c.chosen, w.gpu_count);
        place_reason(&out, &s, &n, &c, w.gpu_count);
        for (uint32_t k = 0; k < w.gpu_count; k++) c.gpu_taken[c.chosen[k]] = 1;
        c.cpu_free[node] -= w.cpu_millis;
        c.memory_free[node] -= w.memory_mb;
        placed++;
    }

    airtime_text line;
    line.len = 0;
    airtime_text_cstr(&line, "c-first-fit: placed ");
    airtime_text_u32(&line, placed);
    airtime_text_cstr(&line, " of ");
    airtime_text_u32(&line, pending);
    airtime_text_cstr(&line, pending == 1 ? " pending workload" : " pending workloads");
    airtime_log_text(AIRTIME_LOG_INFO, &line);

    return airtime_writer_finish(&out);
}
