//! Admission to the instance pool: every evaluation (and every parameter check) takes a slot in
//! its lane before it instantiates, and gives it back when its instance is gone. The lanes live
//! here, beside the pool they share, so no caller can run a policy without passing through them.
//!
//! Two lanes: the platform's (its scheduling policy, its fallback, shadows) and the tenants'
//! (tenant scopes, upload trials, dry runs, parameter checks). Each has its own number of slots,
//! and the pool's remaining instances serve the probe `compile` runs; together they never exceed
//! the pool. So no number of hostile tenants can keep the platform policy from an instance, and
//! nothing fails for want of an instance while its lane has room. An evaluation that cannot get a
//! slot within its own deadline answers [`PolicyError::Capacity`].

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::PolicyError;

/// Which lane an evaluation runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The platform's scheduling policy, its fallback and its shadows.
    Platform,
    /// Everything a tenant can cause: tenant scopes, upload trials, dry runs, parameter checks.
    Tenant,
}

/// The probe `compile` runs is admitted in a lane of its own: the pool's instances the two
/// evaluation lanes leave.
pub(crate) const PROBE: usize = 2;

impl Lane {
    fn index(self) -> usize {
        match self {
            Lane::Platform => 0,
            Lane::Tenant => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Platform => "platform",
            Lane::Tenant => "tenant",
        }
    }
}

/// Slots per lane: how many evaluations of each lane may run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneSlots {
    pub platform: u32,
    pub tenant: u32,
}

impl Default for LaneSlots {
    /// As many of each as the machine has cores: evaluations are CPU-bound, and more at once only
    /// makes each slower.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(2);
        // Under half the default pool each, so the default configuration always fits.
        LaneSlots { platform: cores.min(31), tenant: cores.min(31) }
    }
}

impl LaneSlots {
    /// Each lane has at least one slot, and together they leave at least one instance of a pool
    /// of `instances` for compile probes.
    pub fn validate(&self, instances: u32) -> Result<(), PolicyError> {
        if self.platform == 0 || self.tenant == 0 {
            return Err(PolicyError::InvalidLimits { message: "each evaluation lane needs at least one slot".into() });
        }
        if u64::from(self.platform) + u64::from(self.tenant) >= u64::from(instances) {
            return Err(PolicyError::InvalidLimits {
                message: format!(
                    "the lanes' slots ({} platform + {} tenant) leave none of the instance pool ({instances}) for \
                     compile probes",
                    self.platform, self.tenant
                ),
            });
        }
        Ok(())
    }
}

pub(crate) struct Lanes {
    capacity: [u32; 3],
    in_use: Mutex<[u32; 3]>,
    freed: Condvar,
}

/// A held slot; given back when dropped.
pub(crate) struct Slot<'a> {
    lanes: &'a Lanes,
    index: usize,
}

impl Lanes {
    /// `slots` checked against `instances` ([`LaneSlots::validate`]).
    pub(crate) fn new(slots: LaneSlots, instances: u32) -> Self {
        let probes = instances.saturating_sub(slots.platform + slots.tenant).max(1);
        Lanes { capacity: [slots.platform, slots.tenant, probes], in_use: Mutex::new([0; 3]), freed: Condvar::new() }
    }

    /// Takes a slot in `lane`, waiting at most `wait` for one to be given back.
    pub(crate) fn admit(&self, lane: Lane, wait: Duration) -> Result<Slot<'_>, PolicyError> {
        self.admit_index(lane.index(), lane.as_str(), wait)
    }

    /// Takes a slot for a compile probe.
    pub(crate) fn admit_probe(&self, wait: Duration) -> Result<Slot<'_>, PolicyError> {
        self.admit_index(PROBE, "compile probe", wait)
    }

    fn admit_index(&self, i: usize, name: &str, wait: Duration) -> Result<Slot<'_>, PolicyError> {
        let give_up = Instant::now() + wait;
        let poisoned = || PolicyError::Internal { message: "the evaluation lanes' lock was poisoned".into() };
        let mut in_use = self.in_use.lock().map_err(|_| poisoned())?;
        while in_use[i] >= self.capacity[i] {
            let now = Instant::now();
            if now >= give_up {
                return Err(PolicyError::Capacity {
                    message: format!(
                        "all {} slots of the {} lane stayed busy for {} ms",
                        self.capacity[i],
                        name,
                        wait.as_millis()
                    ),
                });
            }
            in_use = self.freed.wait_timeout(in_use, give_up - now).map_err(|_| poisoned())?.0;
        }
        in_use[i] += 1;
        Ok(Slot { lanes: self, index: i })
    }

    /// Slots in use now, per lane (platform, tenant).
    #[cfg(test)]
    fn in_use(&self) -> (u32, u32) {
        self.in_use.lock().map(|u| (u[0], u[1])).unwrap_or((0, 0))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Ok(mut in_use) = self.lanes.in_use.lock() {
            in_use[self.index] = in_use[self.index].saturating_sub(1);
        }
        self.lanes.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_lane_waits_then_answers_capacity_and_leaves_the_other_lane_free() {
        let lanes = Lanes::new(LaneSlots { platform: 1, tenant: 1 }, 3);
        let tenant = lanes.admit(Lane::Tenant, Duration::ZERO).expect("a free slot");
        let started = Instant::now();
        let error = lanes.admit(Lane::Tenant, Duration::from_millis(50)).err().expect("the lane is full");
        assert!(started.elapsed() >= Duration::from_millis(50), "it waited");
        assert_eq!(error.kind(), "capacity", "{error}");
        let platform = lanes.admit(Lane::Platform, Duration::ZERO).expect("the platform's slot is its own");
        assert_eq!(lanes.in_use(), (1, 1));
        drop(tenant);
        drop(platform);
        assert_eq!(lanes.in_use(), (0, 0));
    }

    #[test]
    fn a_waiting_evaluation_gets_the_slot_given_back() {
        let lanes = Lanes::new(LaneSlots { platform: 1, tenant: 1 }, 3);
        std::thread::scope(|scope| {
            let held = lanes.admit(Lane::Tenant, Duration::ZERO).expect("a free slot");
            let waiter = scope.spawn(|| lanes.admit(Lane::Tenant, Duration::from_secs(5)).map(|_| ()));
            std::thread::sleep(Duration::from_millis(30));
            drop(held);
            waiter.join().expect("no panic").expect("admitted once the slot was given back");
        });
    }

    #[test]
    fn lanes_must_fit_the_pool() {
        assert!(LaneSlots { platform: 2, tenant: 1 }.validate(4).is_ok());
        let error = LaneSlots { platform: 2, tenant: 2 }.validate(4).expect_err("no probe slot");
        assert_eq!(
            error.to_string(),
            "invalid policy limits: the lanes' slots (2 platform + 2 tenant) leave none of the instance pool (4) for \
             compile probes"
        );
        assert!(LaneSlots { platform: 0, tenant: 2 }.validate(4).is_err());
    }
}
