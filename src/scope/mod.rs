//! Where the operator watches: every namespace, or a list of them (`WATCH_NAMESPACE=a,b`),
//! as controller-runtime's multi-namespace cache does. A list is watched one namespace at a
//! time, so the operator needs rights in those namespaces only (a Role in each, no
//! ClusterRole); [`merge`] presents their watches as one.

mod merge;

use std::fmt;

use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// The namespaces watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    /// Sorted, without repeats, never empty.
    Namespaces(Vec<String>),
}

impl Scope {
    /// `""` for every namespace, else namespace names separated by commas (spaces around a
    /// name are allowed; a repeated name counts once).
    pub fn parse(value: &str) -> Result<Self, String> {
        if value.is_empty() {
            return Ok(Self::All);
        }
        let mut names = Vec::new();
        for name in value.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(format!("not a namespace name: an empty name in {value:?}"));
            }
            names.push(crate::flags::namespace(name)?);
        }
        names.sort();
        names.dedup();
        Ok(Self::Namespaces(names))
    }

    /// The namespace each watch or list of the scope names: one per namespace, or none
    /// (all of them).
    pub fn each(&self) -> Vec<Option<&str>> {
        match self {
            Self::All => vec![None],
            Self::Namespaces(names) => names.iter().map(|ns| Some(ns.as_str())).collect(),
        }
    }

    /// The APIs of `K` a watch or list of the scope goes through.
    pub fn apis<K>(&self, client: &Client) -> Vec<Api<K>>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        let api = |ns: Option<&str>| match ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        self.each().into_iter().map(api).collect()
    }

    /// Watches `K` across the scope as one watch would ([`merge`] when it takes more than
    /// one), each namespace's watch retried with the default backoff. `removed` makes the
    /// object a delete event carries from the metadata of one gone unseen.
    pub fn watch<K>(
        &self,
        client: &Client,
        config: &watcher::Config,
        removed: fn(ObjectMeta) -> K,
    ) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + use<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + fmt::Debug
            + Send
            + 'static,
    {
        let each = self
            .each()
            .into_iter()
            .map(|ns| ns.unwrap_or_default().to_string());
        let watches = (each.zip(self.apis::<K>(client)))
            .map(|(ns, api)| (ns, watcher(api, config.clone()).default_backoff().boxed()))
            .collect();
        merge::merged(watches, removed)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("<all>"),
            Self::Namespaces(names) => f.write_str(&names.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_checked_sorted_and_counted_once() {
        assert_eq!(Scope::parse(""), Ok(Scope::All));
        assert_eq!(
            Scope::parse("team-a"),
            Ok(Scope::Namespaces(vec!["team-a".into()]))
        );
        let both = Scope::Namespaces(vec!["a".into(), "b".into()]);
        assert_eq!(Scope::parse("b,a"), Ok(both.clone()));
        assert_eq!(Scope::parse("b, a ,b"), Ok(both.clone()));
        assert_eq!(both.to_string(), "a,b");
        assert_eq!(Scope::All.to_string(), "<all>");
    }

    #[test]
    fn a_bad_name_in_a_list_is_named() {
        let err = Scope::parse("a,Team_B").unwrap_err();
        assert!(err.contains("not a namespace name"), "{err}");
        for empty in ["a,,b", "a,", " "] {
            let err = Scope::parse(empty).unwrap_err();
            assert!(err.contains("an empty name"), "{empty:?}: {err}");
        }
    }
}
