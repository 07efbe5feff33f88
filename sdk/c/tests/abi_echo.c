/*
 * abi_echo: a test module, not a policy. It reads every field of every record of the snapshot
 * through airtime_policy.h and writes each record back as the reason of one keep-pending decision
 * ("node 0 name=gpu-a state=0 ..."), so policy-host/tests/policies/c_policy.rs can compare the
 * header's reading of the bytes, field by field, with the Rust SDK's decoder (sdk/src/abi.rs).
 * Floats are written as their bit patterns, so they compare exactly.
 *
 * Build: scripts/build-c-policy.sh out.wasm sdk/c/tests/abi_echo.c
 */
#include "airtime_policy.h"

int32_t airtime_abi_version(void) { return (int32_t)AIRTIME_ABI_VERSION; }

int32_t airtime_alloc(int32_t len) { return airtime_default_alloc(len); }

static uint32_t bits(float f) {
    union {
        float f;
        uint32_t u;
    } b = {f};
    return b.u;
}

static void field_u64(airtime_writer *w, const char *name, uint64_t v) {
    airtime_reason_cstr(w, " ");
    airtime_reason_cstr(w, name);
    airtime_reason_cstr(w, "=");
    airtime_reason_u64(w, v);
}

static void field_i64(airtime_writer *w, const char *name, int64_t v) {
    airtime_reason_cstr(w, " ");
    airtime_reason_cstr(w, name);
    airtime_reason_cstr(w, "=");
    airtime_reason_i64(w, v);
}

static void field_str(airtime_writer *w, const char *name, airtime_str v) {
    airtime_reason_cstr(w, " ");
    airtime_reason_cstr(w, name);
    airtime_reason_cstr(w, "=[");
    airtime_reason_str(w, v);
    airtime_reason_cstr(w, "]");
}

static void field_table(airtime_writer *w, const char *name, airtime_table t) {
    airtime_reason_cstr(w, " ");
    airtime_reason_cstr(w, name);
    airtime_reason_cstr(w, "=");
    airtime_reason_u32(w, t.count);
    airtime_reason_cstr(w, "x");
    airtime_reason_u32(w, t.stride);
}

/* One decision per line; the workload index is only a slot (nothing checks it here). */
static void line(airtime_writer *w, const char *what, uint32_t index) {
    airtime_keep_pending(w, index);
    airtime_reason_cstr(w, what);
    airtime_reason_cstr(w, " ");
    airtime_reason_u32(w, index);
}

int64_t airtime_evaluate(int32_t ptr, int32_t len) {
    airtime_snapshot s;
    enum airtime_snapshot_error error = airtime_snapshot_open(&s, (const void *)(uintptr_t)(uint32_t)ptr, (uint32_t)len);
    if (error != AIRTIME_SNAPSHOT_OK) airtime_give_up_cstr(airtime_snapshot_error_message(error));

    airtime_writer w;
    airtime_writer_init(&w, 2 + s.tenants.count + s.nodes.count + s.gpus.count + s.workloads.count + s.services.count +
                                 s.arrivals.count);

    line(&w, "header", 0);
    field_u64(&w, "now_ms", s.now_ms);
    field_str(&w, "params", s.params);
    field_u64(&w, "scope", s.scope_tenant);
    field_table(&w, "tenants", s.tenants);
    field_table(&w, "nodes", s.nodes);
    field_table(&w, "gpus", s.gpus);
    field_table(&w, "workloads", s.workloads);
    field_table(&w, "settings", s.settings);
    field_table(&w, "services", s.services);
    field_table(&w, "arrivals", s.arrivals);

    airtime_settings settings;
    if (airtime_read_settings(&s, &settings)) {
        line(&w, "settings", 0);
        field_u64(&w, "burst_reserve_gpus", settings.burst_reserve_gpus);
        field_u64(&w, "realtime_first", settings.realtime_first);
        field_u64(&w, "min_runtime_s", settings.min_runtime_s);
        field_u64(&w, "grace_period_s", settings.grace_period_s);
        field_u64(&w, "max_preemptions_per_hour", settings.max_preemptions_per_hour);
        field_i64(&w, "night_training_bonus", settings.night_training_bonus);
        field_u64(&w, "flags", settings.flags);
    }
    airtime_tenant t;
    for (uint32_t i = 0; airtime_read_tenant(&s, i, &t); i++) {
        line(&w, "tenant", i);
        field_str(&w, "name", t.name);
        field_u64(&w, "guaranteed_gpus", t.guaranteed_gpus);
        field_u64(&w, "weight", t.weight);
        field_u64(&w, "running_gpus", t.running_gpus);
        field_i64(&w, "tier", t.tier);
        field_u64(&w, "decayed_gpu_hours", bits(t.decayed_gpu_hours));
        field_u64(&w, "flags", t.flags);
        field_u64(&w, "running_gpu_milli", t.running_gpu_milli);
    }
    airtime_node n;
    for (uint32_t i = 0; airtime_read_node(&s, i, &n); i++) {
        line(&w, "node", i);
        field_str(&w, "name", n.name);
        field_u64(&w, "state", n.state);
        field_u64(&w, "cpu_millis", n.cpu_millis);
        field_u64(&w, "cpu_millis_free", n.cpu_millis_free);
        field_u64(&w, "memory_mb", n.memory_mb);
        field_u64(&w, "memory_mb_free", n.memory_mb_free);
        field_u64(&w, "gpu_first", n.gpu_first);
        field_u64(&w, "gpu_count", n.gpu_count);
        field_u64(&w, "cost_per_hour", bits(n.cost_per_hour));
        field_u64(&w, "cpu_util", bits(n.cpu_util));
        field_u64(&w, "flags", n.flags);
    }
    airtime_gpu g;
    for (uint32_t i = 0; airtime_read_gpu(&s, i, &g); i++) {
        line(&w, "gpu", i);
        field_u64(&w, "node", g.node);
        field_u64(&w, "device_index", g.device_index);
        field_str(&w, "model", g.model);
        field_u64(&w, "memory_mb", g.memory_mb);
        field_u64(&w, "memory_used_mb", g.memory_used_mb);
        field_u64(&w, "memory_free_mb", airtime_gpu_memory_free_mb(&g));
        field_u64(&w, "util", bits(g.util));
        field_u64(&w, "nvlink_group", g.nvlink_group);
        field_u64(&w, "holder", g.holder);
        field_u64(&w, "flags", g.flags);
        field_u64(&w, "sharing", g.sharing);
        field_u64(&w, "free_milli", g.free_milli);
        field_u64(&w, "memory_reserved_mb", g.memory_reserved_mb);
        field_u64(&w, "sharers", g.sharers);
        field_str(&w, "mig_profile", g.mig_profile);
    }
    airtime_workload x;
    for (uint32_t i = 0; airtime_read_workload(&s, i, &x); i++) {
        line(&w, "workload", i);
        field_str(&w, "id", x.id);
        field_str(&w, "name", x.name);
        field_u64(&w, "tenant", x.tenant);
        field_u64(&w, "class", x.class_);
        field_u64(&w, "state", x.state);
        field_i64(&w, "priority", x.priority);
        field_u64(&w, "gpu_count", x.gpu_count);
        field_u64(&w, "gpu_memory_mb", x.gpu_memory_mb);
        field_str(&w, "gpu_models", x.gpu_models);
        field_u64(&w, "cpu_millis", x.cpu_millis);
        field_u64(&w, "memory_mb", x.memory_mb);
        field_u64(&w, "submitted_ms", x.submitted_ms);
        field_u64(&w, "started_ms", x.started_ms);
        field_u64(&w, "node", x.node);
        field_u64(&w, "flags", x.flags);
        field_u64(&w, "expected_duration_s", x.expected_duration_s);
        field_u64(&w, "in_scope", airtime_in_scope(&s, &x));
        field_u64(&w, "gpu_milli", x.gpu_milli);
        field_str(&w, "mig_profile", x.mig_profile);
        field_u64(&w, "service", x.service);
        field_u64(&w, "replica_variant", x.replica_variant);
        field_u64(&w, "preemptions_last_hour", x.preemptions_last_hour);
    }
    airtime_service v;
    for (uint32_t i = 0; airtime_read_service(&s, i, &v); i++) {
        line(&w, "service", i);
        field_str(&w, "name", v.name);
        field_u64(&w, "tenant", v.tenant);
        field_u64(&w, "class", v.class_);
        field_u64(&w, "metric", v.metric);
        field_u64(&w, "min_replicas", v.min_replicas);
        field_u64(&w, "max_replicas", v.max_replicas);
        field_u64(&w, "capacity", bits(v.capacity));
        field_u64(&w, "cpu_capacity", bits(v.cpu_capacity));
        field_u64(&w, "demand", bits(v.demand));
        field_u64(&w, "latest", bits(v.latest));
        field_u64(&w, "desired_gpu", v.desired_gpu);
        field_u64(&w, "desired_cpu", v.desired_cpu);
        field_u64(&w, "placed_gpu", v.placed_gpu);
        field_u64(&w, "placed_cpu", v.placed_cpu);
        field_u64(&w, "pending_gpu", v.pending_gpu);
        field_u64(&w, "pending_cpu", v.pending_cpu);
        field_u64(&w, "gpu_milli_per_replica", v.gpu_milli_per_replica);
        field_u64(&w, "flags", v.flags);
    }
    airtime_arrival a;
    for (uint32_t i = 0; airtime_read_arrival(&s, i, &a); i++) {
        line(&w, "arrival", i);
        field_u64(&w, "gpu_milli", a.gpu_milli);
        field_u64(&w, "gpu_count", a.gpu_count);
        field_u64(&w, "cpu_millis", a.cpu_millis);
        field_u64(&w, "count", a.count);
        field_str(&w, "gpu_models", a.gpu_models);
    }
    return airtime_writer_finish(&w);
}
