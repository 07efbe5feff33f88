//! The ABI both ways: roundtrips of every field, the exact layout of docs/policy-abi.md, precise
//! errors, and fuzzing of both decoders with random, truncated and mutated bytes (they must return
//! `Ok` or `Err`, never panic, and never allocate beyond the buffer's size).

use std::borrow::Cow;

use airtime_policy_sdk::abi::{
    AbiError, Action, Arrival, Decision, Gpu, LoadMetric, Location, NONE, Node, NodeState, ReplicaVariant,
    SNAPSHOT_HEADER_SIZE, Service, Settings, Sharing, Snapshot, Table, Tenant, Workload, WorkloadClass, WorkloadState,
    decode_decisions, decode_snapshot, encode_decisions, encode_snapshot, validate_decisions,
};
use airtime_policy_sdk::testing::{SnapshotFixture, SplitMix64};

/// A seeded generator, so every run fuzzes the same inputs and a failure reproduces.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    fn u32(&mut self) -> u32 {
        self.next() as u32
    }

    fn text(&mut self) -> String {
        let words = ["", "a", "gpu-node-7", "H100", "naïve", "训练", "🚀 rocket", "tenant,with,commas", "x\"y\\z"];
        words[self.below(words.len() as u64) as usize].to_owned()
    }
}

fn every_field_snapshot<'a>() -> Snapshot<'a> {
    Snapshot {
        now_ms: 1_700_000_123_456,
        tenants: vec![
            Tenant {
                name: "acme",
                guaranteed_gpus: 8,
                weight: 3,
                running_gpus: 2,
                tier: -1,
                decayed_gpu_hours: 12.5,
                may_borrow: true,
                running_gpu_milli: 1_250,
                gpu_limit: 12,
            },
            Tenant { name: "globex", ..Tenant::default() },
        ],
        nodes: vec![
            Node {
                name: "n1",
                state: NodeState::Ready,
                cpu_millis: 64_000,
                cpu_millis_free: 32_000,
                memory_mb: 512_000,
                memory_mb_free: 100_000,
                gpu_first: 0,
                gpu_count: 2,
                cost_per_hour: 19.75,
                cpu_util: 0.25,
                simulated: true,
                containers: true,
            },
            Node { name: "n2", state: NodeState::Draining, gpu_first: 2, gpu_count: 1, ..Node::default() },
            Node { name: "cpu", state: NodeState::Unknown(9), gpu_first: 3, gpu_count: 0, ..Node::default() },
        ],
        gpus: vec![
            Gpu {
                node: 0,
                device_index: 0,
                model: "H100",
                memory_mb: 81_920,
                memory_used_mb: 1_024,
                util: 0.5,
                nvlink_group: Some(0),
                holder: Some(1),
                simulated: true,
                sharing: Sharing::Mps,
                free_milli: 750,
                memory_reserved_mb: 20_480,
                sharers: 1,
                mig_profile: "",
            },
            Gpu {
                node: 0,
                device_index: 1,
                model: "H100",
                memory_mb: 10_240,
                sharing: Sharing::Mig,
                mig_profile: "1g.10gb",
                ..Gpu::default()
            },
            Gpu { node: 1, device_index: 0, model: "A100", memory_mb: 40_960, nvlink_group: None, ..Gpu::default() },
        ],
        workloads: vec![
            Workload {
                id: "0190c6a4-0000-7000-8000-000000000001",
                name: "train-llama",
                tenant: 0,
                class: WorkloadClass::Training,
                state: WorkloadState::Pending,
                priority: -5,
                gpu_count: 4,
                gpu_memory_mb: 40_960,
                gpu_models: "H100, A100",
                cpu_millis: 8_000,
                memory_mb: 65_536,
                submitted_ms: 1_699_999_000_000,
                started_ms: 0,
                node: None,
                preemptible: true,
                checkpointable: true,
                cpu_capable: false,
                gang: true,
                expected_duration_s: 3_600,
                gpu_milli: 1_000,
                mig_profile: "",
                service: None,
                replica_variant: ReplicaVariant::None,
                container: true,
                preemptions_last_hour: 2,
                gang_size: 4,
                gang_rank: 1,
                gang_id: "0190c6a4-0000-7000-8000-000000000000",
            },
            Workload {
                id: "0190c6a4-0000-7000-8000-000000000002",
                name: "serve",
                tenant: 1,
                class: WorkloadClass::RealtimeInference,
                state: WorkloadState::Running,
                gpu_count: 1,
                gpu_milli: 250,
                mig_profile: "3g.40gb",
                started_ms: 1_699_999_500_000,
                node: Some(0),
                cpu_capable: true,
                service: Some(1),
                replica_variant: ReplicaVariant::Gpu,
                ..Workload::default()
            },
            Workload {
                name: "future",
                class: WorkloadClass::Unknown(42),
                state: WorkloadState::Unknown(7),
                service: Some(0),
                replica_variant: ReplicaVariant::Unknown(9),
                ..Workload::default()
            },
        ],
        settings: Some(Settings {
            burst_reserve_gpus: 2,
            realtime_first: true,
            min_runtime_s: 600,
            grace_period_s: 30,
            max_preemptions_per_hour: 4,
            night_training_bonus: -3,
            checkpointable_only: true,
        }),
        params: r#"{"max": 3}"#,
        scope_tenant: Some(1),
        services: vec![
            Service {
                name: "future-svc",
                metric: LoadMetric::Unknown(5),
                class: WorkloadClass::Unknown(8),
                ..Service::default()
            },
            Service {
                name: "chat",
                tenant: 1,
                class: WorkloadClass::RealtimeInference,
                metric: LoadMetric::ConcurrentRequests,
                min_replicas: 2,
                max_replicas: 12,
                capacity: 15.5,
                cpu_capacity: 4.25,
                demand: 48.75,
                latest: -0.0,
                desired_gpu: 3,
                desired_cpu: 4,
                placed_gpu: 5,
                placed_cpu: 6,
                pending_gpu: 7,
                pending_cpu: 8,
                gpu_milli_per_replica: 250,
                has_cpu_variant: true,
                draining: false,
                stale: true,
            },
        ],
        arrivals: vec![
            Arrival { gpu_milli: 250, gpu_count: 1, cpu_millis: 4_000, count: 120, gpu_models: "" },
            Arrival { gpu_milli: 1_000, gpu_count: 8, cpu_millis: 64_000, count: 3, gpu_models: "H100, A100" },
        ],
    }
}

#[test]
fn snapshot_roundtrips_every_field() {
    let snapshot = every_field_snapshot();
    let bytes = encode_snapshot(&snapshot);
    assert_eq!(decode_snapshot(&bytes), Ok(snapshot));
}

#[test]
fn empty_snapshot_roundtrips() {
    let snapshot = Snapshot::default();
    let bytes = encode_snapshot(&snapshot);
    assert_eq!(bytes.len(), 120 + 2, "header and the params string \"{{}}\"");
    assert_eq!(decode_snapshot(&bytes), Ok(snapshot));
}

#[test]
fn snapshot_layout_matches_the_document() {
    let snapshot = every_field_snapshot();
    let bytes = encode_snapshot(&snapshot);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(&bytes[0..4], b"ATSN");
    assert_eq!(u32_at(4), 1);
    assert_eq!(u64_at(8), 1_700_000_123_456);
    // Tables: {offset, count, stride} at 16, 28, 40, 52, 64, (ABI 1.3) 88 and (1.9) 104, in that
    // order after the 120-byte header; a reserved 0 at 100 and at 116.
    let tables = [(16, 2, 40), (28, 3, 48), (40, 3, 64), (52, 3, 128), (64, 1, 32), (88, 2, 80), (104, 2, 24)];
    let mut expected_offset = 120;
    for (at, count, stride) in tables {
        assert_eq!((u32_at(at), u32_at(at + 4), u32_at(at + 8)), (expected_offset, count, stride), "table at {at}");
        expected_offset += count * stride;
    }
    assert_eq!(u32_at(84), 1, "scope tenant");
    assert_eq!((u32_at(100), u32_at(116)), (0, 0), "reserved");
    // ABI 1.9: arrival 1 — thousandths +0, GPUs +4, CPU +8, count +12, models +16.
    let a1 = u32_at(104) as usize + 24;
    assert_eq!((u32_at(a1), u32_at(a1 + 4), u32_at(a1 + 8), u32_at(a1 + 12)), (1_000, 8, 64_000, 3));
    let (models_at, models_len) = (u32_at(a1 + 16) as usize, u32_at(a1 + 20) as usize);
    assert_eq!(&bytes[models_at..models_at + models_len], b"H100, A100");
    // Workload 0: priority at +28 (i32), submitted_ms at +56, node at +72 (NONE), flags at +76.
    let w0 = u32_at(52) as usize;
    assert_eq!(u32_at(w0 + 20), 2, "class training");
    assert_eq!((u32_at(w0 + 112), u32_at(w0 + 116)), (4, 1), "ABI 1.6: gang size and rank");
    assert_eq!(u32_at(w0 + 28) as i32, -5);
    assert_eq!(u64_at(w0 + 56), 1_699_999_000_000);
    assert_eq!(u32_at(w0 + 72), NONE);
    assert_eq!(u32_at(w0 + 76), 0b1_1011, "preemptible, checkpointable, gang, container (1.4)");
    // Node 0: flags at +44, simulated and (1.4) runs containers.
    assert_eq!(u32_at(u32_at(28) as usize + 44), 0b11, "simulated, containers");
    // ABI 1.2: workload 1's share at +88 and MIG profile at +92.
    assert_eq!(u32_at(w0 + 128 + 88), 250);
    let (profile_at, profile_len) = (u32_at(w0 + 128 + 92) as usize, u32_at(w0 + 128 + 96) as usize);
    assert_eq!(&bytes[profile_at..profile_at + profile_len], b"3g.40gb");
    // ABI 1.3: a workload's service at +104 (NONE for a job) and replica variant at +108.
    assert_eq!((u32_at(w0 + 104), u32_at(w0 + 108)), (NONE, 0));
    assert_eq!((u32_at(w0 + 128 + 104), u32_at(w0 + 128 + 108)), (1, 1), "service 1, GPU variant");
    // Service 1: name, tenant +8, class +12, metric +16, min/max +20/+24, capacities +28/+32,
    // demand +36, latest +40, desired +44/+48, placed +52/+56, pending +60/+64, milli +68, flags +72.
    let s1 = u32_at(88) as usize + 80;
    let (name_at, name_len) = (u32_at(s1) as usize, u32_at(s1 + 4) as usize);
    assert_eq!(&bytes[name_at..name_at + name_len], b"chat");
    let f32_at = |at: usize| f32::from_bits(u32_at(at));
    assert_eq!((u32_at(s1 + 8), u32_at(s1 + 12), u32_at(s1 + 16)), (1, 0, 1));
    assert_eq!((u32_at(s1 + 20), u32_at(s1 + 24)), (2, 12));
    assert_eq!((f32_at(s1 + 28), f32_at(s1 + 32), f32_at(s1 + 36)), (15.5, 4.25, 48.75));
    assert_eq!(u32_at(s1 + 40), 0x8000_0000, "latest -0.0, bit for bit");
    let counts: Vec<u32> = (0..6).map(|i| u32_at(s1 + 44 + 4 * i)).collect();
    assert_eq!(counts, [3, 4, 5, 6, 7, 8]);
    assert_eq!((u32_at(s1 + 68), u32_at(s1 + 72), u32_at(s1 + 76)), (250, 0b101, 0), "has CPU variant, stale");
    // Tenant 0: milli held at +32.
    assert_eq!(u32_at(u32_at(16) as usize + 32), 1_250);
    // GPU 0: holder at +32, nvlink group at +28, sharing +40, free share +44, reserved memory +48,
    // sharers +52, MIG profile +56; GPU 2 has no group.
    let g0 = u32_at(40) as usize;
    assert_eq!(u32_at(g0 + 32), 1);
    assert_eq!((u32_at(g0 + 40), u32_at(g0 + 44), u32_at(g0 + 48), u32_at(g0 + 52)), (2, 750, 20_480, 1));
    assert_eq!(u32_at(g0 + 64 + 40), 3, "GPU 1 is a MIG instance");
    assert_eq!(u32_at(g0 + 64 * 2 + 28), NONE);
    // Strings: model "H100" is stored once for both GPUs.
    assert_eq!((u32_at(g0 + 8), u32_at(g0 + 12)), (u32_at(g0 + 64 + 8), 4));
    let (offset, len) = (u32_at(76) as usize, u32_at(80) as usize);
    assert_eq!(&bytes[offset..offset + len], br#"{"max": 3}"#);
}

#[test]
fn decisions_roundtrip_and_match_the_document() {
    let decisions = vec![
        Decision::place(0, 1, vec![4, 5, 6], "best fit: 40 GB free on h200-3"),
        Decision::preempt(7, "reclaimed for acme"),
        Decision::keep_pending(8, "no node has 4 free GPUs with ≥ 40960 MiB"),
        Decision::keep_pending(9, "no node has 4 free GPUs with ≥ 40960 MiB"),
        Decision::place(10, 2, vec![], ""),
    ];
    let bytes = encode_decisions(&decisions);
    assert_eq!(decode_decisions(&bytes), Ok(decisions.clone()));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!(&bytes[0..4], b"ATDC");
    assert_eq!(u32_at(4), 5);
    let record = |i: usize| 8 + 32 * i;
    assert_eq!((u32_at(record(0)), u32_at(record(0) + 4), u32_at(record(0) + 8)), (1, 0, 1));
    let (gpus_at, gpus_len) = (u32_at(record(0) + 16) as usize, u32_at(record(0) + 20));
    assert_eq!(gpus_len, 3, "len counts GPUs, not bytes");
    assert_eq!((u32_at(gpus_at), u32_at(gpus_at + 4), u32_at(gpus_at + 8)), (4, 5, 6));
    assert_eq!((u32_at(record(1)), u32_at(record(1) + 8)), (2, NONE));
    assert_eq!(u32_at(record(2)), 3);
    assert_eq!(u32_at(record(2) + 24), u32_at(record(3) + 24), "a repeated reason is stored once");
    // Decoding borrows reasons from the buffer.
    let decoded = decode_decisions(&bytes).expect("valid");
    assert!(matches!(decoded[0].reason, Cow::Borrowed(_)));
}

#[test]
fn larger_strides_from_a_newer_minor_version_are_skipped() {
    // Rebuild the snapshot with every workload record padded to 136 bytes.
    let snapshot = every_field_snapshot();
    let bytes = encode_snapshot(&snapshot);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let (offset, count) = (u32_at(52) as usize, u32_at(56) as usize);
    let mut padded = bytes.clone();
    let mut extra = Vec::new();
    for i in 0..count {
        extra.extend_from_slice(&bytes[offset + 128 * i..offset + 128 * (i + 1)]);
        extra.extend_from_slice(&[0xAB; 8]);
    }
    let new_offset = padded.len() as u32;
    padded.extend_from_slice(&extra);
    padded[52..56].copy_from_slice(&new_offset.to_le_bytes());
    padded[60..64].copy_from_slice(&136u32.to_le_bytes());
    assert_eq!(decode_snapshot(&padded), Ok(snapshot));
}

#[test]
fn errors_say_where_and_what() {
    let mut bytes = encode_decisions(&[
        Decision::keep_pending(0, "a"),
        Decision::keep_pending(1, "b"),
        Decision::keep_pending(2, "c"),
        Decision::place(3, 0, vec![1, 2, 3, 4, 5, 6, 7, 8], "d"),
    ]);
    let record3 = 8 + 32 * 3;
    bytes[record3 + 16..record3 + 20].copy_from_slice(&0x1200u32.to_le_bytes());
    bytes.resize(4096, 0);
    assert_eq!(
        decode_decisions(&bytes).expect_err("gpu list out of bounds").to_string(),
        "decision 3: gpu list at 0x1200+32 runs past the 4096-byte buffer"
    );

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "the 0-byte decision buffer is shorter than its 8-byte header"),
        (b"ATSN\0\0\0\0".to_vec(), "decision header: magic is \"ATSN\" (bytes [41, 54, 53, 4e]), expected \"ATDC\""),
        (
            [b"ATDC".as_slice(), &1u32.to_le_bytes(), &[0; 32]].concat(),
            "decision 0: unknown kind 0 (expected 1 place, 2 preempt or 3 keep pending)",
        ),
        (
            [b"ATDC".as_slice(), &2u32.to_le_bytes(), &[0; 32]].concat(),
            "snapshot header: decisions table (2 records of 32 bytes at 0x8) runs past the 40-byte buffer",
        ),
    ];
    for (bytes, message) in cases {
        assert_eq!(decode_decisions(&bytes).expect_err(message).to_string(), message);
    }

    let mut place = encode_decisions(&[Decision::place(0, 0, vec![], "x")]);
    place[16..20].copy_from_slice(&NONE.to_le_bytes());
    assert_eq!(
        decode_decisions(&place).expect_err("no node").to_string(),
        "decision 0: place names no node (node is NONE)"
    );
    let mut keep = encode_decisions(&[Decision::keep_pending(0, "x")]);
    keep[16..20].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        decode_decisions(&keep).expect_err("node on keep").to_string(),
        "decision 0: a keep pending decision must not name a node"
    );
    let mut utf8 = encode_decisions(&[Decision::keep_pending(0, "héllo")]);
    let last = utf8.len() - 4;
    utf8[last] = 0xFF;
    assert_eq!(
        decode_decisions(&utf8).expect_err("not utf-8").to_string(),
        "decision 0: reason at 0x28 is not UTF-8 (invalid from byte 1)"
    );
}

#[test]
fn snapshot_errors_say_where_and_what() {
    let good = encode_snapshot(&every_field_snapshot());
    let u32_at = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let set = |bytes: &mut Vec<u8>, at: usize, value: u32| bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());

    let mut version = good.clone();
    set(&mut version, 4, 2);
    assert_eq!(
        decode_snapshot(&version).expect_err("v2").to_string(),
        "snapshot header: ABI version 2; this SDK speaks 1"
    );
    let mut stride = good.clone();
    set(&mut stride, 60, 80);
    assert_eq!(
        decode_snapshot(&stride).expect_err("stride").to_string(),
        "snapshot header: workloads table stride 80 is smaller than the 128-byte record"
    );
    let mut service_stride = good.clone();
    set(&mut service_stride, 96, 76);
    assert_eq!(
        decode_snapshot(&service_stride).expect_err("service stride").to_string(),
        "snapshot header: services table stride 76 is smaller than the 80-byte record"
    );
    let mut holder = good.clone();
    let g0 = u32_at(&good, 40) as usize;
    set(&mut holder, g0 + 32, 3);
    assert_eq!(
        decode_snapshot(&holder).expect_err("holder").to_string(),
        "gpu 0: holder 3 is out of range; the workloads table has 3 records"
    );
    let mut range = good.clone();
    let n1 = u32_at(&good, 28) as usize + 48;
    set(&mut range, n1 + 32, 2);
    assert_eq!(
        decode_snapshot(&range).expect_err("range").to_string(),
        "node 1: GPUs 2..4 run past the gpus table of 3 records"
    );
    let mut name = good.clone();
    let w1 = u32_at(&good, 52) as usize + 128;
    set(&mut name, w1 + 8, good.len() as u32 - 2);
    set(&mut name, w1 + 12, 10);
    assert_eq!(
        decode_snapshot(&name).expect_err("name").to_string(),
        format!("workload 1: name at {:#x}+10 runs past the {}-byte buffer", good.len() - 2, good.len())
    );
    let mut settings = good.clone();
    set(&mut settings, 68, 2);
    assert!(matches!(decode_snapshot(&settings), Err(AbiError::TooManySettings { count: 2 })));

    // ABI 1.3: a workload's service and a service's tenant are indexes like the others.
    let mut service = good.clone();
    set(&mut service, w1 + 104, 2);
    assert_eq!(
        decode_snapshot(&service).expect_err("service index").to_string(),
        "workload 1: service 2 is out of range; the services table has 2 records"
    );
    assert_eq!(
        decode_snapshot(&service),
        Err(AbiError::IndexOutOfRange {
            at: Location::Record { table: Table::Workloads, index: 1 },
            what: "service",
            index: 2,
            table: Table::Services,
            table_len: 2,
        })
    );
    let mut service_tenant = good.clone();
    let s1 = u32_at(&good, 88) as usize + 80;
    set(&mut service_tenant, s1 + 8, 2);
    assert_eq!(
        decode_snapshot(&service_tenant).expect_err("service tenant").to_string(),
        "service 1: tenant 2 is out of range; the tenants table has 2 records"
    );
    let mut service_name = good.clone();
    set(&mut service_name, s1, good.len() as u32 - 1);
    set(&mut service_name, s1 + 4, 4);
    assert_eq!(
        decode_snapshot(&service_name).expect_err("service name").to_string(),
        format!("service 1: name at {:#x}+4 runs past the {}-byte buffer", good.len() - 1, good.len())
    );
    let mut services_out = good.clone();
    set(&mut services_out, 92, 1000);
    assert!(matches!(
        decode_snapshot(&services_out),
        Err(AbiError::TableOutOfBounds { table: Table::Services, count: 1000, .. })
    ));
    // ABI 1.9: the arrivals table and its records' strings are checked like the others.
    let mut arrivals_out = good.clone();
    set(&mut arrivals_out, 108, 1000);
    assert!(matches!(
        decode_snapshot(&arrivals_out),
        Err(AbiError::TableOutOfBounds { table: Table::Arrivals, count: 1000, .. })
    ));
    let mut arrival_models = good.clone();
    let a1 = u32_at(&good, 104) as usize + 24;
    set(&mut arrival_models, a1 + 16, good.len() as u32 - 1);
    set(&mut arrival_models, a1 + 20, 4);
    assert_eq!(
        decode_snapshot(&arrival_models).expect_err("arrival models").to_string(),
        format!("arrival 1: gpu_models at {:#x}+4 runs past the {}-byte buffer", good.len() - 1, good.len())
    );
}

/// What a guest built for ABI 1.2 reads: the 88-byte header and the fields of each record up to
/// its 1.2 size, stepping by the stride the buffer gives. A 1.3 buffer must read to exactly the
/// snapshot it encodes, less what 1.3 added.
#[test]
fn a_guest_built_for_abi_1_2_reads_a_1_3_snapshot_unchanged() {
    let snapshot = every_field_snapshot();
    let bytes = encode_snapshot(&snapshot);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let string = |at: usize| {
        let (offset, len) = (u32_at(at) as usize, u32_at(at + 4) as usize);
        std::str::from_utf8(&bytes[offset..offset + len]).expect("UTF-8")
    };
    // The 1.2 reader's checks: header of 88 bytes, five tables in bounds with strides at least the
    // 1.2 record sizes (40, 48, 64, 104, 32).
    assert!(bytes.len() >= 88);
    assert_eq!((&bytes[0..4], u32_at(4), u64_at(8)), (b"ATSN".as_slice(), 1, snapshot.now_ms));
    let table = |at: usize, size: u32| {
        let (offset, count, stride) = (u32_at(at), u32_at(at + 4), u32_at(at + 8));
        assert!(stride >= size && (offset + count * stride) as usize <= bytes.len(), "table at {at}");
        (0..count).map(move |i| (offset + i * stride) as usize)
    };
    assert_eq!(string(76), snapshot.params);
    assert_eq!(u32_at(84), snapshot.scope_tenant.unwrap_or(NONE));
    for (rec, t) in table(16, 40).zip(&snapshot.tenants) {
        assert_eq!((string(rec), u32_at(rec + 8), u32_at(rec + 32)), (t.name, t.guaranteed_gpus, t.running_gpu_milli));
    }
    for (rec, n) in table(28, 48).zip(&snapshot.nodes) {
        assert_eq!((string(rec), u32_at(rec + 28), u32_at(rec + 32)), (n.name, n.gpu_first, n.gpu_count));
    }
    for (rec, g) in table(40, 64).zip(&snapshot.gpus) {
        assert_eq!((u32_at(rec), string(rec + 8), u32_at(rec + 32)), (g.node, g.model, g.holder.unwrap_or(NONE)));
        assert_eq!((u32_at(rec + 44), string(rec + 56)), (g.free_milli, g.mig_profile));
    }
    let mut workloads = 0;
    for (rec, w) in table(52, 104).zip(&snapshot.workloads) {
        assert_eq!((string(rec), string(rec + 8), u32_at(rec + 16)), (w.id, w.name, w.tenant));
        assert_eq!(
            (u32_at(rec + 20), u32_at(rec + 24), u32_at(rec + 28) as i32),
            (w.class.code(), w.state.code(), w.priority)
        );
        assert_eq!(
            (string(rec + 40), u64_at(rec + 56), u32_at(rec + 72)),
            (w.gpu_models, w.submitted_ms, w.node.unwrap_or(NONE))
        );
        assert_eq!((u32_at(rec + 88), string(rec + 92)), (w.gpu_milli, w.mig_profile));
        workloads += 1;
    }
    assert_eq!(workloads, snapshot.workloads.len());
    let settings = table(64, 32).next().expect("settings");
    assert_eq!(u32_at(settings + 16), snapshot.settings.expect("settings").max_preemptions_per_hour);
}

/// A buffer laid out as an older host did: the header cut to `header` bytes (dropping what later
/// minor versions appended) and every table offset moved down with it.
fn as_older_host(bytes: &[u8], header: usize, tables: &[usize]) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let cut = (SNAPSHOT_HEADER_SIZE - header) as u32;
    let mut old = bytes[..header].to_vec();
    old.extend_from_slice(&bytes[SNAPSHOT_HEADER_SIZE..]);
    for &at in tables {
        old[at..at + 4].copy_from_slice(&(u32_at(at) - cut).to_le_bytes());
    }
    old
}

/// A guest built for 1.9 given a buffer from a host older than 1.3 (an 88-byte header, tables right
/// after it) or than 1.9 (104 bytes) refuses it precisely instead of reading records as the
/// services or arrivals table.
#[test]
fn a_snapshot_from_an_older_host_is_refused_precisely() {
    let snapshot = Snapshot { services: Vec::new(), arrivals: Vec::new(), ..every_field_snapshot() };
    let bytes = encode_snapshot(&snapshot);
    assert_eq!(
        decode_snapshot(&as_older_host(&bytes, 88, &[16, 28, 40, 52, 64])).expect_err("a 1.2 buffer").to_string(),
        "snapshot header: tenants table at 0x58 starts inside the 120-byte header (a host older than ABI 1.3 sends an 88-byte one, 1.3 to 1.8 a 104-byte one)"
    );
    assert_eq!(
        decode_snapshot(&as_older_host(&bytes, 104, &[16, 28, 40, 52, 64, 88])).expect_err("a 1.8 buffer").to_string(),
        "snapshot header: tenants table at 0x68 starts inside the 120-byte header (a host older than ABI 1.3 sends an 88-byte one, 1.3 to 1.8 a 104-byte one)"
    );
    // An empty older snapshot is shorter than the 1.9 header.
    let empty = encode_snapshot(&Snapshot::default());
    let old_empty = [&empty[..104], &empty[120..]].concat();
    assert!(matches!(decode_snapshot(&old_empty), Err(AbiError::TooShort { needed: 120, .. })));
}

#[test]
fn random_valid_snapshots_roundtrip() {
    let mut rng = Rng(SplitMix64::new(7));
    for _ in 0..300 {
        let texts: Vec<String> = (0..64).map(|_| rng.text()).collect();
        let mut text_at = 0;
        let mut text = || {
            text_at += 1;
            texts[text_at % texts.len()].as_str()
        };
        let tenants = 1 + rng.below(4) as u32;
        let nodes = rng.below(5) as u32;
        let mut snapshot = Snapshot { now_ms: rng.next(), params: text(), ..Snapshot::default() };
        for _ in 0..tenants {
            snapshot.tenants.push(Tenant {
                name: text(),
                guaranteed_gpus: rng.u32(),
                tier: rng.u32() as i32,
                decayed_gpu_hours: rng.below(1_000_000) as f32 / 7.0,
                may_borrow: rng.below(2) == 1,
                ..Tenant::default()
            });
        }
        let workloads = rng.below(6) as u32;
        let services = rng.below(4) as u32;
        for _ in 0..services {
            snapshot.services.push(Service {
                name: text(),
                tenant: rng.below(u64::from(tenants)) as u32,
                class: WorkloadClass::from_code(rng.below(9) as u32),
                metric: LoadMetric::from_code(rng.below(3) as u32),
                min_replicas: rng.u32(),
                max_replicas: rng.u32(),
                capacity: rng.below(1_000_000) as f32 / 8.0,
                cpu_capacity: rng.below(1_000) as f32 / 4.0,
                demand: rng.below(1_000_000) as f32 / 3.0,
                latest: rng.below(1_000_000) as f32 / 5.0,
                desired_gpu: rng.u32(),
                desired_cpu: rng.u32(),
                placed_gpu: rng.u32(),
                placed_cpu: rng.u32(),
                pending_gpu: rng.u32(),
                pending_cpu: rng.u32(),
                gpu_milli_per_replica: rng.u32(),
                has_cpu_variant: rng.below(2) == 0,
                draining: rng.below(2) == 0,
                stale: rng.below(2) == 0,
            });
        }
        for n in 0..nodes {
            let gpu_count = rng.below(4) as u32;
            snapshot.nodes.push(Node {
                name: text(),
                state: NodeState::from_code(rng.below(4) as u32),
                cpu_millis: rng.u32(),
                gpu_first: snapshot.gpus.len() as u32,
                gpu_count,
                cost_per_hour: rng.below(1000) as f32 / 4.0,
                ..Node::default()
            });
            for d in 0..gpu_count {
                let holder = rng.below(u64::from(workloads) + 1) as u32;
                snapshot.gpus.push(Gpu {
                    node: n,
                    device_index: d,
                    model: text(),
                    memory_mb: rng.u32(),
                    util: 0.5,
                    nvlink_group: (rng.below(2) == 0).then(|| rng.u32() % 1000),
                    holder: (holder < workloads).then_some(holder),
                    ..Gpu::default()
                });
            }
        }
        for _ in 0..workloads {
            let node = rng.below(u64::from(nodes) + 1) as u32;
            let service = rng.below(u64::from(services) + 1) as u32;
            snapshot.workloads.push(Workload {
                service: (service < services).then_some(service),
                replica_variant: ReplicaVariant::from_code(rng.below(4) as u32),
                id: text(),
                name: text(),
                tenant: rng.below(u64::from(tenants)) as u32,
                class: WorkloadClass::from_code(rng.below(9) as u32),
                state: WorkloadState::from_code(rng.below(3) as u32),
                priority: rng.u32() as i32,
                gpu_models: text(),
                submitted_ms: rng.next(),
                node: (node < nodes).then_some(node),
                preemptible: rng.below(2) == 0,
                gang: rng.below(2) == 0,
                ..Workload::default()
            });
        }
        if rng.below(2) == 0 {
            snapshot.settings = Some(Settings { night_training_bonus: rng.u32() as i32, ..Settings::default() });
        }
        snapshot.scope_tenant = (rng.below(2) == 0).then(|| rng.below(u64::from(tenants)) as u32);
        let bytes = encode_snapshot(&snapshot);
        assert_eq!(decode_snapshot(&bytes).as_ref(), Ok(&snapshot));
    }
}

#[test]
fn random_decisions_roundtrip() {
    let mut rng = Rng(SplitMix64::new(11));
    for _ in 0..500 {
        let texts: Vec<String> = (0..8).map(|_| rng.text()).collect();
        let decisions: Vec<Decision<'_>> = (0..rng.below(20))
            .map(|i| {
                let reason = texts[i as usize % texts.len()].as_str();
                match rng.below(3) {
                    0 => Decision::place(
                        rng.u32(),
                        rng.u32() % NONE,
                        (0..rng.below(9)).map(|_| rng.u32()).collect(),
                        reason,
                    ),
                    1 => Decision::preempt(rng.u32(), reason),
                    _ => Decision::keep_pending(rng.u32(), reason),
                }
            })
            .collect();
        let bytes = encode_decisions(&decisions);
        assert_eq!(decode_decisions(&bytes), Ok(decisions));
    }
}

/// Decodes and, when it decodes, checks the result is no larger than the input could justify.
fn decode_both(bytes: &[u8]) {
    if let Ok(snapshot) = decode_snapshot(bytes) {
        // Tables may overlap, but each one fits in the buffer on its own.
        for (count, size) in [
            (snapshot.tenants.len(), 32),
            (snapshot.nodes.len(), 48),
            (snapshot.gpus.len(), 40),
            (snapshot.workloads.len(), 88),
            (snapshot.services.len(), 80),
        ] {
            assert!(count * size <= bytes.len(), "{count} records of {size} bytes from {} bytes", bytes.len());
        }
    }
    // Validating says exactly what decoding says.
    let decoded = decode_decisions(bytes);
    assert_eq!(validate_decisions(bytes), decoded.as_ref().map(Vec::len).map_err(Clone::clone));
    if let Ok(decisions) = decoded {
        let gpus: usize = decisions
            .iter()
            .map(|d| match &d.action {
                Action::Place { gpus, .. } => gpus.len(),
                _ => 0,
            })
            .sum();
        assert!(decisions.len() * 32 <= bytes.len() && gpus * 4 <= bytes.len(), "more than the input justifies");
    }
}

#[test]
fn fuzz_random_bytes() {
    let mut rng = Rng(SplitMix64::new(1));
    for _ in 0..20_000 {
        let len = rng.below(300) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Give half of them a valid magic, so decoding goes past the first check.
        if len >= 4 && rng.below(2) == 0 {
            let magic: &[u8; 4] = if rng.below(2) == 0 { b"ATSN" } else { b"ATDC" };
            bytes[..4].copy_from_slice(magic);
            if len >= 8 && magic == b"ATSN" {
                bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
            }
        }
        decode_both(&bytes);
    }
}

#[test]
fn fuzz_every_truncation() {
    let snapshot = encode_snapshot(&every_field_snapshot());
    for len in 0..snapshot.len() {
        assert!(decode_snapshot(&snapshot[..len]).is_err(), "a snapshot cut at {len} bytes must not decode");
    }
    let decisions =
        encode_decisions(&[Decision::place(0, 1, vec![4, 5, 6], "best fit"), Decision::keep_pending(8, "no room")]);
    for len in 0..decisions.len() {
        assert!(decode_decisions(&decisions[..len]).is_err(), "decisions cut at {len} bytes must not decode");
    }
}

#[test]
fn fuzz_mutations_of_valid_buffers() {
    let mut rng = Rng(SplitMix64::new(3));
    let fixture = SnapshotFixture::synthetic_fleet(6, 4, 20, 5).params(r#"{"a": 1}"#);
    let seeds = [
        encode_snapshot(&every_field_snapshot()),
        fixture.encode(),
        encode_decisions(&[
            Decision::place(0, 1, vec![4, 5, 6], "best fit: 40 GB free"),
            Decision::preempt(7, "reclaimed"),
            Decision::keep_pending(8, "no room"),
        ]),
    ];
    for _ in 0..30_000 {
        let mut bytes = seeds[rng.below(seeds.len() as u64) as usize].clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len() as u64) as usize;
            match rng.below(4) {
                // A random byte.
                0 => bytes[at] = rng.next() as u8,
                // A whole field set to an edge value, aligned to 4 like the fields.
                1 => {
                    let at = at & !3;
                    let edge =
                        [0, 1, 0x7FFF_FFFF, 0x8000_0000, NONE - 1, NONE, bytes.len() as u32][rng.below(7) as usize];
                    if at + 4 <= bytes.len() {
                        bytes[at..at + 4].copy_from_slice(&edge.to_le_bytes());
                    }
                }
                // Flip a bit.
                2 => bytes[at] ^= 1 << rng.below(8),
                // Cut.
                _ => bytes.truncate(at),
            }
            if bytes.is_empty() {
                break;
            }
        }
        decode_both(&bytes);
    }
}

#[test]
fn overlapping_gpu_lists_cannot_amplify_memory() {
    // 100 decisions all pointing at the same 1,000-GPU list: 100,000 indexes from a 7 KB buffer.
    let mut bytes = encode_decisions(&(0..100).map(|i| Decision::place(i, 0, vec![], "")).collect::<Vec<_>>());
    let list_at = bytes.len() as u32;
    bytes.extend(std::iter::repeat_n(0u8, 4_000));
    for i in 0..100 {
        let record = 8 + 32 * i;
        bytes[record + 16..record + 20].copy_from_slice(&list_at.to_le_bytes());
        bytes[record + 20..record + 24].copy_from_slice(&1_000u32.to_le_bytes());
    }
    let error = decode_decisions(&bytes).expect_err("amplification refused");
    assert!(matches!(error, AbiError::TooManyGpuIndexes { .. }), "{error}");
}
