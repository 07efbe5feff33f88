//! Signals between the API, the scheduling loop and the agents' long-polls — in this process and,
//! through PostgreSQL's `LISTEN`/`NOTIFY` ([`relay`]), on every other replica, so any replica serves
//! agents and the API equally (an agent whose long-poll lands on a standby hears a placement the
//! leader made at once, not at the long-poll's timeout). They only shorten waits: every waiter
//! re-reads PostgreSQL, so a missed signal costs latency, never state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

/// The channel replicas tell each other on; payloads are `<origin>:wake` or `<origin>:desired`.
const CHANNEL: &str = "airtime_signals";

/// What this replica has to tell the others, coalesced: many wakes between two sends are one
/// `NOTIFY`.
#[derive(Default)]
pub struct Outbox {
    wake: AtomicBool,
    desired: AtomicBool,
    ready: Notify,
}

impl Outbox {
    fn post(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        self.ready.notify_one();
    }

    /// Waits for something to send; returns (wake, desired).
    async fn take(&self) -> (bool, bool) {
        loop {
            let wake = self.wake.swap(false, Ordering::SeqCst);
            let desired = self.desired.swap(false, Ordering::SeqCst);
            if wake || desired {
                return (wake, desired);
            }
            self.ready.notified().await;
        }
    }
}

/// Wakes the scheduling loop before its next tick (a workload submitted or ended, a node joined or
/// was lost, a policy activated), on whichever replica leads.
#[derive(Clone, Default)]
pub struct SchedulerWake {
    local: Arc<Notify>,
    outbox: Arc<Outbox>,
}

impl SchedulerWake {
    pub fn new(outbox: Arc<Outbox>) -> Self {
        SchedulerWake { local: Arc::default(), outbox }
    }

    pub fn wake(&self) {
        self.wake_local();
        self.outbox.post(&self.outbox.wake);
    }

    /// This replica only (what another replica's wake becomes here).
    pub fn wake_local(&self) {
        // notify_one stores a permit when nobody waits, so a wake during a cycle starts another.
        self.local.notify_one();
    }

    pub async fn woken(&self) {
        self.local.notified().await;
    }

    /// Takes the wake stored since the last [`woken`](Self::woken), if any: the loop calls it just
    /// before a cycle, whose read covers whatever those wakes announced.
    pub fn absorb(&self) -> bool {
        use futures::FutureExt as _;
        self.local.notified().now_or_never().is_some()
    }
}

/// Bumped after every commit that changes some node's desired state; agents' long-polls wait on it,
/// on every replica.
#[derive(Clone)]
pub struct DesiredStateChanged {
    tx: Arc<watch::Sender<u64>>,
    outbox: Arc<Outbox>,
}

impl Default for DesiredStateChanged {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl DesiredStateChanged {
    pub fn new(outbox: Arc<Outbox>) -> Self {
        Self { tx: Arc::new(watch::channel(0).0), outbox }
    }

    pub fn announce(&self) {
        self.announce_local();
        self.outbox.post(&self.outbox.desired);
    }

    /// This replica only (what another replica's announcement becomes here).
    pub fn announce_local(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

/// Carries this replica's signals to the others and theirs to this one, until shutdown: one task
/// sends what the [`Outbox`] collects as `NOTIFY`, another `LISTEN`s (reconnecting after a database
/// outage, and then waking everything here once, since notifications may have been missed).
pub async fn relay(
    db: PgPool,
    origin: Uuid,
    outbox: Arc<Outbox>,
    wake: SchedulerWake,
    desired: DesiredStateChanged,
    shutdown: Shutdown,
) {
    let send = {
        let (db, shutdown) = (db.clone(), shutdown.clone());
        async move {
            loop {
                let (w, d) = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    taken = outbox.take() => taken,
                };
                for (kind, yes) in [("wake", w), ("desired", d)] {
                    if yes
                        && let Err(err) = sqlx::query("SELECT pg_notify($1, $2)")
                            .bind(CHANNEL)
                            .bind(format!("{origin}:{kind}"))
                            .execute(&db)
                            .await
                    {
                        tracing::debug!(error = %err, "cannot tell the other replicas");
                    }
                }
            }
        }
    };
    let listen = async move {
        loop {
            let mut listener = match PgListener::connect_with(&db).await {
                Ok(mut l) => match l.listen(CHANNEL).await {
                    Ok(()) => l,
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot listen for the other replicas' signals");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                },
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for the other replicas' signals");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            // Whatever was announced while not listening: look again once.
            wake.wake_local();
            desired.announce_local();
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) => {
                        let Some((from, kind)) = notification.payload().split_once(':') else { continue };
                        if from == origin.to_string() {
                            continue; // our own
                        }
                        match kind {
                            "wake" => wake.wake_local(),
                            "desired" => desired.announce_local(),
                            _ => {}
                        }
                    }
                    // The connection was lost (and will be re-established): missed signals possible.
                    Ok(None) => {
                        wake.wake_local();
                        desired.announce_local();
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "lost the other replicas' signals; listening again");
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = send => {}
        _ = listen => {}
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
