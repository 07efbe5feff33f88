//! Exponential backoff with jitter, for calls retried until the control plane answers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        Self { first, max, next: first }
    }

    /// The delay before the next try: doubles up to `max`, less up to a quarter of jitter so a
    /// fleet of agents that lost the control plane together does not return in lockstep.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        let quarter = u64::try_from(base.as_micros() / 4).unwrap_or(u64::MAX);
        let jitter = if quarter == 0 { 0 } else { clock_noise() % quarter };
        base.saturating_sub(Duration::from_micros(jitter))
    }

    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Cheap noise for jitter; not randomness for anything that matters.
fn clock_noise() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_bounded_jitter() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let bases = [100, 200, 400, 800, 800];
        for base in bases {
            let delay = backoff.next_delay();
            let base = Duration::from_millis(base);
            assert!(delay <= base && delay >= base * 3 / 4, "{delay:?} for {base:?}");
        }
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(100));
    }
}
