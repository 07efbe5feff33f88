/*
 * airtime_policy.h: the Airtime policy ABI, version 1, for C.
 *
 * A policy is a core WebAssembly module (wasm32) that the control plane runs once per scheduling
 * cycle: it is handed a snapshot of the fleet and answers with decisions. The contract is
 * docs/policy-abi.md; its one definition is sdk/src/abi.rs (records, both encodings), and the
 * Rust guest side is sdk/src/guest.rs. This header is the same contract for C, to the byte:
 * every offset and size below is the one abi.rs encodes and decodes.
 *
 * Header-only and freestanding: it includes only <stdint.h>, <stddef.h> and <stdbool.h> (which
 * clang provides without a libc) and calls no library function. Build with
 *
 *   clang --target=wasm32-unknown-unknown -O2 -ffreestanding -nostdlib \
 *     -Wl,--no-entry -Wl,--export=airtime_abi_version -Wl,--export=airtime_alloc \
 *     -Wl,--export=airtime_evaluate -o policy.wasm policy.c
 *
 * (wasm-ld exports `memory` by itself). scripts/build-c-policy.sh does this, adding -mbulk-memory
 * (copies the compiler emits become memory.copy, not calls to a memcpy that is not there) and
 * putting the C stack below the data, so an overflow traps. A complete policy:
 * policies/c-first-fit/first_fit.c; sdk/c/tests/abi_echo.c reads every field of every record.
 *
 * WHAT A MODULE MUST HAVE
 *   exports   memory                                   the guest's linear memory (wasm-ld's default)
 *             int32_t airtime_abi_version(void)        must return AIRTIME_ABI_VERSION (1)
 *             int32_t airtime_alloc(int32_t len)       a pointer to `len` writable bytes; the host
 *                                                      copies the snapshot there
 *             int64_t airtime_evaluate(int32_t ptr, int32_t len)
 *                                                      evaluates the snapshot at ptr..ptr+len and
 *                                                      returns (out_ptr << 32) | out_len, the
 *                                                      decision buffer (airtime_writer_finish)
 *   imports   only airtime.log and airtime.fail (below); a module importing anything else (a libc
 *             function left undefined, say) is refused at upload.
 *
 * ONE EVALUATION
 *   A fresh instance serves each evaluation: the host calls airtime_alloc(len) once, copies the
 *   snapshot to the returned pointer, calls airtime_evaluate(ptr, len) once, reads the decision
 *   buffer and discards the instance. So memory never needs freeing: this header's allocator is a
 *   bump arena (airtime_arena_alloc) over the memory after the module's data (`__heap_base`),
 *   growing it as needed. Growing past the policy's memory limit (256 MiB by default) traps.
 *
 * ENCODING (docs/policy-abi.md, "Encoding rules")
 *   Little-endian; u32/i32/f32 4 bytes, u64 8 bytes, at any alignment (read them with the
 *   airtime_get_* helpers, never by casting a pointer). A table is {offset, count, stride}: count
 *   records of stride bytes from `offset` bytes into the buffer; stride may exceed the record size
 *   (a later minor version appends fields), so always step by stride. A string is {offset, len}
 *   into the same buffer, UTF-8, not NUL-terminated. AIRTIME_NONE marks an absent index. Indexes
 *   are positions in this snapshot's tables.
 *
 * USE FROM MORE THAN ONE .c FILE
 *   Every function here is `static inline`; the arena's one piece of state is a weak global, so all
 *   translation units share one arena.
 */
#ifndef AIRTIME_POLICY_H
#define AIRTIME_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if !defined(__wasm32__)
#error "airtime_policy.h targets wasm32: build with clang --target=wasm32-unknown-unknown"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Constants (sdk/src/abi.rs)
 * ------------------------------------------------------------------------------------------- */

/** The ABI version this header speaks; airtime_abi_version must return it. */
#define AIRTIME_ABI_VERSION 1u
/** An absent index (u32::MAX): "no node", "no holder", "platform scope". */
#define AIRTIME_NONE 0xFFFFFFFFu

/** "ATSN", the first four bytes of a snapshot, read as a little-endian u32. */
#define AIRTIME_SNAPSHOT_MAGIC 0x4E535441u
/** "ATDC", the first four bytes of a decision buffer, as a little-endian u32. */
#define AIRTIME_DECISIONS_MAGIC 0x43445441u

/** The header guests before ABI 1.3 read (they ignore the 16 bytes after it). */
#define AIRTIME_SNAPSHOT_HEADER_SIZE_1_2 88u
/** A whole GPU in thousandths: the unit of shares (ABI 1.2). */
#define AIRTIME_WHOLE_GPU_MILLI 1000u
/** The decision buffer's header: {magic "ATDC", count u32}. */
#define AIRTIME_DECISIONS_HEADER_SIZE 8u

/* Descriptors inside a record. */
#define AIRTIME_TABLE_DESCRIPTOR_SIZE 12u  /* {offset u32, count u32, stride u32} */
#define AIRTIME_STRING_DESCRIPTOR_SIZE 8u  /* {offset u32, len u32} */

#ifdef __cplusplus
#define AIRTIME_STATIC_ASSERT(condition, what) static_assert(condition, what)
#else
#define AIRTIME_STATIC_ASSERT(condition, what) _Static_assert(condition, what)
#endif

/* Every record's size, field offsets and flag bits, and the enumerations, as sdk/src/abi.rs
 * declares them (docs/policy-abi.md has the same tables). Every record's last field ends at its
 * size, which the assertions check. */
/* generated: layout (from sdk/src/abi.rs by `cargo run -p airtime-policy-sdk --bin abi-gen`; do not edit) */
/* Snapshot header, 120 bytes. */
#define AIRTIME_SNAPSHOT_HEADER_SIZE 120u
/** `"ATSN"`. */
#define AIRTIME_SNAP_MAGIC 0u /* 4 bytes */
/** = 1. */
#define AIRTIME_SNAP_ABI_VERSION 4u /* u32 */
/** Unix ms, given by the host (the guest has no clock). */
#define AIRTIME_SNAP_NOW_MS 8u /* u64 */
#define AIRTIME_SNAP_TENANTS 16u /* table {offset u32, count u32, stride u32} */
#define AIRTIME_SNAP_NODES 28u /* table {offset u32, count u32, stride u32} */
#define AIRTIME_SNAP_GPUS 40u /* table {offset u32, count u32, stride u32} */
#define AIRTIME_SNAP_WORKLOADS 52u /* table {offset u32, count u32, stride u32} */
/** 0 or 1 record. */
#define AIRTIME_SNAP_SETTINGS 64u /* table {offset u32, count u32, stride u32} */
/** The policy's JSON configuration, `{}` when none. */
#define AIRTIME_SNAP_PARAMS 76u /* string {offset u32, len u32} */
/** The tenant (index) this evaluation is for; `NONE` for the platform scope. */
#define AIRTIME_SNAP_SCOPE_TENANT 84u /* u32, AIRTIME_NONE when absent */
/** ABI 1.3: elastic inference services. */
#define AIRTIME_SNAP_SERVICES 88u /* table {offset u32, count u32, stride u32} */
/** 0; keeps the tables 8-aligned. */
#define AIRTIME_SNAP_RESERVED 100u /* u32: 0 */
/** ABI 1.9: the shapes of work asked for lately. */
#define AIRTIME_SNAP_ARRIVALS 104u /* table {offset u32, count u32, stride u32} */
/** 0; keeps the tables 8-aligned. */
#define AIRTIME_SNAP_RESERVED_1_9 116u /* u32: 0 */
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_RESERVED_1_9 + 4 == AIRTIME_SNAPSHOT_HEADER_SIZE, "Snapshot header");

/* Tenant, 40 bytes. */
#define AIRTIME_TENANT_SIZE 40u
#define AIRTIME_TENANT_NAME 0u /* string {offset u32, len u32} */
#define AIRTIME_TENANT_GUARANTEED_GPUS 8u /* u32 */
#define AIRTIME_TENANT_WEIGHT 12u /* u32 */
/** GPUs its running workloads hold now. */
#define AIRTIME_TENANT_RUNNING_GPUS 16u /* u32 */
/** Higher is more important. */
#define AIRTIME_TENANT_TIER 20u /* i32 */
/** Usage history, half-life decayed. */
#define AIRTIME_TENANT_DECAYED_GPU_HOURS 24u /* f32 */
#define AIRTIME_TENANT_FLAGS 28u /* u32: AIRTIME_TENANT_FLAG_* */
/** May borrow idle capacity beyond `guaranteed_gpus`. */
#define AIRTIME_TENANT_FLAG_MAY_BORROW 0x1u
/**
 * ABI 1.2: what its running workloads hold now, in thousandths of a GPU (a quarter share counts
 * 250, a MIG instance its share of the GPU's seven compute slices, 142 for `1g`); `running_gpus`
 * is this rounded up, for guests that count whole GPUs.
 */
#define AIRTIME_TENANT_RUNNING_GPU_MILLI 32u /* u32 */
/**
 * ABI 1.7: the most GPUs its work may hold at once, borrowed or not; 0 for no limit (what hosts
 * before 1.7 leave here). The host's checker refuses a placement past it.
 */
#define AIRTIME_TENANT_GPU_LIMIT 36u /* u32 */
AIRTIME_STATIC_ASSERT(AIRTIME_TENANT_GPU_LIMIT + 4 == AIRTIME_TENANT_SIZE, "Tenant");

/* Node, 48 bytes. */
#define AIRTIME_NODE_SIZE 48u
#define AIRTIME_NODE_NAME 0u /* string {offset u32, len u32} */
/**
 * Whether it takes work (draining: cordoned or drained by an operator, and the host refuses a
 * placement there).
 */
#define AIRTIME_NODE_STATE 8u /* u32: enum airtime_node_state */
/** Total CPU, in thousandths of a core. */
#define AIRTIME_NODE_CPU_MILLIS 12u /* u32 */
/** CPU not reserved by running workloads. */
#define AIRTIME_NODE_CPU_MILLIS_FREE 16u /* u32 */
/** Total memory, MiB. */
#define AIRTIME_NODE_MEMORY_MB 20u /* u32 */
#define AIRTIME_NODE_MEMORY_MB_FREE 24u /* u32 */
/** Index of its first GPU in the gpus table. */
#define AIRTIME_NODE_GPU_FIRST 28u /* u32 */
/** Number of GPUs; they are `gpu_first .. gpu_first + gpu_count`. */
#define AIRTIME_NODE_GPU_COUNT 32u /* u32 */
/** USD per hour. */
#define AIRTIME_NODE_COST_PER_HOUR 36u /* f32 */
/** Live CPU utilisation, 0..1. */
#define AIRTIME_NODE_CPU_UTIL 40u /* f32 */
#define AIRTIME_NODE_FLAGS 44u /* u32: AIRTIME_NODE_FLAG_* */
/** Its GPUs are simulated. */
#define AIRTIME_NODE_FLAG_SIMULATED 0x1u
/** ABI 1.4: it has a container engine, so it can run container workloads. */
#define AIRTIME_NODE_FLAG_CONTAINERS 0x2u
AIRTIME_STATIC_ASSERT(AIRTIME_NODE_FLAGS + 4 == AIRTIME_NODE_SIZE, "Node");

/* Gpu, 64 bytes. */
#define AIRTIME_GPU_SIZE 64u
/** Index of its node in the nodes table. */
#define AIRTIME_GPU_NODE 0u /* u32: an index */
/** Position on its node, as `CUDA_VISIBLE_DEVICES` counts. */
#define AIRTIME_GPU_DEVICE_INDEX 4u /* u32 */
#define AIRTIME_GPU_MODEL 8u /* string {offset u32, len u32} */
/** Total memory, MiB. */
#define AIRTIME_GPU_MEMORY_MB 16u /* u32 */
/** Memory in use now (live telemetry), MiB. */
#define AIRTIME_GPU_MEMORY_USED_MB 20u /* u32 */
/** Live utilisation, 0..1. */
#define AIRTIME_GPU_UTIL 24u /* f32 */
/** GPUs with the same value share an NVLink domain; `NONE` when unknown. */
#define AIRTIME_GPU_NVLINK_GROUP 28u /* u32, AIRTIME_NONE when absent */
/**
 * The workload (index) holding it; `NONE` when free. A GPU shared by several workloads names the
 * first of them, so a guest that knows nothing of sharing sees it as held.
 */
#define AIRTIME_GPU_HOLDER 32u /* u32, AIRTIME_NONE when absent */
#define AIRTIME_GPU_FLAGS 36u /* u32: AIRTIME_GPU_FLAG_* */
/** Simulated. */
#define AIRTIME_GPU_FLAG_SIMULATED 0x1u
/** ABI 1.2: how it is shared. */
#define AIRTIME_GPU_SHARING 40u /* u32: enum airtime_sharing */
/** ABI 1.2: thousandths of it no workload holds (1000 when free, 0 when held whole). */
#define AIRTIME_GPU_FREE_MILLI 44u /* u32 */
/** ABI 1.2: GPU memory reserved by the memory slices of the workloads sharing it, MiB. */
#define AIRTIME_GPU_MEMORY_RESERVED_MB 48u /* u32 */
/** ABI 1.2: how many workloads hold a share of it. */
#define AIRTIME_GPU_SHARERS 52u /* u32 */
/** ABI 1.2: a MIG instance's profile (`1g.10gb`); empty for a whole GPU. */
#define AIRTIME_GPU_MIG_PROFILE 56u /* string {offset u32, len u32} */
AIRTIME_STATIC_ASSERT(AIRTIME_GPU_MIG_PROFILE + 8 == AIRTIME_GPU_SIZE, "Gpu");

/* Workload, 128 bytes. */
#define AIRTIME_WORKLOAD_SIZE 128u
/** UUID text. */
#define AIRTIME_WORKLOAD_ID 0u /* string {offset u32, len u32} */
#define AIRTIME_WORKLOAD_NAME 8u /* string {offset u32, len u32} */
/** Index of its tenant in the tenants table. */
#define AIRTIME_WORKLOAD_TENANT 16u /* u32: an index */
#define AIRTIME_WORKLOAD_CLASS 20u /* u32: enum airtime_workload_class */
/**
 * Where it is (running: or scheduled; stopping: being preempted or cancelled, still holding its
 * GPUs).
 */
#define AIRTIME_WORKLOAD_STATE 24u /* u32: enum airtime_workload_state */
/** Higher first. */
#define AIRTIME_WORKLOAD_PRIORITY 28u /* i32 */
#define AIRTIME_WORKLOAD_GPU_COUNT 32u /* u32 */
/** GPU memory needed on each GPU, MiB. */
#define AIRTIME_WORKLOAD_GPU_MEMORY_MB 36u /* u32 */
/** Comma-separated allowed GPU models; empty allows any. See `Workload::allows_model`. */
#define AIRTIME_WORKLOAD_GPU_MODELS 40u /* string {offset u32, len u32} */
/** Host CPU needed on the node by any placement, GPU or CPU, in thousandths of a core. */
#define AIRTIME_WORKLOAD_CPU_MILLIS 48u /* u32 */
/** Host memory needed, MiB. */
#define AIRTIME_WORKLOAD_MEMORY_MB 52u /* u32 */
/** Unix ms. */
#define AIRTIME_WORKLOAD_SUBMITTED_MS 56u /* u64 */
/** Unix ms; 0 when not running. */
#define AIRTIME_WORKLOAD_STARTED_MS 64u /* u64 */
/** The node it runs on (running only; `NONE` otherwise). */
#define AIRTIME_WORKLOAD_NODE 72u /* u32, AIRTIME_NONE when absent */
#define AIRTIME_WORKLOAD_FLAGS 76u /* u32: AIRTIME_WORKLOAD_FLAG_* */
/** May be preempted. */
#define AIRTIME_WORKLOAD_FLAG_PREEMPTIBLE 0x1u
/** Can checkpoint and resume. */
#define AIRTIME_WORKLOAD_FLAG_CHECKPOINTABLE 0x2u
/** Can run on CPU only. */
#define AIRTIME_WORKLOAD_FLAG_CPU_CAPABLE 0x4u
/**
 * All its GPUs must be on one node (it asks for more than one): every placement names one node, so
 * every placement satisfies it. A workload spanning nodes is a gang of members instead
 * (`gang_size`, ABI 1.6).
 */
#define AIRTIME_WORKLOAD_FLAG_GANG 0x8u
/** ABI 1.4: runs in an OCI image, so only a node with its `containers` bit can take it. */
#define AIRTIME_WORKLOAD_FLAG_CONTAINER 0x10u
/** Expected duration in seconds; 0 when unknown. */
#define AIRTIME_WORKLOAD_EXPECTED_DURATION_S 80u /* u32 */
/**
 * ABI 1.5: times it was preempted in the last hour: at the settings' `max_preemptions_per_hour`
 * the host refuses to preempt it again (0 from older hosts).
 */
#define AIRTIME_WORKLOAD_PREEMPTIONS_LAST_HOUR 84u /* u32 */
/**
 * ABI 1.2: its share of each GPU, in thousandths: 1000 for whole GPUs, less for a fraction of one
 * GPU (then `gpu_count` is 1 and `gpu_memory_mb` is its memory slice).
 */
#define AIRTIME_WORKLOAD_GPU_MILLI 88u /* u32 */
/** ABI 1.2: the MIG profile it must run on (`1g.10gb`); empty when it asks for none. */
#define AIRTIME_WORKLOAD_MIG_PROFILE 92u /* string {offset u32, len u32} */
#define AIRTIME_WORKLOAD_RESERVED_2 100u /* u32: 0 */
/** ABI 1.3: the service (index into the services table) it is a replica of; `NONE` for a job. */
#define AIRTIME_WORKLOAD_SERVICE 104u /* u32, AIRTIME_NONE when absent */
/** ABI 1.3: which of its service's templates a replica runs; `none` for a job. */
#define AIRTIME_WORKLOAD_REPLICA_VARIANT 108u /* u32: enum airtime_replica_variant */
/**
 * ABI 1.6: members of the gang across nodes it belongs to (0 or 1: it runs on one node). Each
 * member is a workload of its own asking for the same resources; the host accepts a member's
 * placement only when every member of the gang is placed in the same evaluation, each on a node of
 * its own (all or none).
 */
#define AIRTIME_WORKLOAD_GANG_SIZE 112u /* u32 */
/** ABI 1.6: its rank in its gang, `0 .. gang_size`. */
#define AIRTIME_WORKLOAD_GANG_RANK 116u /* u32 */
/** ABI 1.6: its gang's id (the rank-0 member's workload id); empty when not in a gang. */
#define AIRTIME_WORKLOAD_GANG_ID 120u /* string {offset u32, len u32} */
AIRTIME_STATIC_ASSERT(AIRTIME_WORKLOAD_GANG_ID + 8 == AIRTIME_WORKLOAD_SIZE, "Workload");

/* Settings, 32 bytes. */
#define AIRTIME_SETTINGS_SIZE 32u
/** GPUs kept free for real-time inference. */
#define AIRTIME_SETTINGS_BURST_RESERVE_GPUS 0u /* u32 */
/** Customer-facing inference outranks training. */
#define AIRTIME_SETTINGS_REALTIME_FIRST 4u /* u32: 1 or 0 */
/** Seconds a workload runs before it may be preempted. */
#define AIRTIME_SETTINGS_MIN_RUNTIME_S 8u /* u32 */
#define AIRTIME_SETTINGS_GRACE_PERIOD_S 12u /* u32 */
#define AIRTIME_SETTINGS_MAX_PREEMPTIONS_PER_HOUR 16u /* u32 */
/**
 * Priority added to training and fine-tuning now: the host resolves the platform's night window,
 * so this is 0 outside it.
 */
#define AIRTIME_SETTINGS_NIGHT_TRAINING_BONUS 20u /* i32 */
#define AIRTIME_SETTINGS_FLAGS 24u /* u32: AIRTIME_SETTINGS_FLAG_* */
/** ABI 1.5: only checkpointable work may be preempted. */
#define AIRTIME_SETTINGS_FLAG_CHECKPOINTABLE_ONLY 0x1u
#define AIRTIME_SETTINGS_RESERVED 28u /* u32: 0 */
AIRTIME_STATIC_ASSERT(AIRTIME_SETTINGS_RESERVED + 4 == AIRTIME_SETTINGS_SIZE, "Settings");

/* Service, 80 bytes. */
#define AIRTIME_SERVICE_SIZE 80u
#define AIRTIME_SERVICE_NAME 0u /* string {offset u32, len u32} */
/** Index of its tenant in the tenants table. */
#define AIRTIME_SERVICE_TENANT 8u /* u32: an index */
/** The class of its replicas. */
#define AIRTIME_SERVICE_CLASS 12u /* u32: enum airtime_workload_class */
/** What its load reports measure. */
#define AIRTIME_SERVICE_METRIC 16u /* u32: enum airtime_load_metric */
#define AIRTIME_SERVICE_MIN_REPLICAS 20u /* u32 */
#define AIRTIME_SERVICE_MAX_REPLICAS 24u /* u32 */
/** Load one GPU replica carries at the latency target, in the service's metric. */
#define AIRTIME_SERVICE_CAPACITY 28u /* f32 */
/** Load one CPU replica carries; 0 when it has no CPU variant. */
#define AIRTIME_SERVICE_CPU_CAPACITY 32u /* f32 */
/**
 * The load the autoscaler provisions for (stabilised, with burst headroom); 0 while the reports
 * are stale or the service drains.
 */
#define AIRTIME_SERVICE_DEMAND 36u /* f32 */
/** The newest report's load; 0 when none has come. */
#define AIRTIME_SERVICE_LATEST 40u /* f32 */
/** GPU replicas the autoscaler wants. */
#define AIRTIME_SERVICE_DESIRED_GPU 44u /* u32 */
/** CPU replicas the autoscaler wants. */
#define AIRTIME_SERVICE_DESIRED_CPU 48u /* u32 */
/** GPU replicas placed now (scheduled or running). */
#define AIRTIME_SERVICE_PLACED_GPU 52u /* u32 */
/** CPU replicas placed now. */
#define AIRTIME_SERVICE_PLACED_CPU 56u /* u32 */
/** GPU replicas waiting for a place. */
#define AIRTIME_SERVICE_PENDING_GPU 60u /* u32 */
/** CPU replicas waiting for a place. */
#define AIRTIME_SERVICE_PENDING_CPU 64u /* u32 */
/** Thousandths of a GPU one GPU replica holds (1000 a whole GPU, 250 a quarter share). */
#define AIRTIME_SERVICE_GPU_MILLI_PER_REPLICA 68u /* u32 */
#define AIRTIME_SERVICE_FLAGS 72u /* u32: AIRTIME_SERVICE_FLAG_* */
/** It has a CPU variant. */
#define AIRTIME_SERVICE_FLAG_CPU_VARIANT 0x1u
/** Deleted: every replica drains. */
#define AIRTIME_SERVICE_FLAG_DRAINING 0x2u
/** No load report recent enough to act on: the autoscaler holds the replicas as they are. */
#define AIRTIME_SERVICE_FLAG_STALE 0x4u
#define AIRTIME_SERVICE_RESERVED 76u /* u32: 0 */
AIRTIME_STATIC_ASSERT(AIRTIME_SERVICE_RESERVED + 4 == AIRTIME_SERVICE_SIZE, "Service");

/* Arrival, 24 bytes. */
#define AIRTIME_ARRIVAL_SIZE 24u
/** Thousandths of each GPU: 1000 for whole GPUs, less for a share of one; 0 without GPUs. */
#define AIRTIME_ARRIVAL_GPU_MILLI 0u /* u32 */
/** GPUs, all on one node; 0 for work without GPUs. */
#define AIRTIME_ARRIVAL_GPU_COUNT 4u /* u32 */
/** Host CPU, thousandths of a core. */
#define AIRTIME_ARRIVAL_CPU_MILLIS 8u /* u32 */
/** How many workloads of this shape were submitted. */
#define AIRTIME_ARRIVAL_COUNT 12u /* u32 */
/** The GPU models it may use, comma-separated; empty for any. */
#define AIRTIME_ARRIVAL_GPU_MODELS 16u /* string {offset u32, len u32} */
AIRTIME_STATIC_ASSERT(AIRTIME_ARRIVAL_GPU_MODELS + 8 == AIRTIME_ARRIVAL_SIZE, "Arrival");

/* Decision, 32 bytes. */
#define AIRTIME_DECISION_SIZE 32u
/** 1 place, 2 preempt, 3 keep pending. */
#define AIRTIME_DECISION_KIND 0u /* u32 */
/** Index into the snapshot's workloads. */
#define AIRTIME_DECISION_WORKLOAD 4u /* u32 */
/** Node index; place only, else `NONE`. */
#define AIRTIME_DECISION_NODE 8u /* u32 */
/** 0. */
#define AIRTIME_DECISION_RESERVED 12u /* u32: 0 */
/**
 * `{offset, len}` of a `u32` array of GPU indexes (into the gpus table) in this buffer; `len`
 * counts GPUs, not bytes. Empty for a CPU placement.
 */
#define AIRTIME_DECISION_GPUS 16u /* {offset u32, len u32} of u32 entries */
/** Why, in words a tenant reads ("best fit: 40 GB free on h200-3"). */
#define AIRTIME_DECISION_REASON 24u /* string {offset u32, len u32} */
AIRTIME_STATIC_ASSERT(AIRTIME_DECISION_REASON + 8 == AIRTIME_DECISION_SIZE, "Decision");

/* Enumerations. A minor version may add values: treat one you do not know conservatively (a node
 * in an unknown state takes no work, a workload in an unknown state is not yours to decide). */

/** Whether a node takes work. */
enum airtime_node_state {
    AIRTIME_NODE_READY = 0,
    AIRTIME_NODE_DRAINING = 1, /* Finishing its work; takes none. */
    AIRTIME_NODE_LOST = 2, /* Not heard from; its work is being requeued. */
};

/** Where a workload is, as a policy sees it. */
enum airtime_workload_state {
    AIRTIME_WORKLOAD_PENDING = 0,
    AIRTIME_WORKLOAD_RUNNING = 1, /* Running or scheduled: it holds its resources. */
    AIRTIME_WORKLOAD_STOPPING = 2, /* Being preempted or cancelled: it still holds its resources and will release them within the grace period. Preempting it again changes nothing. */
};

/** What kind of work a workload is. */
enum airtime_workload_class {
    AIRTIME_CLASS_REALTIME_INFERENCE = 0, /* Customer-facing, latency above all. */
    AIRTIME_CLASS_BATCH_INFERENCE = 1,
    AIRTIME_CLASS_TRAINING = 2,
    AIRTIME_CLASS_FINE_TUNING = 3,
    AIRTIME_CLASS_QUANTIZATION = 4,
    AIRTIME_CLASS_EMBEDDINGS = 5,
    AIRTIME_CLASS_EVALUATION = 6,
};

/** How a GPU is shared (ABI 1.2), as the node's agent reports it. */
enum airtime_sharing {
    AIRTIME_SHARING_NONE = 0, /* Not shared: one workload holds it whole (a fractional workload placed here gets it all). */
    AIRTIME_SHARING_TIME_SLICING = 1, /* Shared without isolation. */
    AIRTIME_SHARING_MPS = 2, /* Shared through CUDA MPS: each workload gets its share of the SMs and a memory limit. */
    AIRTIME_SHARING_MIG = 3, /* A MIG instance: only work asking for its profile runs on it, alone. */
};

/** What a service's load reports measure (ABI 1.3). */
enum airtime_load_metric {
    AIRTIME_METRIC_REQUESTS_PER_SECOND = 0, /* Requests per second arriving at the service. */
    AIRTIME_METRIC_CONCURRENT_REQUESTS = 1, /* Requests in flight at once. */
    AIRTIME_METRIC_TOKENS_PER_SECOND = 2, /* Tokens per second, prompt and generated (ABI 1.8: a service priced per token). */
};

/** Which of its service's templates a replica runs (ABI 1.3). */
enum airtime_replica_variant {
    AIRTIME_REPLICA_NONE = 0, /* Not a replica: a job. */
    AIRTIME_REPLICA_GPU = 1, /* The main template, on GPUs. */
    AIRTIME_REPLICA_CPU = 2, /* The CPU variant. */
};

/** Decision kind (decision offset 0). */
enum airtime_decision_kind {
    AIRTIME_KIND_PLACE = 1,
    AIRTIME_KIND_PREEMPT = 2,
    AIRTIME_KIND_KEEP_PENDING = 3,
};
/* end generated: layout */

/* How the snapshot header grew: 1.3 appended to the 88 bytes 1.2 guests read. */
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_SCOPE_TENANT + 4 == AIRTIME_SNAPSHOT_HEADER_SIZE_1_2, "1.2 snapshot header");
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_SERVICES == AIRTIME_SNAPSHOT_HEADER_SIZE_1_2, "1.3 appends to the header");
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_SETTINGS + AIRTIME_TABLE_DESCRIPTOR_SIZE == AIRTIME_SNAP_PARAMS, "tables");
AIRTIME_STATIC_ASSERT(sizeof(void *) == 4 && sizeof(size_t) == 4, "the ABI is wasm32: pointers are i32");

/** airtime.log levels; the host reads codes above 3 as errors, below 0 as debug. */
enum airtime_log_level {
    AIRTIME_LOG_DEBUG = 0,
    AIRTIME_LOG_INFO = 1,
    AIRTIME_LOG_WARN = 2,
    AIRTIME_LOG_ERROR = 3,
};

/* ---------------------------------------------------------------------------------------------
 * The exports a policy defines (declared here so their types are checked; the build exports
 * them with -Wl,--export=NAME)
 * ------------------------------------------------------------------------------------------- */

/** Returns AIRTIME_ABI_VERSION. Called once at upload, on an instance of its own. */
int32_t airtime_abi_version(void);
/** Returns a pointer to `len` writable bytes for the snapshot; airtime_arena_alloc(len, 8) will do. */
int32_t airtime_alloc(int32_t len);
/** Evaluates the snapshot at ptr..ptr+len (the buffer airtime_alloc returned); returns
 *  ((uint64_t)out_ptr << 32) | out_len of the decision buffer, e.g. airtime_writer_finish(). */
int64_t airtime_evaluate(int32_t ptr, int32_t len);
/** OPTIONAL (ABI 1.1; a module without it is not asked): checks the parameters (UTF-8 JSON at
 *  ptr..ptr+len, in a buffer from airtime_alloc, on an instance of its own) a platform team
 *  activates the policy with. Returns 0 to accept, or ((uint64_t)msg_ptr << 32) | msg_len to refuse
 *  with that UTF-8 message (airtime_refuse_params). scripts/build-c-policy.sh exports it when the
 *  policy defines it (-Wl,--export-if-defined=airtime_validate_params). */
int64_t airtime_validate_params(int32_t ptr, int32_t len);

/* ---------------------------------------------------------------------------------------------
 * Host imports (module "airtime"). The host checks every range against the guest's memory.
 * ------------------------------------------------------------------------------------------- */

/** airtime.log(level, ptr, len): a UTF-8 log line. The host keeps 1,000 lines / 64 KiB per
 *  evaluation and counts the rest; lines are cleaned and cut to 2,000 characters. */
__attribute__((import_module("airtime"), import_name("log")))
void airtime_log(int32_t level, const void *ptr, uint32_t len);

/** airtime.fail(ptr, len): the policy gives up with this UTF-8 message (first 4 KiB kept); the
 *  host records it (kind guest_failed) and traps inside the call. Use airtime_give_up, which
 *  also traps should a host ever return. */
__attribute__((import_module("airtime"), import_name("fail")))
void airtime_fail(const void *ptr, uint32_t len);

/* ---------------------------------------------------------------------------------------------
 * Small freestanding helpers: bytes, strings, text
 * ------------------------------------------------------------------------------------------- */

/** A string of the snapshot: `len` bytes of UTF-8 at `ptr`, not NUL-terminated. */
typedef struct airtime_str {
    const char *ptr;
    uint32_t len;
} airtime_str;

static inline uint32_t airtime_cstr_len(const char *s) {
    uint32_t n = 0;
    while (s[n] != '\0') n++;
    return n;
}

static inline airtime_str airtime_str_from_cstr(const char *s) {
    airtime_str out = {s, airtime_cstr_len(s)};
    return out;
}

static inline void airtime_copy_bytes(void *dst, const void *src, uint32_t len) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    for (uint32_t i = 0; i < len; i++) d[i] = s[i];
}

/* Little-endian reads and writes at any alignment (wasm is little-endian; clang turns these
 * into single loads and stores). */
static inline uint32_t airtime_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline int32_t airtime_get_i32(const uint8_t *p) { return (int32_t)airtime_get_u32(p); }
static inline uint64_t airtime_get_u64(const uint8_t *p) {
    return (uint64_t)airtime_get_u32(p) | (uint64_t)airtime_get_u32(p + 4) << 32;
}
static inline float airtime_get_f32(const uint8_t *p) {
    union {
        uint32_t u;
        float f;
    } bits = {airtime_get_u32(p)};
    return bits.f;
}
static inline void airtime_put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/** Logs `len` bytes of UTF-8 at `text`. */
static inline void airtime_log_bytes(enum airtime_log_level level, const char *text, uint32_t len) {
    airtime_log((int32_t)level, text, len);
}
/** Logs a NUL-terminated line. */
static inline void airtime_log_cstr(enum airtime_log_level level, const char *text) {
    airtime_log((int32_t)level, text, airtime_cstr_len(text));
}

/** Gives up with `len` bytes of UTF-8 at `message`: the evaluation fails (guest_failed) and the
 *  control plane keeps the previous state. Never returns. */
__attribute__((noreturn)) static inline void airtime_give_up(const char *message, uint32_t len) {
    airtime_fail(message, len);
    __builtin_trap(); /* should a host return from airtime.fail */
}
__attribute__((noreturn)) static inline void airtime_give_up_cstr(const char *message) {
    airtime_give_up(message, airtime_cstr_len(message));
}

/** Text in a fixed buffer on the stack, for log lines and failure messages. Appends past the
 *  capacity are cut at a UTF-8 character boundary, so the text stays valid UTF-8. */
#ifndef AIRTIME_TEXT_CAPACITY
#define AIRTIME_TEXT_CAPACITY 256u
#endif
typedef struct airtime_text {
    uint32_t len;
    char bytes[AIRTIME_TEXT_CAPACITY];
} airtime_text;

static inline void airtime_text_bytes(airtime_text *t, const char *s, uint32_t len) {
    uint32_t room = AIRTIME_TEXT_CAPACITY - t->len;
    if (len > room) {
        len = room;
        /* Do not split a character: back off over continuation bytes (10xxxxxx). */
        while (len > 0 && ((unsigned char)s[len] & 0xC0u) == 0x80u) len--;
    }
    airtime_copy_bytes(t->bytes + t->len, s, len);
    t->len += len;
}
static inline void airtime_text_cstr(airtime_text *t, const char *s) {
    airtime_text_bytes(t, s, airtime_cstr_len(s));
}
static inline void airtime_text_str(airtime_text *t, airtime_str s) { airtime_text_bytes(t, s.ptr, s.len); }

/** Writes `v` in decimal to `digits` (room for 10) and returns how many digits it wrote. */
static inline uint32_t airtime_format_u32(char digits[10], uint32_t v) {
    char reversed[10];
    uint32_t n = 0;
    do {
        reversed[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (uint32_t i = 0; i < n; i++) digits[i] = reversed[n - 1 - i];
    return n;
}
/** Writes `v` in decimal to `digits` (room for 20) and returns how many digits it wrote. */
static inline uint32_t airtime_format_u64(char digits[20], uint64_t v) {
    char reversed[20];
    uint32_t n = 0;
    do {
        reversed[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (uint32_t i = 0; i < n; i++) digits[i] = reversed[n - 1 - i];
    return n;
}
/** Writes `v` in decimal, with a `-` when negative, to `digits` (room for 21). */
static inline uint32_t airtime_format_i64(char digits[21], int64_t v) {
    if (v >= 0) return airtime_format_u64(digits, (uint64_t)v);
    digits[0] = '-';
    return 1 + airtime_format_u64(digits + 1, (uint64_t)0 - (uint64_t)v);
}
static inline void airtime_text_u32(airtime_text *t, uint32_t v) {
    char digits[10];
    airtime_text_bytes(t, digits, airtime_format_u32(digits, v));
}
static inline void airtime_text_u64(airtime_text *t, uint64_t v) {
    char digits[20];
    airtime_text_bytes(t, digits, airtime_format_u64(digits, v));
}
static inline void airtime_text_i64(airtime_text *t, int64_t v) {
    char digits[21];
    airtime_text_bytes(t, digits, airtime_format_i64(digits, v));
}
static inline void airtime_log_text(enum airtime_log_level level, const airtime_text *t) {
    airtime_log((int32_t)level, t->bytes, t->len);
}
__attribute__((noreturn)) static inline void airtime_give_up_text(const airtime_text *t) {
    airtime_give_up(t->bytes, t->len);
}

/* ---------------------------------------------------------------------------------------------
 * GPU models: compared ignoring ASCII case and surrounding spaces; a workload's gpu_models is a
 * comma-separated list, and a list naming no model allows any. The same rule as the SDK's
 * `model_allowed` (sdk/src/view.rs), which the host's checks apply: "surrounding spaces" are
 * what Rust's str::trim removes, every Unicode White_Space character, so a no-break space
 * around a name is trimmed too.
 * ------------------------------------------------------------------------------------------- */

/** Bytes of the White_Space character that `s` (valid UTF-8) starts with; 0 if none. */
static inline uint32_t airtime__space_prefix(const unsigned char *s, uint32_t len) {
    if (len == 0) return 0;
    unsigned char a = s[0];
    if (a == ' ' || (a >= 0x09 && a <= 0x0D)) return 1;
    if (len >= 2 && a == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2; /* U+0085, U+00A0 */
    if (len >= 3) {
        unsigned char b = s[1], c = s[2];
        if (a == 0xE1 && b == 0x9A && c == 0x80) return 3;                 /* U+1680 */
        if (a == 0xE2 && b == 0x80 && ((c >= 0x80 && c <= 0x8A) || c == 0xA8 || c == 0xA9 || c == 0xAF))
            return 3; /* U+2000..U+200A, U+2028, U+2029, U+202F */
        if (a == 0xE2 && b == 0x81 && c == 0x9F) return 3;                 /* U+205F */
        if (a == 0xE3 && b == 0x80 && c == 0x80) return 3;                 /* U+3000 */
    }
    return 0;
}

/** Bytes of the White_Space character that `s` (valid UTF-8) ends with; 0 if none. */
static inline uint32_t airtime__space_suffix(const unsigned char *s, uint32_t len) {
    if (len == 0) return 0;
    if (airtime__space_prefix(s + len - 1, 1) == 1) return 1;
    if (len >= 2 && airtime__space_prefix(s + len - 2, 2) == 2) return 2;
    if (len >= 3 && airtime__space_prefix(s + len - 3, 3) == 3) return 3;
    return 0;
}

/** `s` without surrounding white space. */
static inline airtime_str airtime_str_trim(airtime_str s) {
    const unsigned char *p = (const unsigned char *)s.ptr;
    uint32_t start = 0, end = s.len, n;
    while ((n = airtime__space_prefix(p + start, end - start)) != 0) start += n;
    while ((n = airtime__space_suffix(p + start, end - start)) != 0) end -= n;
    airtime_str out = {s.ptr + start, end - start};
    return out;
}

/** Equal ignoring ASCII case (other bytes compare exactly). */
static inline bool airtime_str_eq_ignore_ascii_case(airtime_str a, airtime_str b) {
    if (a.len != b.len) return false;
    for (uint32_t i = 0; i < a.len; i++) {
        unsigned char x = (unsigned char)a.ptr[i], y = (unsigned char)b.ptr[i];
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        if (x != y) return false;
    }
    return true;
}

/** Whether two GPU model names name the same model ("h100-sxm" is an " H100-SXM "). */
static inline bool airtime_same_model(airtime_str a, airtime_str b) {
    return airtime_str_eq_ignore_ascii_case(airtime_str_trim(a), airtime_str_trim(b));
}

/** Whether a workload's `allowed` list (comma-separated; empty entries skipped; no entries: any
 *  model) allows a GPU of `model`. */
static inline bool airtime_model_allowed(airtime_str allowed, airtime_str model) {
    bool named_any = false;
    uint32_t start = 0;
    for (uint32_t i = 0; i <= allowed.len; i++) {
        if (i < allowed.len && allowed.ptr[i] != ',') continue;
        airtime_str entry = {allowed.ptr + start, i - start};
        entry = airtime_str_trim(entry);
        if (entry.len != 0) {
            named_any = true;
            if (airtime_same_model(entry, model)) return true;
        }
        start = i + 1;
    }
    return !named_any;
}

/* ---------------------------------------------------------------------------------------------
 * Memory: a bump arena over the memory past the module's data
 * ------------------------------------------------------------------------------------------- */

/** Start of the memory past the module's data and stack (defined by wasm-ld). */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#pragma clang diagnostic ignored "-Wreserved-identifier"
extern unsigned char __heap_base;
#pragma clang diagnostic pop

/** The arena's next free byte (0: not started). Weak, so every .c file shares this one. */
extern uintptr_t airtime_arena_next;
__attribute__((weak)) uintptr_t airtime_arena_next;

/** The address the next allocation would start at, before alignment. */
static inline uintptr_t airtime_arena_top(void) {
    return airtime_arena_next != 0 ? airtime_arena_next : (uintptr_t)&__heap_base;
}

/** `len` bytes aligned to `align` (a power of two), zeroed (memory is fresh every evaluation and
 *  never reused), growing memory as needed. Never returns NULL: past the 4 GiB address space it
 *  gives up, and past the policy's memory limit memory.grow traps (memory_limit). */
static inline void *airtime_arena_alloc(uint32_t len, uint32_t align) {
    uint64_t start = ((uint64_t)airtime_arena_top() + (align - 1)) & ~(uint64_t)(align - 1);
    uint64_t end = start + len;
    uint64_t have = (uint64_t)__builtin_wasm_memory_size(0) * 65536u;
    if (end > have) {
        uint64_t pages = (end - have + 65535u) / 65536u;
        if (end > 0xFFFFFFFFull || __builtin_wasm_memory_grow(0, (size_t)pages) == (size_t)-1)
            airtime_give_up_cstr("airtime_arena_alloc: out of memory");
    }
    airtime_arena_next = (uintptr_t)end;
    return (void *)(uintptr_t)start;
}

/** What airtime_validate_params returns to refuse: the `len` bytes of UTF-8 at `message`, copied
 *  to the arena (so a stack buffer will do), packed as (ptr << 32) | len. */
static inline int64_t airtime_refuse_params(const char *message, uint32_t len) {
    if (len == 0) {
        message = "invalid parameters";
        len = airtime_cstr_len(message);
    }
    char *copy = (char *)airtime_arena_alloc(len, 1);
    airtime_copy_bytes(copy, message, len);
    return (int64_t)(((uint64_t)(uint32_t)(uintptr_t)copy << 32) | len);
}

/** A body for the airtime_alloc export: `len` bytes for the snapshot, 8-aligned. */
static inline int32_t airtime_default_alloc(int32_t len) {
    if (len < 0) airtime_give_up_cstr("airtime_alloc: negative length");
    void *buffer = airtime_arena_alloc((uint32_t)len, 8);
    return (int32_t)(uintptr_t)buffer;
}

/* ---------------------------------------------------------------------------------------------
 * Reading the snapshot
 * ------------------------------------------------------------------------------------------- */

/** A table descriptor: `count` records of `stride` bytes at `offset`. */
typedef struct airtime_table {
    uint32_t offset, count, stride;
} airtime_table;

/** The snapshot buffer and its header, as airtime_snapshot_open checked it. */
typedef struct airtime_snapshot {
    const uint8_t *bytes;
    uint32_t len;
    uint64_t now_ms;
    airtime_table tenants, nodes, gpus, workloads, settings;
    airtime_str params;    /* the policy's JSON configuration, "{}" when none */
    uint32_t scope_tenant; /* tenant index this evaluation is for; AIRTIME_NONE: the platform */
    airtime_table services; /* 1.3 */
    airtime_table arrivals; /* 1.9 */
} airtime_snapshot;

/** Why airtime_snapshot_open refused a buffer. */
enum airtime_snapshot_error {
    AIRTIME_SNAPSHOT_OK = 0,
    AIRTIME_SNAPSHOT_TOO_SHORT,
    AIRTIME_SNAPSHOT_BAD_MAGIC,
    AIRTIME_SNAPSHOT_BAD_VERSION,
    AIRTIME_SNAPSHOT_STRIDE_TOO_SMALL,
    AIRTIME_SNAPSHOT_TABLE_OUT_OF_BOUNDS,
    AIRTIME_SNAPSHOT_TOO_MANY_SETTINGS,
    AIRTIME_SNAPSHOT_BAD_SCOPE_TENANT,
    AIRTIME_SNAPSHOT_TABLE_IN_HEADER, /* 1.3: a table starts inside the header (a host older than 1.3, or than 1.9) */
};

static inline const char *airtime_snapshot_error_message(enum airtime_snapshot_error error) {
    switch (error) {
    case AIRTIME_SNAPSHOT_OK: return "ok";
    case AIRTIME_SNAPSHOT_TOO_SHORT: return "snapshot: shorter than its 104-byte header";
    case AIRTIME_SNAPSHOT_BAD_MAGIC: return "snapshot: magic is not ATSN";
    case AIRTIME_SNAPSHOT_BAD_VERSION: return "snapshot: ABI version is not 1";
    case AIRTIME_SNAPSHOT_STRIDE_TOO_SMALL: return "snapshot: a table's stride is below its record size";
    case AIRTIME_SNAPSHOT_TABLE_OUT_OF_BOUNDS: return "snapshot: a table runs past the buffer";
    case AIRTIME_SNAPSHOT_TOO_MANY_SETTINGS: return "snapshot: more than one settings record";
    case AIRTIME_SNAPSHOT_BAD_SCOPE_TENANT: return "snapshot: scope tenant names no tenant";
    case AIRTIME_SNAPSHOT_TABLE_IN_HEADER:
        return "snapshot: a table starts inside the 120-byte header (a host older than ABI 1.3 sends 88 bytes, 1.3 to 1.8 104)";
    }
    return "snapshot: unknown error";
}

static inline airtime_table airtime__table_at(const uint8_t *p) {
    airtime_table t = {airtime_get_u32(p), airtime_get_u32(p + 4), airtime_get_u32(p + 8)};
    return t;
}

static inline bool airtime__table_fits(airtime_table t, uint32_t min_stride, uint32_t len) {
    return t.stride >= min_stride && (uint64_t)t.offset + (uint64_t)t.count * t.stride <= len;
}

/** The string whose {offset, len} descriptor is at `field` in a record (or the header) of `s`.
 *  The host sends only strings inside the buffer; one that is not reads as empty. */
static inline airtime_str airtime_string_at(const airtime_snapshot *s, const uint8_t *field) {
    uint32_t offset = airtime_get_u32(field), len = airtime_get_u32(field + 4);
    airtime_str out = {"", 0};
    if (len != 0 && (uint64_t)offset + len <= s->len) {
        out.ptr = (const char *)s->bytes + offset;
        out.len = len;
    }
    return out;
}

/** Checks the header of the snapshot at `ptr..ptr+len` (magic, version, that every table lies
 *  inside the buffer, after the header, with a stride at least its record size, at most one
 *  settings record, the scope tenant) and fills `s`. Returns AIRTIME_SNAPSHOT_OK or why not.
 *  Record indexes (a workload's tenant, node and service, a GPU's holder) are the host's to get
 *  right: airtime_read_* returns false for an index that names no record. */
static inline enum airtime_snapshot_error airtime_snapshot_open(airtime_snapshot *s, const void *ptr, uint32_t len) {
    const uint8_t *b = (const uint8_t *)ptr;
    s->bytes = b;
    s->len = len;
    if (len < AIRTIME_SNAPSHOT_HEADER_SIZE) return AIRTIME_SNAPSHOT_TOO_SHORT;
    if (airtime_get_u32(b + AIRTIME_SNAP_MAGIC) != AIRTIME_SNAPSHOT_MAGIC) return AIRTIME_SNAPSHOT_BAD_MAGIC;
    if (airtime_get_u32(b + AIRTIME_SNAP_ABI_VERSION) != AIRTIME_ABI_VERSION) return AIRTIME_SNAPSHOT_BAD_VERSION;
    s->now_ms = airtime_get_u64(b + AIRTIME_SNAP_NOW_MS);
    s->tenants = airtime__table_at(b + AIRTIME_SNAP_TENANTS);
    s->nodes = airtime__table_at(b + AIRTIME_SNAP_NODES);
    s->gpus = airtime__table_at(b + AIRTIME_SNAP_GPUS);
    s->workloads = airtime__table_at(b + AIRTIME_SNAP_WORKLOADS);
    s->settings = airtime__table_at(b + AIRTIME_SNAP_SETTINGS);
    s->services = airtime__table_at(b + AIRTIME_SNAP_SERVICES);
    s->arrivals = airtime__table_at(b + AIRTIME_SNAP_ARRIVALS);
    const airtime_table *tables[7] = {&s->tenants, &s->nodes,    &s->gpus,    &s->workloads,
                                      &s->settings, &s->services, &s->arrivals};
    const uint32_t sizes[7] = {AIRTIME_TENANT_SIZE,   AIRTIME_NODE_SIZE,    AIRTIME_GPU_SIZE,    AIRTIME_WORKLOAD_SIZE,
                               AIRTIME_SETTINGS_SIZE, AIRTIME_SERVICE_SIZE, AIRTIME_ARRIVAL_SIZE};
    for (int i = 0; i < 7; i++) {
        if (tables[i]->stride < sizes[i]) return AIRTIME_SNAPSHOT_STRIDE_TOO_SMALL;
        if (tables[i]->count != 0 && tables[i]->offset < AIRTIME_SNAPSHOT_HEADER_SIZE)
            return AIRTIME_SNAPSHOT_TABLE_IN_HEADER;
        if (!airtime__table_fits(*tables[i], sizes[i], len)) return AIRTIME_SNAPSHOT_TABLE_OUT_OF_BOUNDS;
    }
    if (s->settings.count > 1) return AIRTIME_SNAPSHOT_TOO_MANY_SETTINGS;
    s->params = airtime_string_at(s, b + AIRTIME_SNAP_PARAMS);
    s->scope_tenant = airtime_get_u32(b + AIRTIME_SNAP_SCOPE_TENANT);
    if (s->scope_tenant != AIRTIME_NONE && s->scope_tenant >= s->tenants.count) return AIRTIME_SNAPSHOT_BAD_SCOPE_TENANT;
    return AIRTIME_SNAPSHOT_OK;
}

/** The bytes of record `i` of table `t`, or NULL past its end. */
static inline const uint8_t *airtime_record(const airtime_snapshot *s, airtime_table t, uint32_t i) {
    if (i >= t.count) return NULL;
    return s->bytes + t.offset + (size_t)i * t.stride;
}

/* Records, decoded. Read one with airtime_read_*: false when the index names no record. */

/* generated: records (from sdk/src/abi.rs by `cargo run -p airtime-policy-sdk --bin abi-gen`; do not edit) */
typedef struct airtime_tenant {
    airtime_str name;
    uint32_t guaranteed_gpus;
    uint32_t weight;
    uint32_t running_gpus;
    int32_t tier;
    float decayed_gpu_hours;
    uint32_t flags; /* AIRTIME_TENANT_FLAG_* */
    uint32_t running_gpu_milli;
    uint32_t gpu_limit;
} airtime_tenant;

/** The tenant at index `i`; false when the index names no tenant. */
static inline bool airtime_read_tenant(const airtime_snapshot *s, uint32_t i, airtime_tenant *out) {
    const uint8_t *r = airtime_record(s, s->tenants, i);
    if (r == NULL) return false;
    out->name = airtime_string_at(s, r + AIRTIME_TENANT_NAME);
    out->guaranteed_gpus = airtime_get_u32(r + AIRTIME_TENANT_GUARANTEED_GPUS);
    out->weight = airtime_get_u32(r + AIRTIME_TENANT_WEIGHT);
    out->running_gpus = airtime_get_u32(r + AIRTIME_TENANT_RUNNING_GPUS);
    out->tier = airtime_get_i32(r + AIRTIME_TENANT_TIER);
    out->decayed_gpu_hours = airtime_get_f32(r + AIRTIME_TENANT_DECAYED_GPU_HOURS);
    out->flags = airtime_get_u32(r + AIRTIME_TENANT_FLAGS);
    out->running_gpu_milli = airtime_get_u32(r + AIRTIME_TENANT_RUNNING_GPU_MILLI);
    out->gpu_limit = airtime_get_u32(r + AIRTIME_TENANT_GPU_LIMIT);
    return true;
}

typedef struct airtime_node {
    airtime_str name;
    uint32_t state; /* enum airtime_node_state */
    uint32_t cpu_millis;
    uint32_t cpu_millis_free;
    uint32_t memory_mb;
    uint32_t memory_mb_free;
    uint32_t gpu_first;
    uint32_t gpu_count;
    float cost_per_hour;
    float cpu_util;
    uint32_t flags; /* AIRTIME_NODE_FLAG_* */
} airtime_node;

/** The node at index `i`; false when the index names no node. */
static inline bool airtime_read_node(const airtime_snapshot *s, uint32_t i, airtime_node *out) {
    const uint8_t *r = airtime_record(s, s->nodes, i);
    if (r == NULL) return false;
    out->name = airtime_string_at(s, r + AIRTIME_NODE_NAME);
    out->state = airtime_get_u32(r + AIRTIME_NODE_STATE);
    out->cpu_millis = airtime_get_u32(r + AIRTIME_NODE_CPU_MILLIS);
    out->cpu_millis_free = airtime_get_u32(r + AIRTIME_NODE_CPU_MILLIS_FREE);
    out->memory_mb = airtime_get_u32(r + AIRTIME_NODE_MEMORY_MB);
    out->memory_mb_free = airtime_get_u32(r + AIRTIME_NODE_MEMORY_MB_FREE);
    out->gpu_first = airtime_get_u32(r + AIRTIME_NODE_GPU_FIRST);
    out->gpu_count = airtime_get_u32(r + AIRTIME_NODE_GPU_COUNT);
    out->cost_per_hour = airtime_get_f32(r + AIRTIME_NODE_COST_PER_HOUR);
    out->cpu_util = airtime_get_f32(r + AIRTIME_NODE_CPU_UTIL);
    out->flags = airtime_get_u32(r + AIRTIME_NODE_FLAGS);
    return true;
}

typedef struct airtime_gpu {
    uint32_t node;
    uint32_t device_index;
    airtime_str model;
    uint32_t memory_mb;
    uint32_t memory_used_mb;
    float util;
    uint32_t nvlink_group; /* AIRTIME_NONE when absent */
    uint32_t holder; /* AIRTIME_NONE when absent */
    uint32_t flags; /* AIRTIME_GPU_FLAG_* */
    uint32_t sharing; /* enum airtime_sharing */
    uint32_t free_milli;
    uint32_t memory_reserved_mb;
    uint32_t sharers;
    airtime_str mig_profile;
} airtime_gpu;

/** The gpu at index `i`; false when the index names no gpu. */
static inline bool airtime_read_gpu(const airtime_snapshot *s, uint32_t i, airtime_gpu *out) {
    const uint8_t *r = airtime_record(s, s->gpus, i);
    if (r == NULL) return false;
    out->node = airtime_get_u32(r + AIRTIME_GPU_NODE);
    out->device_index = airtime_get_u32(r + AIRTIME_GPU_DEVICE_INDEX);
    out->model = airtime_string_at(s, r + AIRTIME_GPU_MODEL);
    out->memory_mb = airtime_get_u32(r + AIRTIME_GPU_MEMORY_MB);
    out->memory_used_mb = airtime_get_u32(r + AIRTIME_GPU_MEMORY_USED_MB);
    out->util = airtime_get_f32(r + AIRTIME_GPU_UTIL);
    out->nvlink_group = airtime_get_u32(r + AIRTIME_GPU_NVLINK_GROUP);
    out->holder = airtime_get_u32(r + AIRTIME_GPU_HOLDER);
    out->flags = airtime_get_u32(r + AIRTIME_GPU_FLAGS);
    out->sharing = airtime_get_u32(r + AIRTIME_GPU_SHARING);
    out->free_milli = airtime_get_u32(r + AIRTIME_GPU_FREE_MILLI);
    out->memory_reserved_mb = airtime_get_u32(r + AIRTIME_GPU_MEMORY_RESERVED_MB);
    out->sharers = airtime_get_u32(r + AIRTIME_GPU_SHARERS);
    out->mig_profile = airtime_string_at(s, r + AIRTIME_GPU_MIG_PROFILE);
    return true;
}

typedef struct airtime_workload {
    airtime_str id;
    airtime_str name;
    uint32_t tenant;
    uint32_t class_; /* enum airtime_workload_class */
    uint32_t state; /* enum airtime_workload_state */
    int32_t priority;
    uint32_t gpu_count;
    uint32_t gpu_memory_mb;
    airtime_str gpu_models;
    uint32_t cpu_millis;
    uint32_t memory_mb;
    uint64_t submitted_ms;
    uint64_t started_ms;
    uint32_t node; /* AIRTIME_NONE when absent */
    uint32_t flags; /* AIRTIME_WORKLOAD_FLAG_* */
    uint32_t expected_duration_s;
    uint32_t preemptions_last_hour;
    uint32_t gpu_milli;
    airtime_str mig_profile;
    uint32_t service; /* AIRTIME_NONE when absent */
    uint32_t replica_variant; /* enum airtime_replica_variant */
    uint32_t gang_size;
    uint32_t gang_rank;
    airtime_str gang_id;
} airtime_workload;

/** The workload at index `i`; false when the index names no workload. */
static inline bool airtime_read_workload(const airtime_snapshot *s, uint32_t i, airtime_workload *out) {
    const uint8_t *r = airtime_record(s, s->workloads, i);
    if (r == NULL) return false;
    out->id = airtime_string_at(s, r + AIRTIME_WORKLOAD_ID);
    out->name = airtime_string_at(s, r + AIRTIME_WORKLOAD_NAME);
    out->tenant = airtime_get_u32(r + AIRTIME_WORKLOAD_TENANT);
    out->class_ = airtime_get_u32(r + AIRTIME_WORKLOAD_CLASS);
    out->state = airtime_get_u32(r + AIRTIME_WORKLOAD_STATE);
    out->priority = airtime_get_i32(r + AIRTIME_WORKLOAD_PRIORITY);
    out->gpu_count = airtime_get_u32(r + AIRTIME_WORKLOAD_GPU_COUNT);
    out->gpu_memory_mb = airtime_get_u32(r + AIRTIME_WORKLOAD_GPU_MEMORY_MB);
    out->gpu_models = airtime_string_at(s, r + AIRTIME_WORKLOAD_GPU_MODELS);
    out->cpu_millis = airtime_get_u32(r + AIRTIME_WORKLOAD_CPU_MILLIS);
    out->memory_mb = airtime_get_u32(r + AIRTIME_WORKLOAD_MEMORY_MB);
    out->submitted_ms = airtime_get_u64(r + AIRTIME_WORKLOAD_SUBMITTED_MS);
    out->started_ms = airtime_get_u64(r + AIRTIME_WORKLOAD_STARTED_MS);
    out->node = airtime_get_u32(r + AIRTIME_WORKLOAD_NODE);
    out->flags = airtime_get_u32(r + AIRTIME_WORKLOAD_FLAGS);
    out->expected_duration_s = airtime_get_u32(r + AIRTIME_WORKLOAD_EXPECTED_DURATION_S);
    out->preemptions_last_hour = airtime_get_u32(r + AIRTIME_WORKLOAD_PREEMPTIONS_LAST_HOUR);
    out->gpu_milli = airtime_get_u32(r + AIRTIME_WORKLOAD_GPU_MILLI);
    out->mig_profile = airtime_string_at(s, r + AIRTIME_WORKLOAD_MIG_PROFILE);
    out->service = airtime_get_u32(r + AIRTIME_WORKLOAD_SERVICE);
    out->replica_variant = airtime_get_u32(r + AIRTIME_WORKLOAD_REPLICA_VARIANT);
    out->gang_size = airtime_get_u32(r + AIRTIME_WORKLOAD_GANG_SIZE);
    out->gang_rank = airtime_get_u32(r + AIRTIME_WORKLOAD_GANG_RANK);
    out->gang_id = airtime_string_at(s, r + AIRTIME_WORKLOAD_GANG_ID);
    return true;
}

typedef struct airtime_settings {
    uint32_t burst_reserve_gpus;
    uint32_t realtime_first;
    uint32_t min_runtime_s;
    uint32_t grace_period_s;
    uint32_t max_preemptions_per_hour;
    int32_t night_training_bonus;
    uint32_t flags; /* AIRTIME_SETTINGS_FLAG_* */
} airtime_settings;

/** The settings record; false when the snapshot has none. */
static inline bool airtime_read_settings(const airtime_snapshot *s, airtime_settings *out) {
    const uint8_t *r = airtime_record(s, s->settings, 0);
    if (r == NULL) return false;
    out->burst_reserve_gpus = airtime_get_u32(r + AIRTIME_SETTINGS_BURST_RESERVE_GPUS);
    out->realtime_first = airtime_get_u32(r + AIRTIME_SETTINGS_REALTIME_FIRST);
    out->min_runtime_s = airtime_get_u32(r + AIRTIME_SETTINGS_MIN_RUNTIME_S);
    out->grace_period_s = airtime_get_u32(r + AIRTIME_SETTINGS_GRACE_PERIOD_S);
    out->max_preemptions_per_hour = airtime_get_u32(r + AIRTIME_SETTINGS_MAX_PREEMPTIONS_PER_HOUR);
    out->night_training_bonus = airtime_get_i32(r + AIRTIME_SETTINGS_NIGHT_TRAINING_BONUS);
    out->flags = airtime_get_u32(r + AIRTIME_SETTINGS_FLAGS);
    return true;
}

typedef struct airtime_service {
    airtime_str name;
    uint32_t tenant;
    uint32_t class_; /* enum airtime_workload_class */
    uint32_t metric; /* enum airtime_load_metric */
    uint32_t min_replicas;
    uint32_t max_replicas;
    float capacity;
    float cpu_capacity;
    float demand;
    float latest;
    uint32_t desired_gpu;
    uint32_t desired_cpu;
    uint32_t placed_gpu;
    uint32_t placed_cpu;
    uint32_t pending_gpu;
    uint32_t pending_cpu;
    uint32_t gpu_milli_per_replica;
    uint32_t flags; /* AIRTIME_SERVICE_FLAG_* */
} airtime_service;

/** The service at index `i`; false when the index names no service. */
static inline bool airtime_read_service(const airtime_snapshot *s, uint32_t i, airtime_service *out) {
    const uint8_t *r = airtime_record(s, s->services, i);
    if (r == NULL) return false;
    out->name = airtime_string_at(s, r + AIRTIME_SERVICE_NAME);
    out->tenant = airtime_get_u32(r + AIRTIME_SERVICE_TENANT);
    out->class_ = airtime_get_u32(r + AIRTIME_SERVICE_CLASS);
    out->metric = airtime_get_u32(r + AIRTIME_SERVICE_METRIC);
    out->min_replicas = airtime_get_u32(r + AIRTIME_SERVICE_MIN_REPLICAS);
    out->max_replicas = airtime_get_u32(r + AIRTIME_SERVICE_MAX_REPLICAS);
    out->capacity = airtime_get_f32(r + AIRTIME_SERVICE_CAPACITY);
    out->cpu_capacity = airtime_get_f32(r + AIRTIME_SERVICE_CPU_CAPACITY);
    out->demand = airtime_get_f32(r + AIRTIME_SERVICE_DEMAND);
    out->latest = airtime_get_f32(r + AIRTIME_SERVICE_LATEST);
    out->desired_gpu = airtime_get_u32(r + AIRTIME_SERVICE_DESIRED_GPU);
    out->desired_cpu = airtime_get_u32(r + AIRTIME_SERVICE_DESIRED_CPU);
    out->placed_gpu = airtime_get_u32(r + AIRTIME_SERVICE_PLACED_GPU);
    out->placed_cpu = airtime_get_u32(r + AIRTIME_SERVICE_PLACED_CPU);
    out->pending_gpu = airtime_get_u32(r + AIRTIME_SERVICE_PENDING_GPU);
    out->pending_cpu = airtime_get_u32(r + AIRTIME_SERVICE_PENDING_CPU);
    out->gpu_milli_per_replica = airtime_get_u32(r + AIRTIME_SERVICE_GPU_MILLI_PER_REPLICA);
    out->flags = airtime_get_u32(r + AIRTIME_SERVICE_FLAGS);
    return true;
}

typedef struct airtime_arrival {
    uint32_t gpu_milli;
    uint32_t gpu_count;
    uint32_t cpu_millis;
    uint32_t count;
    airtime_str gpu_models;
} airtime_arrival;

/** The arrival at index `i`; false when the index names no arrival. */
static inline bool airtime_read_arrival(const airtime_snapshot *s, uint32_t i, airtime_arrival *out) {
    const uint8_t *r = airtime_record(s, s->arrivals, i);
    if (r == NULL) return false;
    out->gpu_milli = airtime_get_u32(r + AIRTIME_ARRIVAL_GPU_MILLI);
    out->gpu_count = airtime_get_u32(r + AIRTIME_ARRIVAL_GPU_COUNT);
    out->cpu_millis = airtime_get_u32(r + AIRTIME_ARRIVAL_CPU_MILLIS);
    out->count = airtime_get_u32(r + AIRTIME_ARRIVAL_COUNT);
    out->gpu_models = airtime_string_at(s, r + AIRTIME_ARRIVAL_GPU_MODELS);
    return true;
}

/* end generated: records */

/** GPU memory free by live telemetry (memory_mb - memory_used_mb, never below 0): what a
 *  placement's gpu_memory_mb is checked against. */
static inline uint32_t airtime_gpu_memory_free_mb(const airtime_gpu *g) {
    return g->memory_used_mb >= g->memory_mb ? 0 : g->memory_mb - g->memory_used_mb;
}

/** Whether workload `w` is this evaluation's to decide: every workload in the platform scope,
 *  only the scope tenant's own in a tenant scope. (The host sends a tenant's policy only that
 *  tenant's workloads; checking costs nothing and keeps a policy correct on any snapshot.) */
static inline bool airtime_in_scope(const airtime_snapshot *s, const airtime_workload *w) {
    return s->scope_tenant == AIRTIME_NONE || w->tenant == s->scope_tenant;
}

/* ---------------------------------------------------------------------------------------------
 * Writing decisions
 *
 * The decision buffer is built in the arena: airtime_writer_init reserves the header and room for
 * `capacity` records, and everything allocated after it (GPU lists, reason bytes) lies past the
 * records; airtime_writer_finish returns the whole range from the header to the arena's top as
 * the output. So allocate scratch memory before airtime_writer_init, or it travels (harmlessly)
 * in the output. A workload takes at most one decision, so the workload count is a capacity that
 * always suffices.
 *
 * A decision's reason is appended with airtime_reason_* after the decision is added, and belongs
 * to the last decision added. Reasons must be UTF-8 (the host refuses the whole buffer otherwise);
 * snapshot strings and ASCII text are. The host keeps the first 500 characters.
 * ------------------------------------------------------------------------------------------- */

typedef struct airtime_writer {
    uint8_t *base;     /* the decision buffer: header, then records */
    uint32_t capacity; /* records reserved */
    uint32_t count;    /* records written */
} airtime_writer;

/** Starts a decision buffer with room for `capacity` decisions. */
static inline void airtime_writer_init(airtime_writer *w, uint32_t capacity) {
    uint64_t size = AIRTIME_DECISIONS_HEADER_SIZE + (uint64_t)capacity * AIRTIME_DECISION_SIZE;
    if (size > 0xFFFFFFFFull) airtime_give_up_cstr("airtime_writer_init: capacity too large");
    w->base = (uint8_t *)airtime_arena_alloc((uint32_t)size, 8);
    w->capacity = capacity;
    w->count = 0;
    airtime_put_u32(w->base, AIRTIME_DECISIONS_MAGIC);
    airtime_put_u32(w->base + 4, 0);
}

/** Offset of `p` (inside the buffer) from the buffer's start. */
static inline uint32_t airtime__writer_offset(const airtime_writer *w, const void *p) {
    return (uint32_t)((const uint8_t *)p - w->base);
}

static inline uint8_t *airtime__decision(airtime_writer *w, uint32_t kind, uint32_t workload, uint32_t node) {
    if (w->count >= w->capacity) airtime_give_up_cstr("airtime_writer: more decisions than its capacity");
    uint8_t *r = w->base + AIRTIME_DECISIONS_HEADER_SIZE + (size_t)w->count * AIRTIME_DECISION_SIZE;
    airtime_put_u32(r + AIRTIME_DECISION_KIND, kind);
    airtime_put_u32(r + AIRTIME_DECISION_WORKLOAD, workload);
    airtime_put_u32(r + AIRTIME_DECISION_NODE, node);
    airtime_put_u32(r + AIRTIME_DECISION_RESERVED, 0);
    airtime_put_u32(r + AIRTIME_DECISION_GPUS, 0);
    airtime_put_u32(r + AIRTIME_DECISION_GPUS + 4, 0);
    airtime_put_u32(r + AIRTIME_DECISION_REASON, 0);
    airtime_put_u32(r + AIRTIME_DECISION_REASON + 4, 0);
    w->count++;
    airtime_put_u32(w->base + 4, w->count);
    return r;
}

/** Place workload `workload` on node `node` with the `gpu_len` GPU indexes (into the gpus table)
 *  at `gpus` (copied; any memory will do). gpu_len 0 is a CPU placement. */
static inline void airtime_place(airtime_writer *w, uint32_t workload, uint32_t node, const uint32_t *gpus,
                                 uint32_t gpu_len) {
    if (node == AIRTIME_NONE) airtime_give_up_cstr("airtime_place: a placement names a node");
    uint8_t *r = airtime__decision(w, AIRTIME_KIND_PLACE, workload, node);
    if (gpu_len != 0) {
        if (gpu_len > 0x3FFFFFFFu) airtime_give_up_cstr("airtime_place: GPU list too long");
        uint8_t *list = (uint8_t *)airtime_arena_alloc(gpu_len * 4u, 4);
        for (uint32_t i = 0; i < gpu_len; i++) airtime_put_u32(list + 4 * i, gpus[i]);
        airtime_put_u32(r + AIRTIME_DECISION_GPUS, airtime__writer_offset(w, list));
        airtime_put_u32(r + AIRTIME_DECISION_GPUS + 4, gpu_len);
    }
}

/** Preempt running, preemptible workload `workload` (it is requeued). */
static inline void airtime_preempt(airtime_writer *w, uint32_t workload) {
    airtime__decision(w, AIRTIME_KIND_PREEMPT, workload, AIRTIME_NONE);
}

/** Keep pending workload `workload` waiting; its reason answers "why is my job pending?". */
static inline void airtime_keep_pending(airtime_writer *w, uint32_t workload) {
    airtime__decision(w, AIRTIME_KIND_KEEP_PENDING, workload, AIRTIME_NONE);
}

/** Appends `len` bytes of UTF-8 to the reason of the last decision added. */
static inline void airtime_reason_bytes(airtime_writer *w, const char *text, uint32_t len) {
    if (w->count == 0) airtime_give_up_cstr("airtime_reason: no decision to give a reason to");
    if (len == 0) return;
    uint8_t *r = w->base + AIRTIME_DECISIONS_HEADER_SIZE + (size_t)(w->count - 1) * AIRTIME_DECISION_SIZE;
    uint32_t offset = airtime_get_u32(r + AIRTIME_DECISION_REASON);
    uint32_t have = airtime_get_u32(r + AIRTIME_DECISION_REASON + 4);
    if (have != 0 && (uintptr_t)(w->base + offset + have) == airtime_arena_top()) {
        /* The reason ends at the arena's top: extend it in place. */
        airtime_copy_bytes(airtime_arena_alloc(len, 1), text, len);
    } else {
        /* First text, or something was allocated since: (re)start the reason at the top. */
        uint8_t *fresh = (uint8_t *)airtime_arena_alloc(have + len, 1);
        if (have != 0) airtime_copy_bytes(fresh, w->base + offset, have);
        airtime_copy_bytes(fresh + have, text, len);
        offset = airtime__writer_offset(w, fresh);
    }
    airtime_put_u32(r + AIRTIME_DECISION_REASON, offset);
    airtime_put_u32(r + AIRTIME_DECISION_REASON + 4, have + len);
}
static inline void airtime_reason_cstr(airtime_writer *w, const char *text) {
    airtime_reason_bytes(w, text, airtime_cstr_len(text));
}
static inline void airtime_reason_str(airtime_writer *w, airtime_str text) {
    airtime_reason_bytes(w, text.ptr, text.len);
}
static inline void airtime_reason_u32(airtime_writer *w, uint32_t v) {
    char digits[10];
    airtime_reason_bytes(w, digits, airtime_format_u32(digits, v));
}
static inline void airtime_reason_u64(airtime_writer *w, uint64_t v) {
    char digits[20];
    airtime_reason_bytes(w, digits, airtime_format_u64(digits, v));
}
static inline void airtime_reason_i64(airtime_writer *w, int64_t v) {
    char digits[21];
    airtime_reason_bytes(w, digits, airtime_format_i64(digits, v));
}

/** The value airtime_evaluate returns: (out_ptr << 32) | out_len, the buffer from the header to
 *  the arena's top. */
static inline int64_t airtime_writer_finish(const airtime_writer *w) {
    uint32_t out_ptr = (uint32_t)(uintptr_t)w->base;
    uint32_t out_len = (uint32_t)(airtime_arena_top() - (uintptr_t)w->base);
    return (int64_t)(((uint64_t)out_ptr << 32) | out_len);
}

#ifdef __cplusplus
}
#endif

#endif /* AIRTIME_POLICY_H */
