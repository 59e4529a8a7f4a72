use super::*;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

fn pod(ns: &str, name: &str, uid: &str) -> Pod {
    removed(ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        uid: Some(uid.into()),
        ..ObjectMeta::default()
    })
}

fn removed(metadata: ObjectMeta) -> Pod {
    Pod {
        metadata,
        ..Pod::default()
    }
}

/// An event as `kind:namespace/name@uid`, for comparing sequences.
fn shown(event: &Event<Pod>) -> String {
    let at = |kind: &str, p: &Pod| {
        let m = &p.metadata;
        let (ns, name) = (m.namespace.as_deref(), m.name.as_deref());
        let uid = m.uid.as_deref().unwrap_or_default();
        format!(
            "{kind}:{}/{}@{uid}",
            ns.unwrap_or_default(),
            name.unwrap_or_default()
        )
    };
    match event {
        Event::Init => "Init".into(),
        Event::InitApply(p) => at("InitApply", p),
        Event::InitDone => "InitDone".into(),
        Event::Apply(p) => at("Apply", p),
        Event::Delete(p) => at("Delete", p),
    }
}

/// A merge of two watches, of namespaces `a` and `b`.
fn two() -> Merge<Pod> {
    Merge::new(vec!["a".into(), "b".into()], removed)
}

/// Hands `event` of watch `i` to `merge`, and what it shows to `reader`.
fn deliver(merge: &mut Merge<Pod>, reader: &mut Reader, i: usize, event: Event<Pod>) {
    for shown in merge.step(i, Ok(event)) {
        reader.read(shown.expect("no error fed"));
    }
}

/// The events of a list of namespace `ns` showing `objects` (name, UID), as watch `i`'s.
fn list<'a>(
    i: usize,
    ns: &str,
    objects: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(usize, Event<Pod>)> {
    let mut events = vec![(i, Event::Init)];
    events.extend(
        objects
            .into_iter()
            .map(|(n, u)| (i, Event::InitApply(pod(ns, n, u)))),
    );
    events.push((i, Event::InitDone));
    events
}

fn feed(merge: &mut Merge<Pod>, events: Vec<(usize, Event<Pod>)>) -> Vec<String> {
    let out = events.into_iter().flat_map(|(i, e)| merge.step(i, Ok(e)));
    out.map(|e| shown(&e.expect("no error fed"))).collect()
}

#[test]
fn one_list_once_every_namespace_listed_and_changes_held_until_then() {
    let mut merge = two();
    let out = feed(
        &mut merge,
        vec![
            (0, Event::Init),
            (0, Event::InitApply(pod("a", "x", "1"))),
            (0, Event::InitDone),
            (1, Event::Init),
            // a's change while b still lists: after the list, never inside it.
            (0, Event::Apply(pod("a", "y", "2"))),
            (1, Event::InitApply(pod("b", "x", "3"))),
            (1, Event::InitDone),
            (1, Event::Delete(pod("b", "x", "3"))),
        ],
    );
    let want = [
        "Init",
        "InitApply:a/x@1",
        "InitApply:b/x@3",
        "InitDone",
        "Apply:a/y@2",
        "Delete:b/x@3",
    ];
    assert_eq!(out, want);
}

#[test]
fn a_namespace_listing_again_drops_only_its_own_unseen_objects() {
    let mut merge = two();
    let mut first = list(0, "a", [("x", "1"), ("y", "2")]);
    first.extend(list(1, "b", [("x", "3")]));
    feed(&mut merge, first);
    // a's watch lost its place: y was deleted and x made again meanwhile, z made.
    let out = feed(&mut merge, list(0, "a", [("x", "9"), ("z", "4")]));
    let want = ["Delete:a/x@1", "Apply:a/x@9", "Apply:a/z@4", "Delete:a/y@2"];
    assert_eq!(out, want, "b's x is left alone");
}

#[test]
fn a_first_list_begun_again_drops_what_only_the_earlier_one_showed() {
    let mut merge = two();
    let out = feed(
        &mut merge,
        vec![
            (0, Event::Init),
            (0, Event::InitApply(pod("a", "x", "1"))),
            (0, Event::Init),
            (0, Event::InitApply(pod("a", "y", "2"))),
            (0, Event::InitDone),
            (1, Event::Init),
            (1, Event::InitDone),
        ],
    );
    let want = [
        "Init",
        "InitApply:a/x@1",
        "InitApply:a/y@2",
        "InitDone",
        "Delete:a/x@1",
    ];
    assert_eq!(out, want);
}

#[test]
fn an_error_passes_through_and_one_watch_is_left_as_it_is() {
    let mut merge = two();
    let failed = merge.step(1, Err(watcher::Error::NoResourceVersion));
    assert!(
        matches!(failed.as_slice(), [Err(_)]),
        "no Init for an error"
    );
    let one = stream::iter(vec![Ok(Event::Apply(pod("a", "x", "1")))]).boxed();
    let out =
        futures::executor::block_on(merged(vec![("a".into(), one)], removed).collect::<Vec<_>>());
    assert_eq!(out.len(), 1);
    assert_eq!(shown(out[0].as_ref().unwrap()), "Apply:a/x@1");
}

/// What reads a watch, both ways: by name (kube's reflector store) and by UID (the pod
/// cache). A list replaces what it holds once done.
#[derive(Default)]
struct Reader {
    by_name: BTreeMap<(String, String), String>,
    by_uid: BTreeMap<String, (String, String)>,
    buffer: Option<Vec<Pod>>,
    lists: usize,
}

impl Reader {
    fn read(&mut self, event: Event<Pod>) {
        let key = |p: &Pod| {
            let m = &p.metadata;
            let ns = m.namespace.clone().unwrap_or_default();
            let name = m.name.clone().unwrap_or_default();
            ((ns, name), m.uid.clone().unwrap_or_default())
        };
        match event {
            Event::Init => self.buffer = Some(Vec::new()),
            Event::InitApply(p) => self.buffer.as_mut().expect("inside a list").push(p),
            Event::InitDone => {
                let listed = self.buffer.take().expect("a list ends that began");
                self.lists += 1;
                self.by_name.clear();
                self.by_uid.clear();
                for p in listed {
                    let (name, uid) = key(&p);
                    // The store's buffer keeps one object a name; the cache's one a UID.
                    self.by_name.insert(name.clone(), uid.clone());
                    self.by_uid.insert(uid, name);
                }
            }
            Event::Apply(p) => {
                let (name, uid) = key(&p);
                self.by_name.insert(name.clone(), uid.clone());
                self.by_uid.insert(uid, name);
            }
            Event::Delete(p) => {
                // A reflector store deletes by name, the pod cache by UID.
                let (name, uid) = key(&p);
                self.by_name.remove(&name);
                self.by_uid.remove(&uid);
            }
        }
    }
}

/// Each namespace's watch is driven as a real one behaves (lists, changes, lists again
/// after changes it did not see, lists cut short), interleaved at random: whenever every
/// watch is between lists, the merged watch's reader holds exactly what readers of each
/// namespace's own watch hold together, by name and by UID.
#[test]
fn a_reader_of_the_merged_watch_holds_every_namespace_s_objects() {
    for seed in 1..=400u64 {
        let mut draw = fastrand::Rng::with_seed(seed);
        let spaces = draw.usize(2..=4);
        let names: Vec<String> = (0..spaces).map(|i| format!("ns{i}")).collect();
        let mut merge = Merge::new(names.clone(), removed);
        let mut reader = Reader::default();
        let mut own: Vec<Reader> = (0..spaces).map(|_| Reader::default()).collect();
        let mut truth: Vec<BTreeMap<String, String>> = vec![BTreeMap::new(); spaces];
        // Each watch's events not yet delivered, and whether it is listing.
        let mut pending: Vec<VecDeque<Event<Pod>>> = vec![VecDeque::new(); spaces];
        let mut uid = 0;
        for i in 0..spaces {
            for _ in 0..draw.usize(..4) {
                uid += 1;
                truth[i].insert(format!("p{}", draw.usize(..4)), uid.to_string());
            }
            pending[i].extend(listed(&names[i], &truth[i]));
        }
        for _ in 0..60 {
            let i = draw.usize(..spaces);
            let name = format!("p{}", draw.usize(..4));
            let ns = &names[i];
            match draw.usize(..6) {
                // A change the watch shows: an update, or a new object.
                0 | 1 => {
                    uid += 1;
                    let now = truth[i].entry(name.clone()).or_insert(uid.to_string());
                    pending[i].push_back(Event::Apply(pod(ns, &name, now)));
                }
                2 => {
                    if let Some(gone) = truth[i].remove(&name) {
                        pending[i].push_back(Event::Delete(pod(ns, &name, &gone)));
                    }
                }
                // Changes unseen, then a list again; the list under way, if any, failing
                // before its end (a watch lists again from the start).
                3 => {
                    if draw.bool() && matches!(pending[i].back(), Some(Event::InitDone)) {
                        pending[i].pop_back();
                    }
                    uid += 1;
                    truth[i].insert(name, uid.to_string());
                    let first = truth[i].keys().next().cloned();
                    first.map(|f| truth[i].remove(&f));
                    pending[i].extend(listed(ns, &truth[i]));
                }
                // Deliver some events.
                _ => {
                    for _ in 0..=draw.usize(..4) {
                        if let Some(event) = pending[i].pop_front() {
                            own[i].read(event.clone());
                            deliver(&mut merge, &mut reader, i, event);
                        }
                    }
                    agrees(seed, &reader, &own);
                }
            }
        }
        for (i, events) in pending.iter_mut().enumerate() {
            for event in events.drain(..) {
                own[i].read(event.clone());
                deliver(&mut merge, &mut reader, i, event);
            }
        }
        agrees(seed, &reader, &own);
        let want: BTreeMap<(String, String), String> = (truth.iter().enumerate())
            .flat_map(|(i, t)| {
                t.iter()
                    .map(move |(n, u)| ((format!("ns{i}"), n.clone()), u.clone()))
            })
            .collect();
        assert_eq!(reader.by_name, want, "seed {seed}: by name, at the end");
    }
}

/// Whether `merged`, the reader of the merged watch, holds what the readers of each
/// namespace's watch hold together, once each of those has listed and none is listing.
fn agrees(seed: u64, merged: &Reader, own: &[Reader]) {
    if own.iter().any(|r| r.lists == 0 || r.buffer.is_some()) {
        return;
    }
    let by_name: BTreeMap<_, _> = own.iter().flat_map(|r| r.by_name.clone()).collect();
    let by_uid: BTreeMap<_, _> = own.iter().flat_map(|r| r.by_uid.clone()).collect();
    assert_eq!(merged.by_name, by_name, "seed {seed}: by name");
    assert_eq!(merged.by_uid, by_uid, "seed {seed}: by UID");
}

/// The events of a list of namespace `ns` showing `objects`.
fn listed(ns: &str, objects: &BTreeMap<String, String>) -> Vec<Event<Pod>> {
    let objects = objects.iter().map(|(n, u)| (n.as_str(), u.as_str()));
    list(0, ns, objects).into_iter().map(|(_, e)| e).collect()
}

#[test]
fn a_first_list_begun_again_with_an_object_made_again_shows_the_new_one() {
    let mut merge = two();
    let mut reader = Reader::default();
    let events = vec![
        (0, Event::Init),
        (0, Event::InitApply(pod("a", "x", "1"))),
        (0, Event::Init),
        (0, Event::InitApply(pod("a", "x", "2"))),
        (0, Event::InitDone),
        (1, Event::Init),
        (1, Event::InitDone),
    ];
    for (i, e) in events {
        deliver(&mut merge, &mut reader, i, e);
    }
    let key = ("a".to_string(), "x".to_string());
    assert_eq!(reader.by_name.get(&key).map(String::as_str), Some("2"));
    assert_eq!(reader.by_uid.keys().collect::<Vec<_>>(), ["2"]);
}
