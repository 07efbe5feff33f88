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

/* Record sizes: the minimum stride of each table (abi.rs *_SIZE). */
#define AIRTIME_SNAPSHOT_HEADER_SIZE 104u
/** The header guests before ABI 1.3 read (they ignore the 16 bytes after it). */
#define AIRTIME_SNAPSHOT_HEADER_SIZE_1_2 88u
#define AIRTIME_TENANT_SIZE 40u
#define AIRTIME_NODE_SIZE 48u
#define AIRTIME_GPU_SIZE 64u
#define AIRTIME_WORKLOAD_SIZE 112u
/** A whole GPU in thousandths: the unit of shares (ABI 1.2). */
#define AIRTIME_WHOLE_GPU_MILLI 1000u
#define AIRTIME_SETTINGS_SIZE 32u
/** A service record (ABI 1.3). */
#define AIRTIME_SERVICE_SIZE 80u
#define AIRTIME_DECISIONS_HEADER_SIZE 8u
/** Decision records have no stride: exactly 32 bytes in version 1. */
#define AIRTIME_DECISION_SIZE 32u

/* Descriptors inside a record. */
#define AIRTIME_TABLE_DESCRIPTOR_SIZE 12u  /* {offset u32, count u32, stride u32} */
#define AIRTIME_STRING_DESCRIPTOR_SIZE 8u  /* {offset u32, len u32} */

/* Snapshot header, 104 bytes (1.0 to 1.2 guests read the first 88): field offsets. */
#define AIRTIME_SNAP_MAGIC 0u         /* 4 bytes "ATSN" */
#define AIRTIME_SNAP_ABI_VERSION 4u   /* u32, = 1 */
#define AIRTIME_SNAP_NOW_MS 8u        /* u64, Unix ms given by the host (the guest has no clock) */
#define AIRTIME_SNAP_TENANTS 16u      /* table */
#define AIRTIME_SNAP_NODES 28u        /* table */
#define AIRTIME_SNAP_GPUS 40u         /* table */
#define AIRTIME_SNAP_WORKLOADS 52u    /* table */
#define AIRTIME_SNAP_SETTINGS 64u     /* table, 0 or 1 record */
#define AIRTIME_SNAP_PARAMS 76u       /* string: the policy's JSON configuration, "{}" when none */
#define AIRTIME_SNAP_SCOPE_TENANT 84u /* u32 tenant index this evaluation is for; NONE: platform */
#define AIRTIME_SNAP_SERVICES 88u     /* table, 1.3: elastic inference services */
#define AIRTIME_SNAP_RESERVED 100u    /* u32, 1.3: 0 */

/* Tenant, 40 bytes (1.0/1.1 guests read the first 32). */
#define AIRTIME_TENANT_NAME 0u              /* string */
#define AIRTIME_TENANT_GUARANTEED_GPUS 8u   /* u32 */
#define AIRTIME_TENANT_WEIGHT 12u           /* u32 */
#define AIRTIME_TENANT_RUNNING_GPUS 16u     /* u32: GPUs its running workloads hold now */
#define AIRTIME_TENANT_TIER 20u             /* i32: higher is more important */
#define AIRTIME_TENANT_DECAYED_GPU_HOURS 24u /* f32: usage history, half-life decayed */
#define AIRTIME_TENANT_FLAGS 28u            /* u32 */
#define AIRTIME_TENANT_FLAG_MAY_BORROW 0x1u /* may borrow idle capacity */
#define AIRTIME_TENANT_RUNNING_GPU_MILLI 32u /* u32, 1.2: thousandths of a GPU held (a quarter share: 250) */
#define AIRTIME_TENANT_RESERVED 36u         /* u32 */

/* Node, 48 bytes. */
#define AIRTIME_NODE_NAME 0u             /* string */
#define AIRTIME_NODE_STATE 8u            /* u32: enum airtime_node_state */
#define AIRTIME_NODE_CPU_MILLIS 12u      /* u32: total */
#define AIRTIME_NODE_CPU_MILLIS_FREE 16u /* u32: not reserved by running workloads */
#define AIRTIME_NODE_MEMORY_MB 20u       /* u32: total */
#define AIRTIME_NODE_MEMORY_MB_FREE 24u  /* u32 */
#define AIRTIME_NODE_GPU_FIRST 28u       /* u32: index of its first GPU in the gpus table */
#define AIRTIME_NODE_GPU_COUNT 32u       /* u32: its GPUs are gpu_first .. gpu_first + gpu_count */
#define AIRTIME_NODE_COST_PER_HOUR 36u   /* f32, USD */
#define AIRTIME_NODE_CPU_UTIL 40u        /* f32, 0..1, live */
#define AIRTIME_NODE_FLAGS 44u           /* u32 */
#define AIRTIME_NODE_FLAG_SIMULATED 0x1u /* simulated GPUs */
#define AIRTIME_NODE_FLAG_CONTAINERS 0x2u /* 1.4: runs container workloads */

/* GPU, 64 bytes (1.0/1.1 guests read the first 40): a whole GPU or a MIG instance. */
#define AIRTIME_GPU_NODE 0u             /* u32: node index */
#define AIRTIME_GPU_DEVICE_INDEX 4u     /* u32: on its node, as CUDA_VISIBLE_DEVICES counts */
#define AIRTIME_GPU_MODEL 8u            /* string */
#define AIRTIME_GPU_MEMORY_MB 16u       /* u32: total */
#define AIRTIME_GPU_MEMORY_USED_MB 20u  /* u32: live telemetry */
#define AIRTIME_GPU_UTIL 24u            /* f32, 0..1, live */
#define AIRTIME_GPU_NVLINK_GROUP 28u    /* u32: same value, same NVLink domain; NONE unknown */
#define AIRTIME_GPU_HOLDER 32u          /* u32: workload index holding it (a shared GPU: the first sharer), NONE when free */
#define AIRTIME_GPU_FLAGS 36u           /* u32 */
#define AIRTIME_GPU_FLAG_SIMULATED 0x1u
#define AIRTIME_GPU_SHARING 40u             /* u32, 1.2: enum airtime_sharing */
#define AIRTIME_GPU_FREE_MILLI 44u          /* u32, 1.2: thousandths no workload holds (1000 free) */
#define AIRTIME_GPU_MEMORY_RESERVED_MB 48u  /* u32, 1.2: memory slices of its sharers */
#define AIRTIME_GPU_SHARERS 52u             /* u32, 1.2: workloads holding a share */
#define AIRTIME_GPU_MIG_PROFILE 56u         /* string, 1.2: a MIG instance's profile; empty otherwise */

/* Workload, 112 bytes (the pending and running workloads of the scope; 1.0/1.1 guests read 88,
 * 1.2 guests 104). */
#define AIRTIME_WORKLOAD_ID 0u                   /* string: UUID text */
#define AIRTIME_WORKLOAD_NAME 8u                 /* string */
#define AIRTIME_WORKLOAD_TENANT 16u              /* u32: tenant index */
#define AIRTIME_WORKLOAD_CLASS 20u               /* u32: enum airtime_workload_class */
#define AIRTIME_WORKLOAD_STATE 24u               /* u32: enum airtime_workload_state */
#define AIRTIME_WORKLOAD_PRIORITY 28u            /* i32: higher first */
#define AIRTIME_WORKLOAD_GPU_COUNT 32u           /* u32 */
#define AIRTIME_WORKLOAD_GPU_MEMORY_MB 36u       /* u32: needed on each GPU */
#define AIRTIME_WORKLOAD_GPU_MODELS 40u          /* string: comma-separated allowed models; empty: any */
#define AIRTIME_WORKLOAD_CPU_MILLIS 48u          /* u32: host CPU needed on the node, by any placement */
#define AIRTIME_WORKLOAD_MEMORY_MB 52u           /* u32: host memory needed, by any placement */
#define AIRTIME_WORKLOAD_SUBMITTED_MS 56u        /* u64 */
#define AIRTIME_WORKLOAD_STARTED_MS 64u          /* u64: 0 when not running */
#define AIRTIME_WORKLOAD_NODE 72u                /* u32: node index (running only), else NONE */
#define AIRTIME_WORKLOAD_FLAGS 76u               /* u32 */
#define AIRTIME_WORKLOAD_EXPECTED_DURATION_S 80u /* u32: 0 unknown */
#define AIRTIME_WORKLOAD_PREEMPTIONS_LAST_HOUR 84u /* u32, 1.5: at the settings' cap the host refuses another */
#define AIRTIME_WORKLOAD_GPU_MILLI 88u           /* u32, 1.2: share of each GPU; 1000 whole, less: a share of one */
#define AIRTIME_WORKLOAD_MIG_PROFILE 92u         /* string, 1.2: MIG profile it must run on; empty: none */
#define AIRTIME_WORKLOAD_RESERVED_2 100u         /* u32 */
#define AIRTIME_WORKLOAD_SERVICE 104u            /* u32, 1.3: service index it is a replica of; NONE: a job */
#define AIRTIME_WORKLOAD_REPLICA_VARIANT 108u    /* u32, 1.3: enum airtime_replica_variant */
#define AIRTIME_WORKLOAD_FLAG_PREEMPTIBLE 0x1u
#define AIRTIME_WORKLOAD_FLAG_CHECKPOINTABLE 0x2u
#define AIRTIME_WORKLOAD_FLAG_CPU_CAPABLE 0x4u
/** All GPUs on one node. Every placement in version 1 names one node, so it always holds. */
#define AIRTIME_WORKLOAD_FLAG_GANG 0x8u
#define AIRTIME_WORKLOAD_FLAG_CONTAINER 0x10u /* 1.4: runs in an OCI image; only on a node with AIRTIME_NODE_FLAG_CONTAINERS */

/* Settings, 32 bytes (the platform's priority settings). */
#define AIRTIME_SETTINGS_BURST_RESERVE_GPUS 0u       /* u32: kept free for real-time inference */
#define AIRTIME_SETTINGS_REALTIME_FIRST 4u           /* u32: 1, customer-facing inference first */
#define AIRTIME_SETTINGS_MIN_RUNTIME_S 8u            /* u32: before a workload may be preempted */
#define AIRTIME_SETTINGS_GRACE_PERIOD_S 12u          /* u32 */
#define AIRTIME_SETTINGS_MAX_PREEMPTIONS_PER_HOUR 16u /* u32 */
#define AIRTIME_SETTINGS_NIGHT_TRAINING_BONUS 20u    /* i32: 0 outside the night window */
#define AIRTIME_SETTINGS_FLAGS 24u                   /* u32, 1.5: AIRTIME_SETTINGS_FLAG_* */
#define AIRTIME_SETTINGS_FLAG_CHECKPOINTABLE_ONLY 0x1u /* 1.5: only checkpointable work may be preempted */

/* Service, 80 bytes (ABI 1.3): an elastic inference service of the scope and the host's
 * autoscaler plan for it. Its replicas are ordinary workloads naming it (AIRTIME_WORKLOAD_SERVICE);
 * the host has already started the replicas the plan adds, as pending workloads. */
#define AIRTIME_SERVICE_NAME 0u                   /* string */
#define AIRTIME_SERVICE_TENANT 8u                 /* u32: tenant index */
#define AIRTIME_SERVICE_CLASS 12u                 /* u32: enum airtime_workload_class of its replicas */
#define AIRTIME_SERVICE_METRIC 16u                /* u32: enum airtime_load_metric */
#define AIRTIME_SERVICE_MIN_REPLICAS 20u          /* u32 */
#define AIRTIME_SERVICE_MAX_REPLICAS 24u          /* u32 */
#define AIRTIME_SERVICE_CAPACITY 28u              /* f32: load one GPU replica carries */
#define AIRTIME_SERVICE_CPU_CAPACITY 32u          /* f32: load one CPU replica carries; 0: no CPU variant */
#define AIRTIME_SERVICE_DEMAND 36u                /* f32: load the autoscaler provisions for; 0 stale or draining */
#define AIRTIME_SERVICE_LATEST 40u                /* f32: newest report's load; 0 when none */
#define AIRTIME_SERVICE_DESIRED_GPU 44u           /* u32: GPU replicas wanted */
#define AIRTIME_SERVICE_DESIRED_CPU 48u           /* u32: CPU replicas wanted */
#define AIRTIME_SERVICE_PLACED_GPU 52u            /* u32: GPU replicas scheduled or running */
#define AIRTIME_SERVICE_PLACED_CPU 56u            /* u32 */
#define AIRTIME_SERVICE_PENDING_GPU 60u           /* u32: GPU replicas waiting for a place */
#define AIRTIME_SERVICE_PENDING_CPU 64u           /* u32 */
#define AIRTIME_SERVICE_GPU_MILLI_PER_REPLICA 68u /* u32: thousandths of a GPU one GPU replica holds */
#define AIRTIME_SERVICE_FLAGS 72u                 /* u32 */
#define AIRTIME_SERVICE_RESERVED 76u              /* u32 */
#define AIRTIME_SERVICE_FLAG_CPU_VARIANT 0x1u     /* has a CPU variant */
#define AIRTIME_SERVICE_FLAG_DRAINING 0x2u        /* deleted: every replica drains */
#define AIRTIME_SERVICE_FLAG_STALE 0x4u           /* no recent report: the replicas are held */

/* Decision record, 32 bytes, after the 8-byte header {magic "ATDC", count u32}. */
#define AIRTIME_DECISION_KIND 0u     /* u32: enum airtime_decision_kind */
#define AIRTIME_DECISION_WORKLOAD 4u /* u32: workload index */
#define AIRTIME_DECISION_NODE 8u     /* u32: node index for a place, else NONE */
#define AIRTIME_DECISION_RESERVED 12u /* u32: 0 */
#define AIRTIME_DECISION_GPUS 16u    /* {offset u32, len u32}: u32 GPU indexes; len counts GPUs */
#define AIRTIME_DECISION_REASON 24u  /* string: why, in words the tenant reads */

/* Every record's last field ends at its size; a typo in an offset above fails to compile. */
#ifdef __cplusplus
#define AIRTIME_STATIC_ASSERT(condition, what) static_assert(condition, what)
#else
#define AIRTIME_STATIC_ASSERT(condition, what) _Static_assert(condition, what)
#endif
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_SCOPE_TENANT + 4 == AIRTIME_SNAPSHOT_HEADER_SIZE_1_2, "1.2 snapshot header");
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_SERVICES == AIRTIME_SNAPSHOT_HEADER_SIZE_1_2, "1.3 appends to the header");
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_RESERVED + 4 == AIRTIME_SNAPSHOT_HEADER_SIZE, "snapshot header");
AIRTIME_STATIC_ASSERT(AIRTIME_SNAP_SETTINGS + AIRTIME_TABLE_DESCRIPTOR_SIZE == AIRTIME_SNAP_PARAMS, "tables");
AIRTIME_STATIC_ASSERT(AIRTIME_TENANT_RESERVED + 4 == AIRTIME_TENANT_SIZE, "tenant record");
AIRTIME_STATIC_ASSERT(AIRTIME_NODE_FLAGS + 4 == AIRTIME_NODE_SIZE, "node record");
AIRTIME_STATIC_ASSERT(AIRTIME_GPU_MIG_PROFILE + 8 == AIRTIME_GPU_SIZE, "gpu record");
AIRTIME_STATIC_ASSERT(AIRTIME_WORKLOAD_REPLICA_VARIANT + 4 == AIRTIME_WORKLOAD_SIZE, "workload record");
AIRTIME_STATIC_ASSERT(AIRTIME_SERVICE_RESERVED + 4 == AIRTIME_SERVICE_SIZE, "service record");
AIRTIME_STATIC_ASSERT(AIRTIME_SETTINGS_FLAGS + 8 == AIRTIME_SETTINGS_SIZE, "settings record");
AIRTIME_STATIC_ASSERT(AIRTIME_DECISION_REASON + 8 == AIRTIME_DECISION_SIZE, "decision record");
AIRTIME_STATIC_ASSERT(sizeof(void *) == 4 && sizeof(size_t) == 4, "the ABI is wasm32: pointers are i32");

/* Enumerations. A minor version may add values: treat one you do not know conservatively (a node
 * in an unknown state takes no work, a workload in an unknown state is not yours to decide). */

/** How a GPU is shared (GPU offset 40, ABI 1.2). */
enum airtime_sharing {
    AIRTIME_SHARING_NONE = 0,         /* one workload holds it whole */
    AIRTIME_SHARING_TIME_SLICING = 1, /* shares without isolation */
    AIRTIME_SHARING_MPS = 2,          /* shares with SM and memory limits */
    AIRTIME_SHARING_MIG = 3,          /* a MIG instance: only its profile, alone */
};

/** Node state (node offset 8). */
enum airtime_node_state {
    AIRTIME_NODE_READY = 0,
    AIRTIME_NODE_DRAINING = 1, /* finishing its work; takes none */
    AIRTIME_NODE_LOST = 2,     /* not heard from; its work is being requeued */
};

/** Workload state (workload offset 24). */
enum airtime_workload_state {
    AIRTIME_WORKLOAD_PENDING = 0,
    AIRTIME_WORKLOAD_RUNNING = 1,  /* running or scheduled: holds its resources */
    AIRTIME_WORKLOAD_STOPPING = 2, /* being preempted or cancelled; still holds its GPUs */
};

/** Workload class (workload offset 20). */
enum airtime_workload_class {
    AIRTIME_CLASS_REALTIME_INFERENCE = 0,
    AIRTIME_CLASS_BATCH_INFERENCE = 1,
    AIRTIME_CLASS_TRAINING = 2,
    AIRTIME_CLASS_FINE_TUNING = 3,
    AIRTIME_CLASS_QUANTIZATION = 4,
    AIRTIME_CLASS_EMBEDDINGS = 5,
    AIRTIME_CLASS_EVALUATION = 6,
};

/** What a service's load reports measure (service offset 16, ABI 1.3). */
enum airtime_load_metric {
    AIRTIME_METRIC_REQUESTS_PER_SECOND = 0,
    AIRTIME_METRIC_CONCURRENT_REQUESTS = 1,
};

/** Which of its service's templates a replica runs (workload offset 108, ABI 1.3). */
enum airtime_replica_variant {
    AIRTIME_REPLICA_NONE = 0, /* not a replica: a job */
    AIRTIME_REPLICA_GPU = 1,  /* the main template, on GPUs */
    AIRTIME_REPLICA_CPU = 2,  /* the CPU variant */
};

/** Decision kind (decision offset 0). */
enum airtime_decision_kind {
    AIRTIME_KIND_PLACE = 1,
    AIRTIME_KIND_PREEMPT = 2,
    AIRTIME_KIND_KEEP_PENDING = 3,
};

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
    AIRTIME_SNAPSHOT_TABLE_IN_HEADER, /* 1.3: a table starts inside the header (a host older than 1.3) */
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
        return "snapshot: a table starts inside the 104-byte header (a host older than ABI 1.3 sends 88 bytes)";
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
    const airtime_table *tables[6] = {&s->tenants, &s->nodes, &s->gpus, &s->workloads, &s->settings, &s->services};
    const uint32_t sizes[6] = {AIRTIME_TENANT_SIZE, AIRTIME_NODE_SIZE, AIRTIME_GPU_SIZE, AIRTIME_WORKLOAD_SIZE,
                               AIRTIME_SETTINGS_SIZE, AIRTIME_SERVICE_SIZE};
    for (int i = 0; i < 6; i++) {
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

typedef struct airtime_tenant {
    airtime_str name;
    uint32_t guaranteed_gpus, weight, running_gpus;
    int32_t tier;
    float decayed_gpu_hours;
    uint32_t flags; /* AIRTIME_TENANT_FLAG_* */
    uint32_t running_gpu_milli; /* 1.2: thousandths of a GPU held */
} airtime_tenant;

typedef struct airtime_node {
    airtime_str name;
    uint32_t state; /* enum airtime_node_state */
    uint32_t cpu_millis, cpu_millis_free, memory_mb, memory_mb_free;
    uint32_t gpu_first, gpu_count; /* its GPUs: gpu_first .. gpu_first + gpu_count */
    float cost_per_hour, cpu_util;
    uint32_t flags; /* AIRTIME_NODE_FLAG_* */
} airtime_node;

typedef struct airtime_gpu {
    uint32_t node, device_index;
    airtime_str model;
    uint32_t memory_mb, memory_used_mb;
    float util;
    uint32_t nvlink_group; /* AIRTIME_NONE: unknown */
    uint32_t holder;       /* workload index; AIRTIME_NONE: free */
    uint32_t flags;        /* AIRTIME_GPU_FLAG_* */
    /* 1.2: sharing */
    uint32_t sharing;            /* enum airtime_sharing */
    uint32_t free_milli;         /* thousandths no workload holds */
    uint32_t memory_reserved_mb; /* memory slices of its sharers */
    uint32_t sharers;
    airtime_str mig_profile;     /* a MIG instance's profile; empty otherwise */
} airtime_gpu;

typedef struct airtime_workload {
    airtime_str id, name;
    uint32_t tenant;
    uint32_t class_; /* enum airtime_workload_class */
    uint32_t state;  /* enum airtime_workload_state */
    int32_t priority;
    uint32_t gpu_count, gpu_memory_mb;
    airtime_str gpu_models; /* comma-separated; empty: any (airtime_model_allowed) */
    uint32_t cpu_millis, memory_mb;
    uint64_t submitted_ms, started_ms;
    uint32_t node;  /* running only; AIRTIME_NONE otherwise */
    uint32_t flags; /* AIRTIME_WORKLOAD_FLAG_* */
    uint32_t expected_duration_s;
    uint32_t preemptions_last_hour; /* 1.5 */
    uint32_t gpu_milli;      /* 1.2: share of each GPU; 1000 whole */
    airtime_str mig_profile; /* 1.2: empty: none */
    uint32_t service;         /* 1.3: service index it is a replica of; AIRTIME_NONE: a job */
    uint32_t replica_variant; /* 1.3: enum airtime_replica_variant */
} airtime_workload;

typedef struct airtime_service {
    airtime_str name;
    uint32_t tenant;
    uint32_t class_; /* enum airtime_workload_class of its replicas */
    uint32_t metric; /* enum airtime_load_metric */
    uint32_t min_replicas, max_replicas;
    float capacity;     /* load one GPU replica carries */
    float cpu_capacity; /* load one CPU replica carries; 0 without a CPU variant */
    float demand;       /* load the autoscaler provisions for; 0 while stale or draining */
    float latest;       /* newest report; 0 when none */
    uint32_t desired_gpu, desired_cpu, placed_gpu, placed_cpu, pending_gpu, pending_cpu;
    uint32_t gpu_milli_per_replica;
    uint32_t flags; /* AIRTIME_SERVICE_FLAG_* */
} airtime_service;

typedef struct airtime_settings {
    uint32_t burst_reserve_gpus, realtime_first, min_runtime_s, grace_period_s, max_preemptions_per_hour;
    int32_t night_training_bonus;
    uint32_t flags; /* 1.5: AIRTIME_SETTINGS_FLAG_* */
} airtime_settings;

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
    return true;
}

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
    return true;
}

/** Service `i` (ABI 1.3); false when the index names no service. A workload's service is
 *  airtime_read_service(s, w.service, &out), false for a job (AIRTIME_NONE). */
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
