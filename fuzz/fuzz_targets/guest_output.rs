//! A guest's decision buffer, as the host decodes it: never a panic; the allocation-free check and
//! the decoder agree on what is valid; every reason kept is clean and within its bound; and what
//! decodes, encodes back to a buffer that decodes to the same decisions.
#![no_main]

use airtime_policy_sdk::abi::{decode_decisions, encode_decisions, validate_decisions};
use airtime_policy_sdk::text::MAX_REASON_CHARS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let validated = validate_decisions(bytes);
    let decoded = decode_decisions(bytes);
    assert_eq!(validated.is_ok(), decoded.is_ok(), "validate and decode disagree");
    let Ok(decisions) = decoded else { return };
    assert_eq!(validated.ok(), Some(decisions.len()));
    for d in &decisions {
        assert!(d.reason.chars().count() <= MAX_REASON_CHARS, "a reason past its bound");
        assert!(!d.reason.contains('\0'), "a NUL reached the host");
        assert!(!d.reason.chars().any(|c| c.is_control() && c != '\t' && c != '\n'), "a control character kept");
    }
    let again = encode_decisions(&decisions);
    let round = decode_decisions(&again).expect("re-encoded decisions decode");
    assert_eq!(round, decisions);
});
