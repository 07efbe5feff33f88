//! What `/proc` says of a process: its parent and its process group. Reading only; creating and
//! signalling processes is the runner's alone. Linux only.

/// A process's parent pid and process group, from `/proc/<pid>/stat`; `None` when it is gone, is a
/// zombie, or cannot be read.
pub fn parent_and_group(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp …"; comm may hold spaces and parentheses, so split at the last ')'.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" {
        return None;
    }
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((parent, group))
}

/// How many ancestors [`ancestry`] walks at most: deeper trees are not workloads' children.
const MAX_ANCESTRY: usize = 64;

/// The process, then each ancestor up to (not including) init, with each one's process group:
/// `(pid, process group)` pairs, nearest first. Stops where `/proc` cannot be read.
pub fn ancestry(pid: u32) -> impl Iterator<Item = (u32, u32)> {
    let mut next = Some(pid);
    std::iter::from_fn(move || {
        let pid = next.take()?;
        let (parent, group) = parent_and_group(pid)?;
        if parent > 1 && parent != pid {
            next = Some(parent);
        }
        Some((pid, group))
    })
    .take(MAX_ANCESTRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_its_ancestors() {
        let me = std::process::id();
        let Some((parent, group)) = parent_and_group(me) else { panic!("this process has a /proc entry") };
        assert!(parent > 0 && group > 0);
        let chain: Vec<(u32, u32)> = ancestry(me).collect();
        assert_eq!(chain.first(), Some(&(me, group)));
        if parent > 1 {
            assert_eq!(chain.get(1).map(|(pid, _)| *pid), Some(parent));
        }
        assert_eq!(parent_and_group(u32::MAX), None);
        assert_eq!(ancestry(u32::MAX).count(), 0);
    }
}
