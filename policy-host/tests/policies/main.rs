//! The policy host against real modules: the built-in policies compiled from Rust, and policies
//! written by hand in WAT under `tests/fixtures/wat/` (one correct, the rest adversarial).
//! One test binary, a module per topic.

mod adversarial;
mod builtin;
mod c_policy;
mod hand_written;
mod runtime;
mod support;
