//! Abuse limits kept in memory, per control-plane process:
//!
//! - [`RateLimiter`]: a token bucket per credential for mutating requests (POST, PUT, PATCH,
//!   DELETE). A bucket holds `burst` requests and refills at `per_minute / 60` per second; a request
//!   that finds it empty is answered 429 with `Retry-After`.
//! - [`LoginThrottle`]: failed logins per (user name, address). The first `max_failures` failures
//!   cost nothing; after that each attempt must wait twice as long as the one before (1 s, 2 s, 4 s
//!   … up to 15 minutes), and the count is forgotten after 15 minutes without a failure or at the
//!   first success. The address is part of the key so an attacker cannot lock a user out from
//!   elsewhere.
//!
//! In memory is a deliberate trade-off: nothing to clean up in the database and no write per
//! request, but with several control-plane replicas each keeps its own counts (the effective limit
//! is multiplied by the replica count) and a restart forgets them. Both maps are bounded: when they
//! grow past [`MAX_KEYS`], entries that carry no information (full buckets, expired failures) are
//! dropped.
//!
//! Time is passed in (`Instant`) so the tests need no sleeping.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept before a map is pruned.
pub const MAX_KEYS: usize = 10_000;
/// Failures are forgotten this long after the last one.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// The longest wait between attempts once throttled.
pub const MAX_LOCKOUT: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// A token bucket per key.
pub struct RateLimiter<K> {
    capacity: f64,
    refill_per_sec: f64,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// `per_minute` requests per minute on average, `burst` at once. A zero `per_minute` disables
    /// the limit.
    pub fn per_minute(per_minute: u32, burst: u32) -> Self {
        Self {
            capacity: f64::from(burst.max(1)),
            refill_per_sec: f64::from(per_minute) / 60.0,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from the key's bucket, or says how long until one is available.
    pub fn check(&self, key: &K, now: Instant) -> Result<(), Duration> {
        if self.refill_per_sec <= 0.0 {
            return Ok(());
        }
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            let (capacity, rate) = (self.capacity, self.refill_per_sec);
            buckets.retain(|_, b| b.tokens + rate * now.saturating_duration_since(b.updated).as_secs_f64() < capacity);
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket { tokens: self.capacity, updated: now });
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.refill_per_sec).min(self.capacity);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.refill_per_sec))
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

/// Failed-login bookkeeping per (lower-cased user name, address).
pub struct LoginThrottle {
    max_failures: u32,
    failures: Mutex<HashMap<(String, Option<IpAddr>), Failures>>,
}

impl LoginThrottle {
    pub fn new(max_failures: u32) -> Self {
        Self { max_failures, failures: Mutex::new(HashMap::new()) }
    }

    fn key(user: &str, ip: Option<IpAddr>) -> (String, Option<IpAddr>) {
        (user.trim().to_lowercase(), ip)
    }

    /// The wait imposed after `count` failures.
    fn lockout(&self, count: u32) -> Duration {
        if count < self.max_failures {
            return Duration::ZERO;
        }
        let doublings = (count - self.max_failures).min(20);
        Duration::from_secs(1u64 << doublings).min(MAX_LOCKOUT)
    }

    /// Before checking a password: `Err(wait)` when this user name from this address must wait.
    pub fn check(&self, user: &str, ip: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let Ok(failures) = self.failures.lock() else {
            return Ok(());
        };
        let Some(f) = failures.get(&Self::key(user, ip)) else {
            return Ok(());
        };
        let since = now.saturating_duration_since(f.last);
        if since >= FAILURE_WINDOW {
            return Ok(());
        }
        let wait = self.lockout(f.count);
        if since < wait { Err(wait - since) } else { Ok(()) }
    }

    pub fn record_failure(&self, user: &str, ip: Option<IpAddr>, now: Instant) {
        let Ok(mut failures) = self.failures.lock() else {
            return;
        };
        if failures.len() >= MAX_KEYS {
            failures.retain(|_, f| now.saturating_duration_since(f.last) < FAILURE_WINDOW);
        }
        let entry = failures.entry(Self::key(user, ip)).or_insert(Failures { count: 0, last: now });
        if now.saturating_duration_since(entry.last) >= FAILURE_WINDOW {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
    }

    pub fn record_success(&self, user: &str, ip: Option<IpAddr>) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(&Self::key(user, ip));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_bucket_allows_its_burst_then_the_refill_rate() {
        let limiter = RateLimiter::per_minute(60, 3); // 1 per second, 3 at once
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check(&"k", t0), Ok(()));
        }
        let wait = limiter.check(&"k", t0).expect_err("empty");
        assert!(wait > 900 * MS && wait <= 1000 * MS, "{wait:?}");
        // Half a second later: still empty, half a token left to wait for.
        let wait = limiter.check(&"k", t0 + 500 * MS).expect_err("still empty");
        assert!(wait <= 500 * MS, "{wait:?}");
        assert_eq!(limiter.check(&"k", t0 + 1000 * MS), Ok(()));
        assert!(limiter.check(&"k", t0 + 1001 * MS).is_err());
        // A long pause refills to the burst, never more.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(limiter.check(&"k", later), Ok(()));
        }
        assert!(limiter.check(&"k", later).is_err());
    }

    #[test]
    fn buckets_are_per_key() {
        let limiter = RateLimiter::per_minute(60, 1);
        let t0 = Instant::now();
        assert_eq!(limiter.check(&"a", t0), Ok(()));
        assert!(limiter.check(&"a", t0).is_err());
        assert_eq!(limiter.check(&"b", t0), Ok(()), "another token is not slowed by the first");
    }

    #[test]
    fn a_zero_rate_disables_the_limit() {
        let limiter = RateLimiter::per_minute(0, 1);
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert_eq!(limiter.check(&1, t0), Ok(()));
        }
    }

    #[test]
    fn the_bucket_map_stays_bounded() {
        let limiter = RateLimiter::per_minute(60, 1);
        let t0 = Instant::now();
        for k in 0..MAX_KEYS {
            let _ = limiter.check(&k, t0);
        }
        // Every bucket refilled long ago: the next new key prunes them all.
        let _ = limiter.check(&usize::MAX, t0 + Duration::from_secs(10));
        assert!(limiter.buckets.lock().expect("lock").len() <= 1);
    }

    #[test]
    fn logins_are_free_until_the_threshold_then_back_off() {
        let throttle = LoginThrottle::new(3);
        let ip = Some(IpAddr::from([10, 0, 0, 1]));
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(throttle.check("Ada@Example.com", ip, t0), Ok(()), "attempt {i}");
            throttle.record_failure("ada@example.com", ip, t0);
        }
        // Fourth attempt: 1 s after the last failure.
        let wait = throttle.check("ada@example.com", ip, t0).expect_err("throttled");
        assert_eq!(wait, Duration::from_secs(1));
        assert_eq!(throttle.check("ada@example.com", ip, t0 + Duration::from_secs(1)), Ok(()));
        throttle.record_failure("ada@example.com", ip, t0 + Duration::from_secs(1));
        let wait = throttle.check("ada@example.com", ip, t0 + Duration::from_secs(1)).expect_err("doubled");
        assert_eq!(wait, Duration::from_secs(2));
        // Another address or another user name is not throttled.
        assert_eq!(throttle.check("ada@example.com", Some(IpAddr::from([10, 0, 0, 2])), t0), Ok(()));
        assert_eq!(throttle.check("bob@example.com", ip, t0), Ok(()));
        // A success forgets the failures.
        throttle.record_success("ADA@example.com", ip);
        assert_eq!(throttle.check("ada@example.com", ip, t0 + Duration::from_secs(1)), Ok(()));
    }

    #[test]
    fn the_lockout_is_capped_and_forgotten_after_the_window() {
        let throttle = LoginThrottle::new(1);
        let t0 = Instant::now();
        for _ in 0..100 {
            throttle.record_failure("x", None, t0);
        }
        assert_eq!(throttle.check("x", None, t0), Err(MAX_LOCKOUT));
        assert_eq!(throttle.check("x", None, t0 + FAILURE_WINDOW), Ok(()));
        // After the window, counting starts again from zero.
        throttle.record_failure("x", None, t0 + FAILURE_WINDOW);
        assert_eq!(throttle.check("x", None, t0 + FAILURE_WINDOW), Err(Duration::from_secs(1)));
    }
}
