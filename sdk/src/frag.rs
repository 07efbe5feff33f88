//! GPU fragmentation: how much of a node's free GPU capacity the work that typically arrives could
//! not use. The measure of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
//! with Fragmentation Gradient Descent" (USENIX ATC '23, the paper that published the Alibaba trace
//! Airtime replays), used by the default policy to place shares of GPUs.
//!
//! For one kind of task `m` and a node with free GPU capacity `f_1 … f_k` (thousandths of each GPU):
//! - if `m` cannot run on the node at all (too few GPUs with room for it, or too little CPU), every
//!   free thousandth is fragmented for it: `F(m) = Σ f_g`;
//! - a share `d < 1000` can use only GPUs with at least `d` free: `F(m) = Σ f_g` over `f_g < d`;
//! - whole-GPU work can use only fully free GPUs: `F(m) = Σ f_g` over `f_g < 1000`.
//!
//! The node's fragmentation for a [`Workmix`] (the popularity `p_m` of each kind of task) is the
//! expectation `Σ p_m F(m)`. Placing a task where it *adds* the least fragmentation (the gradient)
//! leaves the most capacity usable by what comes next; best fit alone packs shares onto the
//! fullest GPU even when the sliver it leaves fits nothing that arrives.

use crate::abi::{Snapshot, WHOLE_GPU_MILLI};

/// One kind of task in the mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskKind {
    /// Thousandths of each GPU: below 1000 for a share of one GPU.
    pub milli: u32,
    /// GPUs, all on one node (1 for a share).
    pub count: u32,
    /// Host CPU it needs on the node, thousandths of a core.
    pub cpu_millis: u32,
    /// Its share of the mix (the weights sum to 1).
    pub weight: f64,
}

/// The work that typically arrives: kinds of task and their popularity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workmix {
    kinds: Vec<TaskKind>,
}

impl Workmix {
    /// A mix of `(milli, count, cpu_millis, weight)` kinds; weights are normalised, kinds with
    /// no weight, no GPUs or no capacity dropped.
    pub fn new(kinds: impl IntoIterator<Item = TaskKind>) -> Workmix {
        let mut kinds: Vec<TaskKind> =
            kinds.into_iter().filter(|k| k.weight > 0.0 && k.count > 0 && k.milli > 0).collect();
        let total: f64 = kinds.iter().map(|k| k.weight).sum();
        for kind in &mut kinds {
            kind.weight /= total;
        }
        Workmix { kinds }
    }

    /// The mix of a snapshot's own GPU work, pending and running (not MIG requests, which use
    /// instances rather than capacity): what the cluster runs is the best guess of what arrives
    /// next. Kinds are grouped by GPU demand, each weighted by how many workloads have it, and take
    /// the smallest CPU ask of their group.
    pub fn of(snapshot: &Snapshot<'_>) -> Workmix {
        let mut kinds: Vec<TaskKind> = Vec::new();
        for w in snapshot.workloads.iter().filter(|w| w.needs_gpu() && !w.asks_mig()) {
            let (milli, count) = if w.is_share() { (w.gpu_milli, 1) } else { (WHOLE_GPU_MILLI, w.gpu_count) };
            match kinds.iter_mut().find(|k| k.milli == milli && k.count == count) {
                Some(kind) => {
                    kind.weight += 1.0;
                    kind.cpu_millis = kind.cpu_millis.min(w.cpu_millis);
                }
                None => kinds.push(TaskKind { milli, count, cpu_millis: w.cpu_millis, weight: 1.0 }),
            }
        }
        Workmix::new(kinds)
    }

    /// The kinds, weights summing to 1 (empty for a mix of nothing).
    pub fn kinds(&self) -> &[TaskKind] {
        &self.kinds
    }

    /// Expected fragmented capacity of a node, in thousandths of a GPU: its GPUs' free thousandths
    /// (`free`, one per GPU, 0..=1000) and its free CPU. 0 for an empty mix.
    pub fn node_fragmentation(&self, free: impl Iterator<Item = u32> + Clone, cpu_free: u32) -> f64 {
        self.kinds.iter().map(|kind| kind.weight * f64::from(task_fragmentation(free.clone(), cpu_free, kind))).sum()
    }
}

/// `F(m)` for one node: the free thousandths `kind` could not use there.
pub fn task_fragmentation(free: impl Iterator<Item = u32> + Clone, cpu_free: u32, kind: &TaskKind) -> u32 {
    let total: u32 = free.clone().map(|f| f.min(WHOLE_GPU_MILLI)).sum();
    let share = kind.count == 1 && kind.milli < WHOLE_GPU_MILLI;
    let need = if share { kind.milli } else { WHOLE_GPU_MILLI };
    let usable_gpus = free.clone().filter(|&f| f >= need).count() as u32;
    if cpu_free < kind.cpu_millis || usable_gpus < kind.count {
        return total;
    }
    free.filter(|&f| f < need).map(|f| f.min(WHOLE_GPU_MILLI)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(milli: u32, count: u32, weight: f64) -> TaskKind {
        TaskKind { milli, count, cpu_millis: 0, weight }
    }

    #[test]
    fn a_share_cannot_use_a_sliver_smaller_than_itself() {
        // GPUs with 300, 600 and 1000 free; a half-GPU task can use the 600 and the 1000.
        let free = [300, 600, 1000];
        assert_eq!(task_fragmentation(free.into_iter(), 0, &kind(500, 1, 1.0)), 300);
        // A quarter fits everywhere: nothing is fragmented for it.
        assert_eq!(task_fragmentation(free.into_iter(), 0, &kind(250, 1, 1.0)), 0);
    }

    #[test]
    fn whole_gpu_work_cannot_use_partly_held_gpus() {
        let free = [300, 600, 1000, 1000];
        assert_eq!(task_fragmentation(free.into_iter(), 0, &kind(1000, 2, 1.0)), 900);
        // Three whole GPUs do not exist here: every free thousandth is fragmented for it.
        assert_eq!(task_fragmentation(free.into_iter(), 0, &kind(1000, 3, 1.0)), 2900);
    }

    #[test]
    fn a_node_without_the_cpu_is_all_fragment() {
        let free = [1000, 1000];
        let needs_cpu = TaskKind { milli: 500, count: 1, cpu_millis: 4000, weight: 1.0 };
        assert_eq!(task_fragmentation(free.into_iter(), 3999, &needs_cpu), 2000);
        assert_eq!(task_fragmentation(free.into_iter(), 4000, &needs_cpu), 0);
    }

    #[test]
    fn the_expectation_weighs_each_kind_by_its_popularity() {
        let mix = Workmix::new([kind(500, 1, 3.0), kind(1000, 1, 1.0)]);
        assert!((mix.kinds()[0].weight - 0.75).abs() < 1e-12);
        let free = [300, 1000];
        // Half-GPU tasks: 300 fragmented; whole-GPU tasks: 300 fragmented.
        assert!((mix.node_fragmentation(free.into_iter(), 0) - 300.0).abs() < 1e-9);
        assert_eq!(Workmix::default().node_fragmentation(free.into_iter(), 0), 0.0);
    }

    #[test]
    fn the_gradient_keeps_a_whole_gpu_whole_where_best_fit_would_not_care() {
        // Mix: mostly half-GPU work. Node A has a GPU with 700 free; node B a GPU with 500 free.
        // A 200 task: best fit picks B (leaves 300); but 300 fits no half-GPU task, while A's
        // remaining 500 still does. The gradient picks A.
        let mix = Workmix::new([kind(500, 1, 1.0)]);
        let delta = |before: [u32; 1], after: [u32; 1]| {
            mix.node_fragmentation(after.into_iter(), 0) - mix.node_fragmentation(before.into_iter(), 0)
        };
        let on_a = delta([700], [500]);
        let on_b = delta([500], [300]);
        assert!(on_a < on_b, "A adds {on_a}, B adds {on_b}");
    }
}
