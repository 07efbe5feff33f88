//! Workloads' output to the control plane: the runner hands every line of every attempt's stdout
//! and stderr to a [`LogSink`]; [`ship`] groups them into chunks (per attempt and stream, numbered,
//! at most `MAX_LOG_CHUNK_BYTES` each) and posts them in batches every half second. While the
//! control plane cannot be reached the chunks wait, up to [`MAX_BUFFERED_BYTES`]; past that the
//! oldest are dropped and the next chunk of that stream says how many lines were lost, so an
//! outage never grows the agent without bound and never blocks a workload's output.
//!
//! A line read from a workload's output spool carries the spool offset just past it: once its
//! chunk is delivered, that offset is *acknowledged* ([`Acknowledged`]), and the runner records it
//! beside the spool, so an agent that restarts resumes each stream where the control plane's copy
//! ends. Chunk numbers start from a base the agent raises at every start (its generation), so a
//! restarted agent's chunks never collide with, and sort after, its predecessor's.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::backoff::Backoff;
use crate::client::ControlPlaneClient;
use crate::protocol::{LogBatch, LogChunk, LogStream, MAX_LOG_BATCH_CHUNKS, MAX_LOG_CHUNK_BYTES};

/// Lines waiting in the channel before the shipper takes them; past this a line is counted lost.
const CHANNEL_LINES: usize = 16_384;
/// Chunks kept while the control plane is unreachable.
pub const MAX_BUFFERED_BYTES: usize = 8 * 1024 * 1024;
/// About the most JSON in one batch: within the control plane's default 1 MiB body limit even
/// when a chunk's text escapes to several times its size.
pub const MAX_BATCH_BYTES: usize = 256 * 1024;
/// How long lines gather before a batch goes out.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// One line of a workload's output (its newline removed).
#[derive(Debug, Clone)]
pub struct LogLine {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub stream: LogStream,
    pub text: String,
    /// The offset just past this line in its spool file, when it was read from one.
    pub end: Option<u64>,
}

/// Per attempt and stream, the spool offset up to which the control plane has the output.
#[derive(Debug, Clone, Default)]
pub struct Acknowledged(std::sync::Arc<std::sync::Mutex<HashMap<Key, u64>>>);

impl Acknowledged {
    /// The offset acknowledged for a stream (`None`: nothing yet).
    pub fn get(&self, key: &Key) -> Option<u64> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).copied()
    }

    /// Forgets a stream whose spool is gone.
    pub fn forget(&self, key: &Key) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }

    fn advance(&self, key: Key, end: u64) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = map.entry(key).or_insert(end);
        *at = (*at).max(end);
    }
}

/// Where the runner puts output lines.
#[derive(Debug, Clone)]
pub struct LogSink {
    tx: mpsc::Sender<LogLine>,
    lost: std::sync::Arc<std::sync::atomic::AtomicU64>,
    acknowledged: Acknowledged,
}

impl LogSink {
    /// A sink and the receiver [`ship`] reads; chunks are numbered from `first_seq` on.
    pub fn new(first_seq: u64) -> (LogSink, LogSource) {
        let (tx, rx) = mpsc::channel(CHANNEL_LINES);
        let lost = std::sync::Arc::default();
        let acknowledged = Acknowledged::default();
        (
            LogSink { tx, lost: std::sync::Arc::clone(&lost), acknowledged: acknowledged.clone() },
            LogSource { rx, lost, acknowledged, first_seq },
        )
    }

    /// What the control plane has of each spooled stream.
    pub fn acknowledged(&self) -> &Acknowledged {
        &self.acknowledged
    }

    /// Hands a line over; waits only while the collector catches up (it never waits on the
    /// network). A line sent after the shipper is gone is counted lost.
    pub async fn send(&self, line: LogLine) {
        if self.tx.send(line).await.is_err() {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The shipper's end of a [`LogSink`].
pub struct LogSource {
    rx: mpsc::Receiver<LogLine>,
    lost: std::sync::Arc<std::sync::atomic::AtomicU64>,
    acknowledged: Acknowledged,
    first_seq: u64,
}

#[cfg(test)]
impl LogSource {
    /// The next line handed over (tests read the sink directly).
    pub(crate) async fn next_line(&mut self) -> Option<LogLine> {
        self.rx.recv().await
    }
}

/// A stream of one attempt: workload, attempt, stdout or stderr.
pub type Key = (Uuid, u32, LogStream);

/// How many bits of a chunk number count chunks within one agent process; the bits above hold
/// the agent's generation ([`first_seq`]).
const SEQ_BITS: u32 = 40;

/// The first chunk number of the agent process of `generation` (raised at every agent start):
/// above every number an earlier process used, with 2^40 chunks of room (64 PiB of output).
pub fn first_seq(generation: u64) -> u64 {
    (generation & ((1 << (63 - SEQ_BITS)) - 1)) << SEQ_BITS
}

/// Lines grouped into chunks, oldest first, bounded in bytes.
#[derive(Default)]
pub struct Chunker {
    ready: VecDeque<LogChunk>,
    open: HashMap<Key, LogChunk>,
    next_seq: HashMap<Key, u64>,
    /// The first chunk number of a stream not seen yet.
    first_seq: u64,
    /// Per chunk (stream and number), the spool offset just past its last line.
    ends: HashMap<(Key, u64), u64>,
    /// Lines lost per stream, told in its next chunk.
    dropped: HashMap<Key, u64>,
    bytes: usize,
}

impl Chunker {
    /// Adds a line to its stream's open chunk, closing the chunk when the line would not fit.
    pub fn push(&mut self, line: LogLine) {
        let key = (line.workload_id, line.attempt, line.stream);
        // The control plane refuses NUL in any JSON string (and PostgreSQL text holds none): a
        // binary byte of output is shown as U+FFFD rather than costing the whole batch.
        let mut text = if line.text.contains('\0') { line.text.replace('\0', "\u{FFFD}") } else { line.text };
        text.truncate(floor_char_boundary(&text, MAX_LOG_CHUNK_BYTES - 1));
        text.push('\n');
        if self.open.get(&key).is_some_and(|c| c.text.len() + text.len() > MAX_LOG_CHUNK_BYTES) {
            self.close(&key);
        }
        self.bytes += text.len();
        let dropped = self.dropped.remove(&key).unwrap_or(0);
        let next_seq = &mut self.next_seq;
        let first_seq = self.first_seq;
        let chunk = self.open.entry(key).or_insert_with(|| {
            let seq = next_seq.entry(key).or_insert(first_seq);
            let chunk = LogChunk {
                workload_id: key.0,
                attempt: key.1,
                stream: key.2,
                seq: *seq,
                text: String::new(),
                dropped_lines: 0,
            };
            *seq += 1;
            chunk
        });
        chunk.dropped_lines += dropped;
        chunk.text.push_str(&text);
        if let Some(end) = line.end {
            self.ends.insert((key, chunk.seq), end);
        }
        while self.bytes > MAX_BUFFERED_BYTES {
            let Some(oldest) = self.ready.pop_front() else { break };
            self.bytes -= oldest.text.len();
            self.ends.remove(&((oldest.workload_id, oldest.attempt, oldest.stream), oldest.seq));
            let lines = oldest.text.lines().count() as u64 + oldest.dropped_lines;
            *self.dropped.entry((oldest.workload_id, oldest.attempt, oldest.stream)).or_default() += lines;
        }
    }

    fn close(&mut self, key: &Key) {
        if let Some(chunk) = self.open.remove(key) {
            self.ready.push_back(chunk);
        }
    }

    /// Closes every open chunk: what has gathered goes out in the next batch.
    pub fn flush(&mut self) {
        let keys: Vec<Key> = self.open.keys().copied().collect();
        for key in keys {
            self.close(&key);
        }
    }

    /// The oldest chunks, up to a batch (at most `MAX_LOG_BATCH_CHUNKS` chunks and about
    /// [`MAX_BATCH_BYTES`] of JSON, so a batch fits the control plane's body limit), without
    /// removing them (they go once delivered).
    pub fn batch(&self) -> Vec<LogChunk> {
        let mut bytes = 0;
        let mut out = Vec::new();
        for chunk in self.ready.iter().take(MAX_LOG_BATCH_CHUNKS) {
            let size = serde_json::to_string(chunk).map_or(MAX_BATCH_BYTES, |j| j.len());
            if !out.is_empty() && bytes + size > MAX_BATCH_BYTES {
                break;
            }
            bytes += size;
            out.push(chunk.clone());
        }
        out
    }

    /// The first `n` chunks were delivered (or refused for good): their spool offsets are
    /// acknowledged.
    pub fn delivered(&mut self, n: usize, acknowledged: &Acknowledged) {
        for chunk in self.ready.drain(..n.min(self.ready.len())) {
            self.bytes -= chunk.text.len();
            let key = (chunk.workload_id, chunk.attempt, chunk.stream);
            if let Some(end) = self.ends.remove(&(key, chunk.seq)) {
                acknowledged.advance(key, end);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.open.is_empty()
    }
}

fn floor_char_boundary(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
}

/// Ships the lines of `source` to the control plane until the sink is dropped and everything
/// gathered is delivered (or refused). `node_id` waits for the current registration. A collector
/// drains the channel into the chunker at once, whatever the network does, so a workload's output
/// never waits on the control plane.
pub async fn ship<F, Fut>(client: ControlPlaneClient, source: LogSource, node_id: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Uuid>,
{
    let LogSource { mut rx, lost, acknowledged, first_seq } = source;
    let chunker = std::sync::Arc::new(std::sync::Mutex::new(Chunker { first_seq, ..Chunker::default() }));
    let collector = {
        let chunker = std::sync::Arc::clone(&chunker);
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                chunker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
            }
        })
    };
    let with =
        |f: &mut dyn FnMut(&mut Chunker)| f(&mut chunker.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut delay = FLUSH_EVERY;
    loop {
        let open = !collector.is_finished();
        if open {
            tokio::time::sleep(delay).await;
        }
        delay = FLUSH_EVERY;
        let lost = lost.swap(0, std::sync::atomic::Ordering::Relaxed);
        if lost > 0 {
            tracing::warn!(lines = lost, "workload output came faster than it could be taken; lines lost");
        }
        with(&mut |c| c.flush());
        loop {
            let mut batch = Vec::new();
            with(&mut |c| batch = c.batch());
            if batch.is_empty() {
                break;
            }
            let batch = LogBatch { chunks: batch };
            let node = node_id().await;
            match client.post_logs(node, &batch).await {
                Ok(()) => {
                    with(&mut |c| c.delivered(batch.chunks.len(), &acknowledged));
                    backoff.reset();
                }
                Err(error) if error.is_retryable() || error.is_node_not_found() => {
                    tracing::debug!(%error, "cannot ship workload output yet; retrying");
                    if !open {
                        // Shutting down, and the control plane cannot be reached: what is left is lost.
                        return;
                    }
                    delay = backoff.next_delay();
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, chunks = batch.chunks.len(), "the control plane refused workload output; dropping it");
                    with(&mut |c| c.delivered(batch.chunks.len(), &acknowledged));
                }
            }
        }
        if !open {
            let mut empty = false;
            with(&mut |c| empty = c.is_empty());
            if empty {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(w: Uuid, stream: LogStream, text: &str) -> LogLine {
        LogLine { workload_id: w, attempt: 1, stream, text: text.into(), end: None }
    }

    #[test]
    fn lines_are_chunked_per_stream_and_numbered() {
        let w = Uuid::new_v4();
        let mut c = Chunker::default();
        c.push(line(w, LogStream::Stdout, "one"));
        c.push(line(w, LogStream::Stderr, "oops"));
        c.push(line(w, LogStream::Stdout, "two"));
        c.flush();
        let mut batch = c.batch();
        batch.sort_by_key(|c| c.stream == LogStream::Stderr);
        assert_eq!(batch.len(), 2);
        assert_eq!((batch[0].text.as_str(), batch[0].seq), ("one\ntwo\n", 0));
        assert_eq!((batch[1].text.as_str(), batch[1].seq), ("oops\n", 0));
        c.delivered(2, &Acknowledged::default());
        c.push(line(w, LogStream::Stdout, "three"));
        c.flush();
        assert_eq!(c.batch()[0].seq, 1, "the next chunk of the stream is numbered on");
    }

    #[test]
    fn a_delivered_chunk_acknowledges_its_spool_offset_and_a_later_generation_numbers_above() {
        let w = Uuid::new_v4();
        let mut c = Chunker { first_seq: first_seq(3), ..Chunker::default() };
        let spooled = |text: &str, end| LogLine { end: Some(end), ..line(w, LogStream::Stdout, text) };
        c.push(spooled("one", 4));
        c.push(spooled("two", 8));
        c.flush();
        let acknowledged = Acknowledged::default();
        let key = (w, 1, LogStream::Stdout);
        assert_eq!(acknowledged.get(&key), None, "nothing delivered, nothing acknowledged");
        let batch = c.batch();
        assert_eq!(batch[0].seq, first_seq(3));
        assert!(first_seq(3) > first_seq(2) + (1 << 39), "a generation's numbers sort after the one before");
        c.delivered(batch.len(), &acknowledged);
        assert_eq!(acknowledged.get(&key), Some(8), "the offset past the chunk's last line");
        c.push(spooled("three", 14));
        c.flush();
        c.delivered(1, &acknowledged);
        assert_eq!(acknowledged.get(&key), Some(14));
        assert_eq!(first_seq(0), 0);
        assert!(first_seq(u64::MAX) <= i64::MAX as u64, "every number fits the control plane's bigint");
    }

    #[test]
    fn a_nul_in_the_output_does_not_reach_the_wire() {
        let w = Uuid::new_v4();
        let mut c = Chunker::default();
        c.push(line(w, LogStream::Stdout, "bin\0ary"));
        c.flush();
        assert_eq!(c.batch()[0].text, "bin\u{FFFD}ary\n");
    }

    #[test]
    fn a_chunk_never_passes_its_limit_and_a_long_line_is_cut() {
        let w = Uuid::new_v4();
        let mut c = Chunker::default();
        for _ in 0..3 {
            c.push(line(w, LogStream::Stdout, &"é".repeat(MAX_LOG_CHUNK_BYTES)));
        }
        c.flush();
        let batch = c.batch();
        assert_eq!(batch.len(), 3);
        assert!(batch.iter().all(|c| c.text.len() <= MAX_LOG_CHUNK_BYTES && c.text.ends_with('\n')));
    }

    #[test]
    fn an_outage_keeps_the_newest_output_and_counts_what_it_dropped() {
        let w = Uuid::new_v4();
        let mut c = Chunker::default();
        let big = "x".repeat(1000);
        let lines = 2 * MAX_BUFFERED_BYTES / 1001;
        for _ in 0..lines {
            c.push(line(w, LogStream::Stdout, &big));
        }
        c.flush();
        assert!(c.bytes <= MAX_BUFFERED_BYTES + MAX_LOG_CHUNK_BYTES, "bounded: {}", c.bytes);
        c.push(line(w, LogStream::Stdout, "after"));
        c.flush();
        assert_eq!(c.ready.back().unwrap().text, "after\n", "the newest output is kept");
        assert!(c.ready.iter().any(|c| c.dropped_lines > 0), "a chunk after the gap says lines were lost");
        let kept: u64 = c.ready.iter().map(|c| c.text.lines().count() as u64).sum();
        let told: u64 = c.ready.iter().map(|c| c.dropped_lines).sum();
        let to_tell: u64 = c.dropped.values().sum();
        assert_eq!(kept + told + to_tell, lines as u64 + 1, "every line is kept or counted");
    }
}
