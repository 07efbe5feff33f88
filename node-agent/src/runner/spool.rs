//! A workload's output, written by the workload itself to spool files that the agent tails.
//!
//! A workload's stdout and stderr are files in its attempt's directory (`<state>/workloads/<name>/`),
//! not pipes to the agent: a pipe dies with the agent that reads it, and a workload writing to a
//! dead pipe is killed by SIGPIPE, so no workload could outlive an agent restart. The agent tails
//! the files line by line into its [`LogSink`]; the spool offset the control plane has
//! acknowledged is recorded beside each file (`stdout.pos`), where the next agent process resumes.
//! After an agent is killed (SIGKILL) at most the lines shipped in its last fraction of a second,
//! acknowledged but not yet recorded, are shipped twice; none is lost.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
use tokio::sync::watch;
use uuid::Uuid;

use crate::logs::{LogLine, LogSink};
use crate::protocol::LogStream;

use super::MAX_OUTPUT_LINE;

/// How often a tail looks for new output.
const POLL: Duration = Duration::from_millis(100);

/// The spool file of `stream` in an attempt's directory.
pub fn path(dir: &Path, stream: LogStream) -> PathBuf {
    dir.join(stream_name(stream))
}

fn position_path(dir: &Path, stream: LogStream) -> PathBuf {
    dir.join(format!("{}.pos", stream_name(stream)))
}

fn stream_name(stream: LogStream) -> &'static str {
    match stream {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    }
}

/// Creates an attempt's two spool files in its fresh directory, opened for the workload to append to.
pub fn create(dir: &Path) -> std::io::Result<(std::fs::File, std::fs::File)> {
    let open = |stream| std::fs::OpenOptions::new().create(true).append(true).open(path(dir, stream));
    Ok((open(LogStream::Stdout)?, open(LogStream::Stderr)?))
}

/// The offset up to which the control plane has a stream (0 when nothing was recorded).
pub fn acknowledged(dir: &Path, stream: LogStream) -> u64 {
    std::fs::read_to_string(position_path(dir, stream)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

fn record_acknowledged(dir: &Path, stream: LogStream, offset: u64) {
    let file = position_path(dir, stream);
    let partial = file.with_extension("partial");
    if let Err(error) = std::fs::write(&partial, offset.to_string()).and_then(|()| std::fs::rename(&partial, &file)) {
        tracing::debug!(file = %file.display(), %error, "cannot record how much output was shipped");
    }
}

/// Which stream of which attempt a tail reads.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub workload_id: Uuid,
    pub attempt: u32,
    pub which: LogStream,
}

/// Tails one spool file from `from` until `ended` turns true and the file has been read to its
/// end: each line goes to the agent's log and to `sink`; the last non-empty one is kept in `last`
/// when given (a container engine's error); acknowledged offsets are recorded as they come.
pub async fn tail(
    dir: PathBuf,
    out: Output,
    from: u64,
    sink: Option<LogSink>,
    last: Option<Arc<std::sync::Mutex<Option<String>>>>,
    mut ended: watch::Receiver<bool>,
) {
    let key = (out.workload_id, out.attempt, out.which);
    let file_path = path(&dir, out.which);
    let mut file = match tokio::fs::File::open(&file_path).await {
        Ok(file) => file,
        Err(error) => {
            tracing::warn!(file = %file_path.display(), %error, "cannot read a workload's output");
            return;
        }
    };
    if from > 0 && file.seek(std::io::SeekFrom::Start(from)).await.is_err() {
        return;
    }
    let mut offset = from;
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut recorded = from;
    loop {
        // Seen before the read: once the workload has ended, a read that finds nothing new has
        // found the end of everything it wrote.
        let finished = *ended.borrow();
        let n = file.read(&mut buf).await.unwrap_or(0);
        if n > 0 {
            pending.extend_from_slice(&buf[..n]);
            let mut start = 0;
            while let Some(len) = next_line(&pending[start..]) {
                let line = &pending[start..start + len];
                start += len;
                emit(out, line, offset + start as u64, sink.as_ref(), last.as_deref()).await;
            }
            pending.drain(..start);
            offset += start as u64;
            continue;
        }
        if let Some(sink) = &sink
            && let Some(at) = sink.acknowledged().get(&key)
            && at > recorded
        {
            record_acknowledged(&dir, out.which, at);
            recorded = at;
        }
        if finished {
            if !pending.is_empty() {
                let len = pending.len();
                emit(out, &pending, offset + len as u64, sink.as_ref(), last.as_deref()).await;
            }
            return;
        }
        tokio::select! {
            _ = ended.changed() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// The length of the first whole line in `bytes` (with its newline), or of its first
/// `MAX_OUTPUT_LINE` bytes when a line is longer than that; `None` while the line is incomplete.
fn next_line(bytes: &[u8]) -> Option<usize> {
    match bytes.iter().take(MAX_OUTPUT_LINE as usize).position(|&b| b == b'\n') {
        Some(newline) => Some(newline + 1),
        None if bytes.len() >= MAX_OUTPUT_LINE as usize => Some(MAX_OUTPUT_LINE as usize),
        None => None,
    }
}

async fn emit(
    out: Output,
    line: &[u8],
    end: u64,
    sink: Option<&LogSink>,
    last: Option<&std::sync::Mutex<Option<String>>>,
) {
    let Output { workload_id, attempt, which } = out;
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    let name = stream_name(which);
    // Shipped to the control plane, a line is in the agent's own log only at debug level: a
    // chatty job must not flood the node's journal.
    if sink.is_some() {
        tracing::debug!(target: "workload", %workload_id, attempt, stream = name, "{text}");
    } else {
        tracing::info!(target: "workload", %workload_id, attempt, stream = name, "{text}");
    }
    if let Some(last) = last
        && !text.trim().is_empty()
        && let Ok(mut last) = last.lock()
    {
        *last = Some(text.chars().take(500).collect());
    }
    if let Some(sink) = sink {
        sink.send(LogLine { workload_id, attempt, stream: which, text: text.to_owned(), end: Some(end) }).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_at_newlines_and_at_the_longest_line() {
        assert_eq!(next_line(b"one\ntwo"), Some(4));
        assert_eq!(next_line(b"partial"), None);
        let long = vec![b'x'; MAX_OUTPUT_LINE as usize + 10];
        assert_eq!(next_line(&long), Some(MAX_OUTPUT_LINE as usize));
    }

    #[tokio::test]
    async fn a_tail_reads_what_is_appended_until_the_workload_ends_and_resumes_where_it_was_acknowledged() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let (mut stdout, _stderr) = create(dir.path()).unwrap();
        let (sink, mut source) = LogSink::new(0);
        let out = Output { workload_id: Uuid::new_v4(), attempt: 1, which: LogStream::Stdout };
        let (ended_tx, ended) = watch::channel(false);
        let tailing = tokio::spawn(tail(dir.path().to_path_buf(), out, 0, Some(sink.clone()), None, ended));
        writeln!(stdout, "first").unwrap();
        write!(stdout, "second, half").unwrap();
        let line = source.next_line().await.unwrap();
        assert_eq!((line.text.as_str(), line.end), ("first", Some(6)));
        write!(stdout, " then whole\nlast without newline").unwrap();
        ended_tx.send(true).unwrap();
        tailing.await.unwrap();
        let line = source.next_line().await.unwrap();
        assert_eq!((line.text.as_str(), line.end), ("second, half then whole", Some(30)));
        let line = source.next_line().await.unwrap();
        assert_eq!((line.text.as_str(), line.end), ("last without newline", Some(50)));
        assert_eq!(acknowledged(dir.path(), LogStream::Stdout), 0, "nothing was acknowledged");

        // The control plane acknowledges the first line; a tail started over resumes after it.
        record_acknowledged(dir.path(), LogStream::Stdout, 6);
        let from = acknowledged(dir.path(), LogStream::Stdout);
        let (sink, mut source) = LogSink::new(0);
        let (_ended_tx, ended) = watch::channel(true);
        tail(dir.path().to_path_buf(), out, from, Some(sink), None, ended).await;
        assert_eq!(source.next_line().await.unwrap().text, "second, half then whole");
    }
}
