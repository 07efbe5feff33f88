//! A snapshot buffer, as a guest (and the CLI's replay) decodes it: never a panic, and what decodes
//! encodes back to bytes that decode to the same snapshot.
#![no_main]

use airtime_policy_sdk::abi::{decode_snapshot, try_encode_snapshot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(snapshot) = decode_snapshot(bytes) else { return };
    if let Ok(again) = try_encode_snapshot(&snapshot) {
        let round = decode_snapshot(&again).expect("a re-encoded snapshot decodes");
        assert_eq!(format!("{round:?}"), format!("{snapshot:?}"));
    }
});
