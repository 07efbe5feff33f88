//! Leadership of the scheduling loop: a lease row with an epoch (`scheduler_lease`), proved inside
//! every cycle's transaction.
//!
//! An advisory lock held on one connection is not enough: when PostgreSQL restarts, the lock goes
//! with the connection, a standby takes it, and the old leader — which never asks again — goes on
//! cycling beside it. Here the leader renews the lease every tick, and every cycle's transaction
//! starts by locking the lease row and checking that holder and epoch are still this replica's
//! ([`Leadership::prove`]). A replica that lost the lease (it was not renewed for the lease time and
//! a standby took it, bumping the epoch) finds out at its next renewal or commit, and its cycle
//! rolls back: two schedulers can never both commit.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// This replica's claim to lead.
pub struct Leadership {
    /// A fresh id per process: a restarted replica is a new candidate.
    instance: Uuid,
    /// The epoch it leads in; 0 while it does not lead.
    epoch: AtomicI64,
    lease: Duration,
}

/// Why a leader's write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease is another replica's (or was lost): this replica must not commit a cycle.
    #[error("this control plane no longer leads the scheduling loop (its lease was lost)")]
    Deposed,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl Leadership {
    pub fn new(lease: Duration) -> Self {
        Leadership { instance: Uuid::new_v4(), epoch: AtomicI64::new(0), lease }
    }

    /// This replica's id (also the origin of its signals to the other replicas).
    pub fn instance(&self) -> Uuid {
        self.instance
    }

    /// The epoch this replica leads in, if it leads.
    pub fn epoch(&self) -> Option<i64> {
        Some(self.epoch.load(Ordering::SeqCst)).filter(|e| *e > 0)
    }

    /// Takes the lease when it is free, expired, or already this replica's. Returns whether this
    /// replica leads now.
    pub async fn try_acquire(&self, db: &PgPool) -> sqlx::Result<bool> {
        let taken: Option<(i64,)> = sqlx::query_as(
            "INSERT INTO scheduler_lease (id, holder, epoch, renewed_at) VALUES (1, $1, 1, now()) \
             ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder, renewed_at = now(), \
                 epoch = CASE WHEN scheduler_lease.holder = EXCLUDED.holder THEN scheduler_lease.epoch \
                              ELSE scheduler_lease.epoch + 1 END \
             WHERE scheduler_lease.holder = EXCLUDED.holder \
                OR scheduler_lease.renewed_at < now() - make_interval(secs => $2) \
             RETURNING epoch",
        )
        .bind(self.instance)
        .bind(self.lease.as_secs_f64())
        .fetch_optional(db)
        .await?;
        match taken {
            Some((epoch,)) => {
                self.epoch.store(epoch, Ordering::SeqCst);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Renews the lease. `Err(LeaseError::Deposed)` (and no longer leading) when it is not this
    /// replica's.
    pub async fn renew(&self, db: &PgPool) -> Result<(), LeaseError> {
        self.renew_with(db).await
    }

    /// Proves, inside a cycle's transaction, that this replica still holds the lease, and holds the
    /// lease row locked until the transaction ends (a takeover waits for the commit, then sees
    /// the lease renewed). Call it first in every transaction that applies decisions.
    pub async fn prove(&self, tx: &mut PgConnection) -> Result<(), LeaseError> {
        self.renew_with(tx).await
    }

    /// The one renewal: on the pool between cycles, in the cycle's transaction at its commit.
    async fn renew_with<'e>(&self, executor: impl sqlx::PgExecutor<'e>) -> Result<(), LeaseError> {
        let Some(epoch) = self.epoch() else { return Err(LeaseError::Deposed) };
        let renewed =
            sqlx::query("UPDATE scheduler_lease SET renewed_at = now() WHERE id = 1 AND holder = $1 AND epoch = $2")
                .bind(self.instance)
                .bind(epoch)
                .execute(executor)
                .await?
                .rows_affected();
        if renewed == 0 {
            self.step_down();
            return Err(LeaseError::Deposed);
        }
        Ok(())
    }

    /// Gives the lease up (a clean shutdown), so a standby takes over at once.
    pub async fn release(&self, db: &PgPool) {
        if let Some(epoch) = self.epoch() {
            let _ = sqlx::query(
                "UPDATE scheduler_lease SET renewed_at = '-infinity' WHERE id = 1 AND holder = $1 AND epoch = $2",
            )
            .bind(self.instance)
            .bind(epoch)
            .execute(db)
            .await;
            self.step_down();
        }
    }

    fn step_down(&self) {
        self.epoch.store(0, Ordering::SeqCst);
    }
}
