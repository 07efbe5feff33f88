//! Everything that can go wrong with a policy, each with a stable [`kind`](PolicyError::kind).

use std::time::Duration;

use airtime_policy_sdk::abi::AbiError;

/// Why a module was refused or an evaluation produced no decisions. The `Display` text is written
/// for the policy's author; [`kind`](PolicyError::kind) is a stable identifier for storage and
/// metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    // At upload (`compile`).
    /// The bytes are not a core WebAssembly module.
    #[error("not a WebAssembly module: {reason}")]
    NotWasm { reason: String },
    /// Larger than [`crate::RuntimeConfig::max_module_bytes`].
    #[error("the module is {len} bytes; the limit is {limit}")]
    ModuleTooLarge { len: usize, limit: usize },
    /// Fails WebAssembly validation or compilation.
    #[error("invalid WebAssembly module: {message}")]
    InvalidModule { message: String },
    /// Imports something other than `airtime.log` and `airtime.fail`.
    #[error("the module imports `{module}.{name}`; a policy may import only `airtime.log` and `airtime.fail`")]
    ForbiddenImport { module: String, name: String },
    /// Imports `airtime.log` or `airtime.fail` with the wrong type.
    #[error("the module imports `{module}.{name}` as {found}; the ABI defines it as {expected}")]
    ImportTypeMismatch { module: String, name: String, expected: String, found: String },
    /// Lacks a required export.
    #[error("the module does not export `{name}` ({expected}), which the ABI requires")]
    MissingExport { name: String, expected: String },
    /// Has a required export of the wrong type.
    #[error("the module exports `{name}` as {found}; the ABI requires {expected}")]
    WrongExportType { name: String, expected: String, found: String },
    /// Valid, but outside what the runtime hosts (several memories, tables too large).
    #[error("unsupported module: {message}")]
    UnsupportedModule { message: String },
    /// `airtime_abi_version` returned another version.
    #[error("module speaks ABI version {module}; this control plane speaks {host}")]
    AbiVersionMismatch { module: i32, host: u32 },

    // At upload or evaluation.
    /// The start function trapped during instantiation.
    #[error("the module's start function trapped: {message}")]
    StartTrapped { message: String },
    /// The guest trapped (unreachable, out-of-bounds access, division by zero, …).
    #[error("the policy trapped: {message}")]
    Trap { message: String },
    /// The guest exhausted its wasm stack: runaway recursion, usually.
    #[error("the policy overflowed its {max_wasm_stack}-byte wasm stack (runaway recursion?)")]
    StackOverflow { max_wasm_stack: usize },
    /// The guest gave up through `airtime.fail`; the Rust SDK sends panics and `Err` returns this way.
    #[error("the policy failed: {message}")]
    GuestFailed { message: String },
    /// The evaluation ran past [`crate::PolicyLimits::deadline_ms`].
    #[error("the policy ran past its {} ms deadline", deadline.as_millis())]
    DeadlineExceeded { deadline: Duration },
    /// The guest's memory would have grown past [`crate::PolicyLimits::max_memory_bytes`].
    #[error("the policy needed {requested} bytes of linear memory; its limit is {limit}")]
    MemoryLimit { limit: u64, requested: u64 },
    /// The decision buffer is larger than [`crate::PolicyLimits::max_output_bytes`].
    #[error("the policy returned {len} bytes of decisions; the limit is {limit}")]
    OutputTooLarge { len: u64, limit: u64 },
    /// The guest broke the calling convention (a buffer outside its memory, say).
    #[error("the policy broke the ABI: {message}")]
    AbiViolation { message: String },
    /// The decision buffer does not decode.
    #[error("the policy's decisions are malformed: {0}")]
    MalformedOutput(#[from] AbiError),

    // The host's side.
    /// Every instance slot is in use; retry later.
    #[error("the policy runtime is at capacity: {message}")]
    Capacity { message: String },
    /// [`crate::PolicyLimits::validate`] refused the limits.
    #[error("invalid policy limits: {message}")]
    InvalidLimits { message: String },
    /// A bug or misconfiguration in the host, not the policy's doing.
    #[error("internal error in the policy runtime: {message}")]
    Internal { message: String },
}

impl PolicyError {
    /// A stable `snake_case` identifier, recorded with failed evaluations and uploads.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyError::NotWasm { .. } => "not_wasm",
            PolicyError::ModuleTooLarge { .. } => "module_too_large",
            PolicyError::InvalidModule { .. } => "invalid_module",
            PolicyError::ForbiddenImport { .. } => "forbidden_import",
            PolicyError::ImportTypeMismatch { .. } => "import_type_mismatch",
            PolicyError::MissingExport { .. } => "missing_export",
            PolicyError::WrongExportType { .. } => "wrong_export_type",
            PolicyError::UnsupportedModule { .. } => "unsupported_module",
            PolicyError::AbiVersionMismatch { .. } => "abi_version_mismatch",
            PolicyError::StartTrapped { .. } => "start_trapped",
            PolicyError::Trap { .. } => "trap",
            PolicyError::StackOverflow { .. } => "stack_overflow",
            PolicyError::GuestFailed { .. } => "guest_failed",
            PolicyError::DeadlineExceeded { .. } => "deadline_exceeded",
            PolicyError::MemoryLimit { .. } => "memory_limit",
            PolicyError::OutputTooLarge { .. } => "output_too_large",
            PolicyError::AbiViolation { .. } => "abi_violation",
            PolicyError::MalformedOutput(_) => "malformed_output",
            PolicyError::Capacity { .. } => "capacity",
            PolicyError::InvalidLimits { .. } => "invalid_limits",
            PolicyError::Internal { .. } => "internal",
        }
    }

    /// The policy (module or its behaviour) is at fault, as opposed to the host being busy or
    /// misconfigured. A control plane counts these against the policy (to fall back or disable it);
    /// the others it retries or alerts on.
    pub fn is_policy_fault(&self) -> bool {
        !matches!(self, PolicyError::Capacity { .. } | PolicyError::InvalidLimits { .. } | PolicyError::Internal { .. })
    }
}
