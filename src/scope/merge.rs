//! Several namespaces' watches shown as one watch of them all. A watch's events are a list
//! (`Init`, `InitApply`s, `InitDone`) and then changes, and it lists again after losing its
//! place; what reads a watch (kube's reflector store, the pod cache) takes a list as the
//! whole truth and drops what it does not show. One namespace listing again must not drop
//! the others' objects, so the merged watch lists once, when every namespace has listed,
//! and shows a namespace's later lists as changes: what it shows again as updates, what it
//! no longer shows as deletes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::mem;

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher::{self, Event};

type Item<K> = watcher::Result<Event<K>>;

/// One watch of what `watches` (each with the namespace it watches) watch. One watch is
/// returned as it is.
pub(super) fn merged<K>(
    mut watches: Vec<(String, BoxStream<'static, Item<K>>)>,
    removed: fn(ObjectMeta) -> K,
) -> BoxStream<'static, Item<K>>
where
    K: Resource + Clone + Send + 'static,
{
    if watches.len() == 1
        && let Some((_, only)) = watches.pop()
    {
        return only;
    }
    let (namespaces, watches): (Vec<String>, Vec<_>) = watches.into_iter().unzip();
    let mut merge = Merge::new(namespaces, removed);
    let tagged = (watches.into_iter().enumerate()).map(|(i, w)| w.map(move |e| (i, e)));
    stream::select_all(tagged)
        .flat_map(move |(i, event)| stream::iter(merge.step(i, event)))
        .boxed()
}

/// The merged watch's state.
struct Merge<K> {
    spaces: Vec<Space<K>>,
    /// The object a delete carries, for one gone unseen.
    removed: fn(ObjectMeta) -> K,
    started: bool,
    /// Every namespace listed once: the merged list is done.
    listed: bool,
    /// Changes in namespaces that listed while others still list, shown after the list.
    held: VecDeque<(usize, Event<K>)>,
    /// Deletes found during the list, shown after it.
    gone: Vec<Event<K>>,
}

/// What the merged watch has shown of one namespace.
struct Space<K> {
    namespace: String,
    /// Name to UID of each object shown and not deleted.
    shown: HashMap<String, String>,
    /// The names a list under way showed.
    relisted: Option<HashSet<String>>,
    listed: bool,
    /// Objects a first list begun again showed under a name an earlier one showed with
    /// another UID: the merged list holds both, so the old one is deleted after it and the
    /// new one shown again (a delete goes by name in a reflector store, by UID in the pod
    /// cache).
    again: HashMap<String, K>,
}

impl<K> Space<K> {
    fn new(namespace: String) -> Self {
        Self {
            namespace,
            shown: HashMap::new(),
            relisted: None,
            listed: false,
            again: HashMap::new(),
        }
    }
}

impl<K: Resource + Clone> Merge<K> {
    fn new(namespaces: Vec<String>, removed: fn(ObjectMeta) -> K) -> Self {
        Self {
            spaces: namespaces.into_iter().map(Space::new).collect(),
            removed,
            started: false,
            listed: false,
            held: VecDeque::new(),
            gone: Vec::new(),
        }
    }

    /// What the merged watch shows for `event` of watch `i`.
    fn step(&mut self, i: usize, event: Item<K>) -> Vec<Item<K>> {
        let event = match event {
            Ok(event) => event,
            Err(e) => return vec![Err(e)],
        };
        let mut out = Vec::new();
        if !mem::replace(&mut self.started, true) {
            out.push(Event::Init);
        }
        if self.listed {
            self.change(i, event, &mut out);
        } else if self.spaces[i].listed {
            self.held.push_back((i, event));
        } else {
            self.list(i, event, &mut out);
        }
        out.into_iter().map(Ok).collect()
    }

    /// An event of a namespace's first list (or of its lists again before every namespace
    /// listed once: what an earlier one showed is still in the merged list).
    fn list(&mut self, i: usize, event: Event<K>, out: &mut Vec<Event<K>>) {
        let space = &mut self.spaces[i];
        match event {
            Event::Init => space.relisted = Some(HashSet::new()),
            Event::InitApply(obj) | Event::Apply(obj) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                if let Some(replaced) = space.saw(obj.meta()) {
                    self.gone.push(Event::Delete((self.removed)(replaced)));
                    space.again.insert(name, obj.clone());
                } else if let Some(again) = space.again.get_mut(&name) {
                    again.clone_from(&obj);
                }
                out.push(Event::InitApply(obj));
            }
            Event::Delete(obj) => {
                space.forget(obj.meta());
                self.gone.push(Event::Delete(obj));
            }
            Event::InitDone => {
                space.listed = true;
                let unseen = space.unseen().into_iter().map(self.removed);
                self.gone.extend(unseen.map(Event::Delete));
                if self.spaces.iter().all(|s| s.listed) {
                    self.listed = true;
                    out.push(Event::InitDone);
                    out.append(&mut self.gone);
                    for space in &mut self.spaces {
                        out.extend(space.again.drain().map(|(_, obj)| Event::Apply(obj)));
                    }
                    for (i, event) in mem::take(&mut self.held) {
                        self.change(i, event, out);
                    }
                }
            }
        }
    }

    /// An event once the merged list is done: a namespace's list shows as changes.
    fn change(&mut self, i: usize, event: Event<K>, out: &mut Vec<Event<K>>) {
        let space = &mut self.spaces[i];
        match event {
            Event::Init => space.relisted = Some(HashSet::new()),
            Event::InitApply(obj) | Event::Apply(obj) => {
                if let Some(replaced) = space.saw(obj.meta()) {
                    out.push(Event::Delete((self.removed)(replaced)));
                }
                out.push(Event::Apply(obj));
            }
            Event::Delete(obj) => {
                space.forget(obj.meta());
                out.push(Event::Delete(obj));
            }
            Event::InitDone => {
                let unseen = space.unseen().into_iter().map(self.removed);
                out.extend(unseen.map(Event::Delete));
            }
        }
    }
}

impl<K> Space<K> {
    /// Notes an object shown; returns the one it replaced under the same name (deleted and
    /// made again while the watch was away).
    fn saw(&mut self, meta: &ObjectMeta) -> Option<ObjectMeta> {
        let name = meta.name.clone().unwrap_or_default();
        let uid = meta.uid.clone().unwrap_or_default();
        if let Some(relisted) = self.relisted.as_mut() {
            relisted.insert(name.clone());
        }
        let before = self.shown.insert(name.clone(), uid.clone())?;
        (before != uid).then(|| self.meta(name, before))
    }

    fn forget(&mut self, meta: &ObjectMeta) {
        let name = meta.name.as_deref().unwrap_or_default();
        self.shown.remove(name);
        self.again.remove(name);
    }

    /// Ends a list: the objects shown before that it did not show, forgotten.
    fn unseen(&mut self) -> Vec<ObjectMeta> {
        let Some(relisted) = self.relisted.take() else {
            return Vec::new();
        };
        let gone: Vec<_> = (self.shown)
            .extract_if(|name, _| !relisted.contains(name))
            .collect();
        for (name, _) in &gone {
            self.again.remove(name);
        }
        gone.into_iter().map(|(n, uid)| self.meta(n, uid)).collect()
    }

    fn meta(&self, name: String, uid: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            uid: Some(uid),
            ..ObjectMeta::default()
        }
    }
}

#[cfg(test)]
mod tests;
