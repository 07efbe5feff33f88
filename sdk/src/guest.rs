//! The guest side: the [`Policy`] trait an author implements, the [`Context`] it is given, and
//! [`export_policy!`](crate::export_policy) which turns it into a module the host can run.
//!
//! This module compiles on every target. On `wasm32` the exports and the host imports come alive
//! (in `guest::exports`, the one module with `unsafe`); elsewhere logging goes to a buffer that [`crate::testing`] reads, so the same
//! policy is unit-tested natively with `cargo test`.

use std::fmt;

use crate::abi::{self, Decision, Snapshot};
use crate::params::{FromParam, ParamError, Params};
use crate::plan::PlanError;

/// A scheduling policy: given the snapshot, decide.
///
/// Called once per evaluation on a fresh instance, so nothing kept in memory survives a cycle.
/// Return a decision for the workloads you have an opinion on; the host leaves the others as they
/// are. Return `Err` to give up: the host records the message and keeps the previous state.
pub trait Policy {
    fn evaluate<'s>(&self, snapshot: &Snapshot<'s>, ctx: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure>;

    /// Checks the parameters a platform team activates the policy with, before any cycle runs it
    /// (exported as `airtime_validate_params`, ABI 1.1): an `Err` refuses the activation with its
    /// message. Read them as [`evaluate`](Self::evaluate) does, so the two agree. The default
    /// accepts everything.
    fn validate_params(&self, params: &Params<'_>) -> Result<(), Failure> {
        let _ = params;
        Ok(())
    }
}

/// A policy giving up, with the message the host records ("params.max_gpus: expected an unsigned
/// 32-bit integer, found -1"). Converts from the SDK's errors, `String` and `&str`, so `?` works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    message: String,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Self {
        Failure { message: message.into() }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<ParamError> for Failure {
    fn from(error: ParamError) -> Self {
        Failure::new(error.to_string())
    }
}

impl From<PlanError> for Failure {
    fn from(error: PlanError) -> Self {
        Failure::new(error.to_string())
    }
}

impl From<abi::AbiError> for Failure {
    fn from(error: abi::AbiError) -> Self {
        Failure::new(error.to_string())
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::new(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::new(message)
    }
}

/// Severity of a log line; the codes are those of `airtime.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum LogLevel {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

impl LogLevel {
    /// The level for an `airtime.log` code; codes above 3 are errors, below 0 debug.
    pub fn from_code(code: i32) -> Self {
        match code {
            i32::MIN..=0 => LogLevel::Debug,
            1 => LogLevel::Info,
            2 => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line a policy logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

/// What a policy has besides the snapshot: its parameters and a log.
#[derive(Debug)]
pub struct Context<'a> {
    params: Params<'a>,
    /// Native builds keep lines here for [`crate::testing`]; on wasm they go to the host at once,
    /// so lines logged before a trap still reach it.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    lines: Vec<LogLine>,
}

impl<'a> Context<'a> {
    /// A context for `params` (the snapshot's JSON text).
    pub fn new(params: &'a str) -> Self {
        Context { params: Params::parse(params), lines: Vec::new() }
    }

    /// The policy's parameters.
    pub fn params(&self) -> &Params<'a> {
        &self.params
    }

    /// Shorthand for `ctx.params().get_or(key, default)`.
    pub fn param_or<T: FromParam>(&self, key: &str, default: T) -> Result<T, ParamError> {
        self.params.get_or(key, default)
    }

    /// Logs a line. The host keeps a bounded number of lines per evaluation and counts the rest.
    pub fn log(&mut self, level: LogLevel, message: impl fmt::Display) {
        let message = message.to_string();
        #[cfg(target_arch = "wasm32")]
        exports::host_log(level, &message);
        #[cfg(not(target_arch = "wasm32"))]
        self.lines.push(LogLine { level, message });
    }

    pub fn debug(&mut self, message: impl fmt::Display) {
        self.log(LogLevel::Debug, message);
    }

    pub fn info(&mut self, message: impl fmt::Display) {
        self.log(LogLevel::Info, message);
    }

    pub fn warn(&mut self, message: impl fmt::Display) {
        self.log(LogLevel::Warn, message);
    }

    pub fn error(&mut self, message: impl fmt::Display) {
        self.log(LogLevel::Error, message);
    }

    /// The lines logged so far (always empty on wasm, where they went to the host).
    pub fn lines(&self) -> &[LogLine] {
        &self.lines
    }

    /// Takes the lines logged so far.
    pub fn take_lines(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.lines)
    }
}

/// Runs `policy` on an encoded snapshot and returns the encoded decisions: what `airtime_evaluate`
/// does, minus the memory handling. [`crate::testing`] uses it natively.
pub fn evaluate_encoded<P: Policy + ?Sized>(
    policy: &P,
    snapshot_bytes: &[u8],
    ctx_lines: &mut Vec<LogLine>,
) -> Result<Vec<u8>, Failure> {
    let snapshot = abi::decode_snapshot(snapshot_bytes)
        .map_err(|error| Failure::new(format!("the host sent a snapshot this SDK cannot read: {error}")))?;
    let mut ctx = Context::new(snapshot.params);
    let result = policy.evaluate(&snapshot, &mut ctx);
    ctx_lines.extend(ctx.take_lines());
    let decisions = result?;
    abi::try_encode_decisions(&decisions).map_err(Failure::from)
}

/// Used by [`export_policy!`](crate::export_policy) to check at compile time that its argument is a
/// [`Policy`], on every target.
#[doc(hidden)]
pub fn assert_policy<P: Policy>(_: &P) {}

/// Turns a [`Policy`] into the module the host runs: emits the exports `airtime_abi_version`,
/// `airtime_alloc` and `airtime_evaluate` when compiled for `wasm32` (a `cdylib` also exports its
/// `memory`), and only a type check elsewhere, so the crate still builds and tests natively.
///
/// On `wasm32` it also installs the SDK's allocator as the module's `#[global_allocator]`: a bump
/// arena with free lists by size class (`guest::alloc`, wasm32 only), which can skip everything a
/// long-lived allocator does (merging neighbours, returning memory) because the host runs every
/// evaluation in a fresh instance and drops it afterwards. It is a few percent faster than the
/// standard library's `dlmalloc` for the built-in policies, with a little more peak memory. A
/// policy that keeps freeing and allocating large blocks of changing sizes (which fragments without
/// merging), that grows memory itself, or that brings its own global allocator, keeps the standard
/// one with `export_policy!(MyPolicy, allocator = std)`. Native builds (tests) always use the
/// standard allocator.
///
/// The argument is an expression evaluated on each call, usually a unit struct:
///
/// ```
/// use airtime_policy_sdk::prelude::*;
///
/// struct NoOp;
///
/// impl Policy for NoOp {
///     fn evaluate<'s>(&self, _: &Snapshot<'s>, _: &mut Context<'s>) -> Result<Vec<Decision<'s>>, Failure> {
///         Ok(Vec::new())
///     }
/// }
///
/// airtime_policy_sdk::export_policy!(NoOp);
/// // or, keeping the standard library's allocator:
/// // airtime_policy_sdk::export_policy!(NoOp, allocator = std);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_policy {
    (@exports $policy:expr) => {
        const _: fn() = || $crate::guest::assert_policy(&$policy);

        // `unsafe(no_mangle)` gives these functions the export names of the ABI; it is the only
        // unsafe thing here (the names must not clash with other symbols, and they are prefixed
        // `airtime_` so they do not). The bodies are safe code in the SDK.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
            #[unsafe(no_mangle)]
            pub extern "C" fn airtime_abi_version() -> i32 {
                $crate::guest::exports::abi_version()
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn airtime_alloc(len: i32) -> i32 {
                $crate::guest::exports::alloc(len)
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn airtime_evaluate(ptr: i32, len: i32) -> i64 {
                $crate::guest::exports::evaluate(&$policy, ptr, len)
            }

            #[unsafe(no_mangle)]
            pub extern "C" fn airtime_validate_params(ptr: i32, len: i32) -> i64 {
                $crate::guest::exports::validate_params(&$policy, ptr, len)
            }
        };
    };
    ($policy:expr, allocator = std) => {
        $crate::export_policy!(@exports $policy);
    };
    ($policy:expr, allocator = arena) => {
        $crate::export_policy!(@exports $policy);

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[global_allocator]
            static AIRTIME_ARENA: $crate::guest::alloc::Arena = $crate::guest::alloc::Arena::new();
        };
    };
    ($policy:expr) => {
        $crate::export_policy!($policy, allocator = arena);
    };
}

#[cfg(target_arch = "wasm32")]
pub mod alloc;
#[cfg(target_arch = "wasm32")]
pub mod exports;
mod size_class;
