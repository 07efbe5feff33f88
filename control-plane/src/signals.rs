//! In-process signals between the API, the scheduling loop and the agents' long-polls. They only
//! shorten waits: every waiter re-reads PostgreSQL, so a missed signal costs latency, never state.

use std::sync::Arc;

use tokio::sync::{Notify, watch};

/// Wakes the scheduling loop before its next tick (a workload submitted or ended, a node joined or
/// was lost, a policy activated).
#[derive(Clone, Default)]
pub struct SchedulerWake(Arc<Notify>);

impl SchedulerWake {
    pub fn wake(&self) {
        // notify_one stores a permit when nobody waits, so a wake during a cycle starts another.
        self.0.notify_one();
    }

    pub async fn woken(&self) {
        self.0.notified().await;
    }
}

/// Bumped after every commit that changes some node's desired state; agents' long-polls wait on it.
#[derive(Clone)]
pub struct DesiredStateChanged {
    tx: Arc<watch::Sender<u64>>,
}

impl Default for DesiredStateChanged {
    fn default() -> Self {
        Self { tx: Arc::new(watch::channel(0).0) }
    }
}

impl DesiredStateChanged {
    pub fn announce(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

/// Set once at shutdown; the background tasks finish their current step and return.
#[derive(Clone)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }
}

impl Shutdown {
    pub fn cancel(&self) {
        self.0.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    pub async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        // An error means the sender is gone, which also means shutting down.
        let _ = rx.wait_for(|cancelled| *cancelled).await;
    }
}
