//! Watches: each change sent to every watch that selects the object before or after it, as
//! the API server's watch cache sends it (an object that stops matching a selector is a
//! DELETED event, one that starts matching an ADDED event).

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::resource::Kind;
use super::selector::Selector;
use super::store::{Change, Object};

/// What a watch request asks for.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub labels: Selector,
    pub fields: Selector,
    /// The resourceVersion to start after; `None`: the current objects first.
    pub from: Option<u64>,
    pub bookmarks: bool,
}

/// One watch's end of the store: lines of JSON, one event each.
pub struct Watcher {
    pub spec: WatchSpec,
    tx: mpsc::UnboundedSender<Bytes>,
    rx: Option<mpsc::UnboundedReceiver<Bytes>>,
}

impl Watcher {
    pub fn new(spec: WatchSpec) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            spec,
            tx,
            rx: Some(rx),
        }
    }

    /// The events, as the response body streams them.
    pub fn events(&mut self) -> mpsc::UnboundedReceiver<Bytes> {
        self.rx.take().expect("the events are taken once")
    }

    fn selects(&self, object: &Value) -> bool {
        let meta = &object["metadata"];
        self.spec
            .namespace
            .as_deref()
            .is_none_or(|ns| meta["namespace"].as_str() == Some(ns))
            && self.spec.labels.matches_labels(object)
            && self.spec.fields.matches_fields(object)
    }

    /// Sends what `change` is to this watch; `false` once nobody reads it any more.
    pub fn send_change(&self, change: &Change) -> bool {
        if change.key.kind != self.spec.kind {
            return !self.tx.is_closed();
        }
        let old = change.old.as_ref().filter(|o| self.selects(o));
        let new = change.new.as_ref().filter(|o| self.selects(o));
        match (old, new) {
            (None, Some(n)) => self.send("ADDED", n),
            (Some(_), Some(n)) => self.send("MODIFIED", n),
            // Gone, or no longer selected: the last state it was selected in, at this version.
            (Some(o), None) => {
                let mut last = (**o).clone();
                last["metadata"]["resourceVersion"] = change.rv.to_string().into();
                self.send("DELETED", &last)
            }
            (None, None) => !self.tx.is_closed(),
        }
    }

    /// Sends one ERROR event and ends the watch: the events of a watch that failed.
    pub fn error(mut self, error: &super::error::ApiError) -> mpsc::UnboundedReceiver<Bytes> {
        self.send("ERROR", &error.status());
        self.events()
    }

    pub fn send_added(&self, object: &Object) -> bool {
        !self.selects(object) || self.send("ADDED", object)
    }

    pub fn send_bookmark(&self, rv: u64) -> bool {
        if !self.spec.bookmarks {
            return !self.tx.is_closed();
        }
        let kind = self.spec.kind;
        let object = json!({"kind": kind.name(), "apiVersion": kind.api_version(),
            "metadata": {"resourceVersion": rv.to_string()}});
        self.send("BOOKMARK", &object)
    }

    fn send(&self, type_: &str, object: &Value) -> bool {
        self.tx.send(event_line(type_, object)).is_ok()
    }
}

/// A watch event as the API server streams it: one JSON object and a newline, `type` before
/// `object` (Go encodes `metav1.WatchEvent`'s fields in their order; a `json!` map would sort
/// `object` first, which the API server never sends and the operator's decoding relies on).
pub fn event_line(type_: &str, object: &Value) -> Bytes {
    #[derive(serde::Serialize)]
    struct Event<'a> {
        #[serde(rename = "type")]
        type_: &'a str,
        object: &'a Value,
    }
    let mut line = serde_json::to_vec(&Event { type_, object }).expect("JSON serializes");
    line.push(b'\n');
    Bytes::from(line)
}
