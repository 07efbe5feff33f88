//! The wasm32 glue behind [`export_policy!`](crate::export_policy): the bodies of the three exports,
//! the two host imports, and the panic hook. Compiled for `wasm32` only.
//!
//! The only `unsafe` in the SDK is here, and it is only the declaration and the calls of the two
//! host imports: memory handling is safe code. The snapshot buffer is a `Vec` kept in a static
//! between `airtime_alloc` and `airtime_evaluate`; the host writes into it through the pointer we
//! returned, while no Rust reference to it is alive (the same as handing a buffer to C), and
//! `airtime_evaluate` checks that the pointer and length it is given are that buffer's before reading.
#![allow(unsafe_code)]

use std::sync::{Mutex, Once};

use super::{LogLevel, Policy, evaluate_encoded};
use crate::abi::ABI_VERSION;

#[link(wasm_import_module = "airtime")]
unsafe extern "C" {
    /// `airtime.log(level, ptr, len)`.
    #[link_name = "log"]
    fn airtime_log(level: i32, ptr: *const u8, len: usize);
    /// `airtime.fail(ptr, len)`: the host records the message, then traps.
    #[link_name = "fail"]
    fn airtime_fail(ptr: *const u8, len: usize);
}

/// The snapshot buffer handed out by the last `airtime_alloc`.
static SNAPSHOT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static PANIC_HOOK: Once = Once::new();

/// Sends a log line to the host.
pub(crate) fn host_log(level: LogLevel, message: &str) {
    // SAFETY: `message` is a live, initialised UTF-8 buffer of `message.len()` bytes for the whole
    // call; the host only reads it (and checks the range against our memory before doing so).
    unsafe { airtime_log(level as i32, message.as_ptr(), message.len()) }
}

/// Gives up with `message`. The host traps inside `airtime.fail`; should a host not do so, the
/// `unreachable` instruction traps instead, so this never returns.
pub fn fail(message: &str) -> ! {
    // SAFETY: as for `host_log`: a live buffer the host only reads.
    unsafe { airtime_fail(message.as_ptr(), message.len()) }
    core::arch::wasm32::unreachable()
}

/// Routes panics (a bug in the policy, an `unwrap` on `None`) through `airtime.fail`, so the host
/// records "panicked at src/lib.rs:42:9: …" instead of an anonymous `unreachable` trap.
fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| fail(&info.to_string())));
    });
}

/// Body of `airtime_abi_version`.
pub fn abi_version() -> i32 {
    ABI_VERSION as i32
}

/// Body of `airtime_alloc`: a zeroed buffer of `len` bytes for the snapshot.
pub fn alloc(len: i32) -> i32 {
    install_panic_hook();
    let Ok(len) = usize::try_from(len) else { fail(&format!("airtime_alloc: negative length {len}")) };
    let mut buffer = SNAPSHOT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *buffer = vec![0; len];
    buffer.as_mut_ptr() as usize as i32
}

/// Body of `airtime_validate_params`: the UTF-8 parameters in the buffer from `airtime_alloc`,
/// offered to [`Policy::validate_params`]; 0 accepts, `(ptr << 32) | len` refuses with a message.
pub fn validate_params<P: Policy>(policy: &P, ptr: i32, len: i32) -> i64 {
    install_panic_hook();
    let buffer = std::mem::take(&mut *SNAPSHOT.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    if buffer.as_ptr() as usize as i32 != ptr || usize::try_from(len).ok() != Some(buffer.len()) {
        fail(&format!(
            "airtime_validate_params: called with {len} bytes at {ptr:#x}, but airtime_alloc handed out {} bytes",
            buffer.len()
        ));
    }
    let verdict = match std::str::from_utf8(&buffer) {
        Ok(text) => policy.validate_params(&crate::params::Params::parse(text)),
        Err(_) => Err(super::Failure::new("params: not UTF-8")),
    };
    match verdict {
        Ok(()) => 0,
        Err(failure) => {
            // Read by the host right after we return; the instance is discarded after that.
            let message: &'static mut str = failure.message().to_owned().leak();
            let (out_ptr, out_len) = (message.as_ptr() as usize as u64, message.len() as u64);
            ((out_ptr << 32) | out_len) as i64
        }
    }
}

/// Body of `airtime_evaluate`: decodes the snapshot in the buffer from `airtime_alloc`, runs the
/// policy, and returns `(out_ptr << 32) | out_len` of the encoded decisions.
pub fn evaluate<P: Policy>(policy: &P, ptr: i32, len: i32) -> i64 {
    install_panic_hook();
    let buffer = std::mem::take(&mut *SNAPSHOT.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    if buffer.as_ptr() as usize as i32 != ptr || usize::try_from(len).ok() != Some(buffer.len()) {
        fail(&format!(
            "airtime_evaluate: called with {len} bytes at {ptr:#x}, but airtime_alloc handed out {} bytes at {:#x}",
            buffer.len(),
            buffer.as_ptr() as usize
        ));
    }
    let mut lines = Vec::new();
    match evaluate_encoded(policy, &buffer, &mut lines) {
        Ok(output) => {
            // The host reads the output after we return; the instance is discarded after that,
            // so leaking is the intended lifetime.
            let output: &'static mut [u8] = output.leak();
            let (out_ptr, out_len) = (output.as_ptr() as usize as u64, output.len() as u64);
            ((out_ptr << 32) | out_len) as i64
        }
        Err(failure) => fail(failure.message()),
    }
}
