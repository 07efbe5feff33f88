//! A node agent's messages, as the control plane reads them: the NUL scan of the extractors, then
//! each message type and its checks. Never a panic; a body the scan passes holds no NUL in any
//! string it decodes to; and a message the checks accept has the bounds they promise.
#![no_main]

use airtime_protocol::agent::{EventReport, Registration, TelemetryReport, check_registration, check_telemetry};
use airtime_protocol::text::json_has_nul;
use libfuzzer_sys::fuzz_target;

fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                strings(v, out);
            }
        }
        _ => {}
    }
}

fuzz_target!(|bytes: &[u8]| {
    let has_nul = json_has_nul(bytes);
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
        let mut all = Vec::new();
        strings(&value, &mut all);
        if !has_nul {
            assert!(all.iter().all(|s| !s.contains('\0')), "the scan missed a NUL");
        }
    }
    if has_nul {
        return; // refused at the edge, before any type sees it
    }
    if let Ok(r) = serde_json::from_slice::<Registration>(bytes)
        && check_registration(&r).is_ok()
    {
        assert!(!r.name.is_empty() && r.name.len() <= 253);
        assert!(r.gpus.len() <= 64 && r.gpus.iter().all(|g| g.index <= 63));
        assert!(r.cost_per_hour.is_none_or(|c| c.is_finite() && c >= 0.0));
    }
    if let Ok(t) = serde_json::from_slice::<TelemetryReport>(bytes)
        && check_telemetry(&t).is_ok()
    {
        assert!((0.0..=1.0).contains(&t.cpu_util));
        assert!(t.gpus.iter().all(|g| g.util.is_none_or(|u| (0.0..=1.0).contains(&u))));
    }
    if let Ok(e) = serde_json::from_slice::<EventReport>(bytes) {
        assert!(e.bounded_message().is_none_or(|m| m.chars().count() <= airtime_protocol::agent::MAX_EVENT_MESSAGE_CHARS));
    }
});
