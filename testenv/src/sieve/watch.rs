//! One watch's events, held back or thinned out on their way to the client: Sieve's stale
//! and unobserved states. A JSON watch response is a stream of events, one JSON object a
//! line; the stream is cut into lines whatever its chunking, and only whole lines move.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Body;

/// What happens to the events of the perturbed watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perturbation {
    /// Every event reaches the client this long after the API server sent it, in order: a
    /// view that lags (Sieve's stale states).
    Hold(Duration),
    /// Events are gathered for this long from the first one held; then, of each object's
    /// events, only the last goes on, where it came: the states in between are never seen
    /// (Sieve's unobserved states). BOOKMARKs count as one object.
    LastOnly(Duration),
}

/// How many events the perturbed watches got from the API server, and how many of them
/// [`Perturbation::LastOnly`] dropped: the evidence that a perturbation had something to act
/// on. An event is counted dropped when a later one of its object's comes into its window,
/// so a run that ends before the window does still counts what it thinned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub received: usize,
    pub dropped: usize,
}

/// [`Tally`], as the relays count it.
#[derive(Default)]
pub(super) struct Counters {
    received: AtomicUsize,
    dropped: AtomicUsize,
}

impl Counters {
    pub(super) fn tally(&self) -> Tally {
        Tally {
            received: self.received.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// Cuts a byte stream into lines, each with its `\n`.
#[derive(Default)]
struct Lines {
    partial: BytesMut,
}

impl Lines {
    /// The lines that `chunk` completes.
    fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        self.partial.extend_from_slice(chunk);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            lines.push(self.partial.split_to(end + 1).freeze());
        }
        lines
    }

    /// What is left after the last `\n`, once the stream ended.
    fn rest(self) -> Option<Bytes> {
        (!self.partial.is_empty()).then(|| self.partial.freeze())
    }
}

/// Which events [`Perturbation::LastOnly`] merges: the same object's, or the bookmarks.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Key {
    Object(String),
    Bookmark,
    /// An ERROR, or a line that is not an event: never merged.
    Own(usize),
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    object: Object,
}

#[derive(Deserialize)]
struct Object {
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Metadata {
    uid: Option<String>,
}

fn key(line: &[u8], position: usize) -> Key {
    match serde_json::from_slice::<Event>(line) {
        Ok(e) if e.kind == "BOOKMARK" => Key::Bookmark,
        Ok(e) if matches!(e.kind.as_str(), "ADDED" | "MODIFIED" | "DELETED") => e
            .object
            .metadata
            .uid
            .map_or(Key::Own(position), Key::Object),
        _ => Key::Own(position),
    }
}

/// Of `lines`, each with its key, each object's last event only, at that event's place.
fn last_only(lines: Vec<(Key, Bytes)>) -> Vec<Bytes> {
    let mut later = HashSet::new();
    let mut kept: Vec<Bytes> = (lines.into_iter().rev())
        .filter_map(|(k, l)| later.insert(k).then_some(l))
        .collect();
    kept.reverse();
    kept
}

/// The lines held, each with when it arrived and its key.
struct Held {
    perturbation: Perturbation,
    lines: VecDeque<(Instant, Key, Bytes)>,
    /// Lines pushed so far: the position that keys a line that is not an event.
    pushed: usize,
}

impl Held {
    fn new(perturbation: Perturbation) -> Self {
        Self {
            perturbation,
            lines: VecDeque::new(),
            pushed: 0,
        }
    }

    /// Holds `line`; whether it supersedes a line held, which [`Perturbation::LastOnly`] will
    /// drop.
    fn push(&mut self, line: Bytes, now: Instant) -> bool {
        let k = key(&line, self.pushed);
        self.pushed += 1;
        let supersedes = matches!(self.perturbation, Perturbation::LastOnly(_))
            && self.lines.iter().any(|(_, held, _)| *held == k);
        self.lines.push_back((now, k, line));
        supersedes
    }

    /// When the next lines are due: the oldest line's delay, or its window, ends.
    fn next_due(&self) -> Option<Instant> {
        let (arrived, _, _) = self.lines.front()?;
        Some(
            *arrived
                + match self.perturbation {
                    Perturbation::Hold(d) | Perturbation::LastOnly(d) => d,
                },
        )
    }

    /// The lines to deliver at `now`.
    fn take_due(&mut self, now: Instant) -> Vec<Bytes> {
        if self.next_due().is_none_or(|due| due > now) {
            return Vec::new();
        }
        match self.perturbation {
            Perturbation::Hold(d) => {
                let due = self
                    .lines
                    .iter()
                    .take_while(|(t, _, _)| *t + d <= now)
                    .count();
                self.lines.drain(..due).map(|(_, _, l)| l).collect()
            }
            Perturbation::LastOnly(_) => {
                last_only(self.lines.drain(..).map(|(_, k, l)| (k, l)).collect())
            }
        }
    }
}

/// The body that the client gets for the watch answer `upstream`.
pub(super) fn perturb(
    upstream: Incoming,
    perturbation: Perturbation,
    counters: Arc<Counters>,
) -> Body {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(relay(upstream, Held::new(perturbation), tx, counters));
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        let line = rx.recv().await?;
        Some((Ok(Frame::data(line)), rx))
    });
    http_body_util::StreamBody::new(frames).boxed()
}

/// Moves the watch's lines from `upstream` to `tx` as `held` releases them, until the
/// upstream has ended and every held line is out, or the client went away.
async fn relay(
    mut upstream: Incoming,
    mut held: Held,
    tx: mpsc::Sender<Bytes>,
    counters: Arc<Counters>,
) {
    let mut lines = Some(Lines::default());
    loop {
        let due = held.next_due();
        tokio::select! {
            frame = upstream.frame(), if lines.is_some() => match (frame, lines.as_mut()) {
                (Some(Ok(frame)), Some(lines)) => {
                    let now = Instant::now();
                    let data = frame.into_data().unwrap_or_default();
                    for line in lines.push(&data) {
                        counters.received.fetch_add(1, Ordering::Relaxed);
                        if held.push(line, now) {
                            counters.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                // The watch ended (its timeout, or a broken connection): what is held still
                // goes out, at its time, then the stream ends as the upstream's did.
                _ => {
                    if let Some(rest) = lines.take().and_then(Lines::rest)
                        && held.push(rest, Instant::now())
                    {
                        counters.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            },
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                for line in held.take_due(Instant::now()) {
                    if tx.send(line).await.is_err() {
                        return;
                    }
                }
            }
            () = tx.closed() => return,
        }
        if lines.is_none() && held.next_due().is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, uid: &str, rv: u32) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"{kind}\",\"object\":{{\"kind\":\"Pod\",\"metadata\":{{\"uid\":\"{uid}\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
        ))
    }

    fn bookmark(rv: u32) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Pod\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}}}}}}\n"
        ))
    }

    #[test]
    fn lines_are_cut_at_newlines_whatever_the_chunks() {
        let mut lines = Lines::default();
        assert!(lines.push(b"{\"a\":").is_empty());
        assert_eq!(
            lines.push(b"1}\n{\"b\":2}\n{\"c\""),
            ["{\"a\":1}\n", "{\"b\":2}\n"]
        );
        assert_eq!(lines.push(b":3}\n"), ["{\"c\":3}\n"]);
        assert!(lines.push(b"").is_empty());
        assert!(lines.push(b"tail").is_empty());
        assert_eq!(lines.rest().as_deref(), Some(&b"tail"[..]));
    }

    #[test]
    fn events_are_keyed_by_object_uid_bookmarks_together_anything_else_alone() {
        assert_eq!(key(&event("ADDED", "u1", 5), 0), Key::Object("u1".into()));
        assert_eq!(key(&event("DELETED", "u1", 6), 1), Key::Object("u1".into()));
        assert_eq!(key(&bookmark(7), 2), Key::Bookmark);
        let error = br#"{"type":"ERROR","object":{"kind":"Status","metadata":{},"code":410}}"#;
        assert_eq!(key(error, 3), Key::Own(3));
        assert_eq!(key(b"not json\n", 4), Key::Own(4));
    }

    #[test]
    fn last_only_keeps_each_objects_last_event_in_its_place() {
        let error = Bytes::from_static(b"{\"type\":\"ERROR\",\"object\":{\"metadata\":{}}}\n");
        let lines = [
            event("ADDED", "a", 1),
            event("ADDED", "b", 2),
            bookmark(2),
            event("MODIFIED", "a", 3),
            error.clone(),
            event("DELETED", "b", 4),
            bookmark(4),
            event("MODIFIED", "c", 5),
        ];
        assert_eq!(
            last_only(
                lines
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (key(l, i), l.clone()))
                    .collect()
            ),
            [
                event("MODIFIED", "a", 3),
                error,
                event("DELETED", "b", 4),
                bookmark(4),
                event("MODIFIED", "c", 5),
            ]
        );
    }

    #[test]
    fn hold_releases_each_line_its_delay_after_it_came() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut held = Held::new(Perturbation::Hold(3 * s));
        assert_eq!(held.next_due(), None);
        held.push(event("ADDED", "a", 1), t0);
        held.push(event("MODIFIED", "a", 2), t0 + s);
        held.push(event("MODIFIED", "a", 3), t0 + 2 * s);
        assert_eq!(held.next_due(), Some(t0 + 3 * s));
        assert!(held.take_due(t0 + 2 * s).is_empty());
        assert_eq!(
            held.take_due(t0 + 4 * s),
            [event("ADDED", "a", 1), event("MODIFIED", "a", 2)]
        );
        assert_eq!(held.next_due(), Some(t0 + 5 * s));
        assert_eq!(held.take_due(t0 + 5 * s), [event("MODIFIED", "a", 3)]);
        assert_eq!(held.next_due(), None);
    }

    #[test]
    fn last_only_flushes_a_window_from_its_first_line() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(100);
        let mut held = Held::new(Perturbation::LastOnly(5 * ms));
        assert!(!held.push(event("ADDED", "a", 1), t0));
        assert!(held.push(event("MODIFIED", "a", 2), t0 + 2 * ms));
        assert!(!held.push(event("ADDED", "b", 3), t0 + 4 * ms));
        assert_eq!(held.next_due(), Some(t0 + 5 * ms));
        assert!(held.take_due(t0 + 4 * ms).is_empty());
        assert_eq!(
            held.take_due(t0 + 5 * ms),
            [event("MODIFIED", "a", 2), event("ADDED", "b", 3)]
        );
        // The next window starts with the next line.
        assert!(!held.push(event("DELETED", "a", 4), t0 + 9 * ms));
        assert_eq!(held.next_due(), Some(t0 + 14 * ms));
        assert_eq!(held.take_due(t0 + 14 * ms), [event("DELETED", "a", 4)]);
    }
}
