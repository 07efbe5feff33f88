//! The platform's priority settings: the ordering between customer-facing services and internal
//! training, the burst reserve, the night window and the preemption rules. The control plane's API
//! reads and writes them (stored in one row), the scheduling core puts them in every snapshot and
//! checks preemptions against them, agents get the grace period from them; this is their one
//! definition.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[serde(deny_unknown_fields)]
pub struct PrioritySettings {
    /// GPUs kept free for real-time (customer-facing) inference bursts; other work may use them
    /// only if it is preemptible.
    pub burst_reserve_gpus: i32,
    /// Customer-facing inference outranks internal training.
    pub realtime_first: bool,
    /// Seconds a workload runs before it may be preempted.
    pub min_runtime_s: i32,
    /// Seconds between the checkpoint signal (SIGTERM) and SIGKILL.
    pub grace_period_s: i32,
    /// Most preemptions of one workload in an hour.
    pub max_preemptions_per_hour: i32,
    /// Only checkpointable work may be preempted.
    pub checkpointable_only: bool,
    /// Priority added to training and fine-tuning in the night window.
    pub night_training_bonus: i32,
    /// The night window, UTC hours (it may wrap midnight: 22 → 6).
    pub night_start_hour: i32,
    pub night_end_hour: i32,
}

impl Default for PrioritySettings {
    fn default() -> Self {
        PrioritySettings {
            burst_reserve_gpus: 0,
            realtime_first: true,
            min_runtime_s: 0,
            grace_period_s: 30,
            max_preemptions_per_hour: 4,
            checkpointable_only: false,
            night_training_bonus: 0,
            night_start_hour: 22,
            night_end_hour: 6,
        }
    }
}

impl PrioritySettings {
    /// A precise reason the settings are refused, before anything is written.
    pub fn check(&self) -> Result<(), &'static str> {
        if !(0..=100_000).contains(&self.burst_reserve_gpus) {
            return Err("burst_reserve_gpus must be between 0 and 100000");
        }
        if !(0..=7 * 86_400).contains(&self.min_runtime_s) {
            return Err("min_runtime_s must be between 0 and 604800 (a week)");
        }
        if !(0..=3600).contains(&self.grace_period_s) {
            return Err("grace_period_s must be between 0 and 3600");
        }
        if !(0..=1000).contains(&self.max_preemptions_per_hour) {
            return Err("max_preemptions_per_hour must be between 0 and 1000");
        }
        if !(-1000..=1000).contains(&self.night_training_bonus) {
            return Err("night_training_bonus must be between -1000 and 1000");
        }
        if !(0..24).contains(&self.night_start_hour) || !(0..24).contains(&self.night_end_hour) {
            return Err("night_start_hour and night_end_hour are UTC hours, 0 to 23");
        }
        Ok(())
    }

    /// Whether `hour` (UTC) falls in the night window, which may wrap midnight.
    pub fn is_night(&self, hour: u32) -> bool {
        let (start, end, hour) = (self.night_start_hour as u32, self.night_end_hour as u32, hour);
        if start <= end { (start..end).contains(&hour) } else { hour >= start || hour < end }
    }

    /// The grace period agents give a stopped workload, in milliseconds.
    pub fn grace_period_ms(&self) -> u64 {
        u64::from(self.grace_period_s.max(0) as u32) * 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_night_window_may_wrap_midnight() {
        let s = PrioritySettings::default(); // 22 → 6
        assert!(s.is_night(23) && s.is_night(0) && s.is_night(5));
        assert!(!s.is_night(6) && !s.is_night(12) && !s.is_night(21));
        let day = PrioritySettings { night_start_hour: 9, night_end_hour: 17, ..s };
        assert!(day.is_night(9) && !day.is_night(17));
    }

    #[test]
    fn out_of_range_settings_are_named() {
        let bad = PrioritySettings { grace_period_s: 7200, ..PrioritySettings::default() };
        assert!(bad.check().unwrap_err().contains("grace_period_s"));
        assert_eq!(PrioritySettings::default().check(), Ok(()));
    }
}
