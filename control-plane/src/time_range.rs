//! One rule for a time range a read asks for (`GET /usage`, `GET /gpus/{id}/history`): `to`
//! defaults to now and a later time is now, `from` defaults to a span before `to` and must come
//! before it, and the range holds at most a bounded number of steps of at least a minimum width.

use chrono::{DateTime, TimeDelta, Utc};

/// A checked range and step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step_s: u32,
}

/// What a read allows.
#[derive(Debug, Clone, Copy)]
pub struct RangeRules {
    /// The range when `from` is absent.
    pub default_span: TimeDelta,
    /// The step when `step_s` is absent, from the range's length in seconds.
    pub default_step: fn(i64) -> u32,
    pub min_step_s: u32,
    pub max_steps: i64,
}

impl TimeRange {
    /// Parses a request's range and step under `rules`; the message says what to change.
    pub fn parse(
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
        step_s: Option<u32>,
        rules: RangeRules,
        now: DateTime<Utc>,
    ) -> Result<TimeRange, String> {
        let to = to.unwrap_or(now).min(now);
        let from = from.unwrap_or(to - rules.default_span);
        if from >= to {
            return Err("from must be before to (and before now)".into());
        }
        let seconds = (to - from).num_seconds().max(1);
        let step_s = step_s.unwrap_or_else(|| (rules.default_step)(seconds));
        if step_s < rules.min_step_s {
            return Err(format!("step_s must be at least {}", rules.min_step_s));
        }
        let steps = (seconds + i64::from(step_s) - 1) / i64::from(step_s);
        if steps > rules.max_steps {
            return Err(format!(
                "the range holds {steps} steps of {step_s} s; at most {}: widen step_s",
                rules.max_steps
            ));
        }
        Ok(TimeRange { from, to, step_s })
    }

    pub fn step(&self) -> TimeDelta {
        TimeDelta::seconds(i64::from(self.step_s))
    }
}
