//! The steps every good policy repeats, as composable actions — the way KAI-Scheduler and Volcano
//! build schedulers from actions and plugins. A policy is a short pipeline of them over one
//! [`Plan`](crate::plan::Plan):
//!
//! 1. [`order`]: what each tenant holds against its guarantee ([`Holdings`]), and the queue ranked
//!    from it ([`queue`]).
//! 2. [`allocate`]: where a workload goes — best fit or the least fragmenting fit
//!    ([`Allocator`]), for whole GPUs, shares of one and CPU work alike.
//! 3. [`reserve`]: the head of the queue that does not fit keeps the node where it fits first, so a
//!    stream of small work cannot starve a gang ([`Reservation`]).
//! 4. [`preempt`]: one victim search for every cause — a class that outranks (a burst of
//!    customer-facing traffic) or a tenant reclaiming its guarantee from borrowers — applying every
//!    rule the host enforces (minimum runtime, the hourly cap, checkpointable-only), so a policy
//!    never proposes what the host refuses, and the rule that no preemption loses airtime.
//! 5. [`consolidate`]: a gang that waits behind fragmentation gets a node by moving checkpointable,
//!    lower-ranked work that fits elsewhere right now.
//!
//! `slo-first` (the default platform policy) is these four in a row; `priority-best-fit` and the
//! tenant template use the ordering and the allocator.

pub mod allocate;
pub mod consolidate;
pub mod order;
pub mod preempt;
pub mod reserve;

pub use allocate::{Allocation, Allocator, Fit, decide_gang};
pub use consolidate::{Move, consolidate};
pub use order::{Holdings, Ranking, queue};
pub use preempt::{Cause, Preemption, RunningByNode, VictimRules, VictimSearch, worth};
pub use reserve::Reservation;
