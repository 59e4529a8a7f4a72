//! The resources the model serves, and the REST paths that name them.

/// A kind of object the model stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    PodSet,
    At,
    Lease,
    Event,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Pod, Kind::PodSet, Kind::At, Kind::Lease, Kind::Event];

    /// The API group and version, as the REST path spells it (`v1` is the core group's).
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Pod => "v1",
            Kind::PodSet => "app.example.com/v1beta1",
            Kind::At => "cnat.programming-kubernetes.info/v1beta1",
            Kind::Lease => "coordination.k8s.io/v1",
            Kind::Event => "events.k8s.io/v1",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::PodSet => "PodSet",
            Kind::At => "At",
            Kind::Lease => "Lease",
            Kind::Event => "Event",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::PodSet => "podsets",
            Kind::At => "ats",
            Kind::Lease => "leases",
            Kind::Event => "events",
        }
    }

    /// The API group; `None` for the core group.
    pub fn group(self) -> Option<&'static str> {
        self.api_version().split_once('/').map(|(group, _)| group)
    }

    /// As the API server names the resource in its messages: `pods`, `podsets.app.example.com`.
    pub fn qualified(self) -> String {
        match self.group() {
            Some(group) => format!("{}.{group}", self.plural()),
            None => self.plural().to_string(),
        }
    }

    /// As the API server names the kind in some refusals: `Pod`,
    /// `At.cnat.programming-kubernetes.info`.
    pub fn qualified_kind(self) -> String {
        match self.group() {
            Some(group) => format!("{}.{group}", self.name()),
            None => self.name().to_string(),
        }
    }

    /// Our custom resources (the others are built into the API server).
    pub fn is_custom(self) -> bool {
        matches!(self, Kind::PodSet | Kind::At)
    }

    /// Kinds whose object a delete answers with (the others' answer is a `Status`).
    pub fn returns_deleted_object(self) -> bool {
        self == Kind::Pod
    }

    /// Kinds whose status is written only through `/status`, and whose main resource ignores
    /// status (our CRDs; pods behave the same for the writes the operator makes).
    pub fn has_status(self) -> bool {
        matches!(self, Kind::Pod | Kind::PodSet | Kind::At)
    }

    /// Kinds whose `metadata.generation` counts spec changes (pods' too, since Kubernetes
    /// 1.33, and their graceful deletion).
    pub fn has_generation(self) -> bool {
        matches!(self, Kind::Pod | Kind::PodSet | Kind::At)
    }

    /// Kinds that may be replaced without naming a resourceVersion (the others' PUT is refused
    /// then: Leases and custom resources).
    pub fn allows_unconditional_update(self) -> bool {
        matches!(self, Kind::Pod | Kind::Event)
    }

    /// The path of the object `name` in `namespace`, or of the collection.
    pub fn path(self, namespace: &str, name: Option<&str>) -> String {
        self.path_at(self.api_version(), namespace, name)
    }

    /// The same, at served version `version`.
    pub fn path_at(self, version: &str, namespace: &str, name: Option<&str>) -> String {
        let base = format!(
            "{}/namespaces/{namespace}/{}",
            prefix(version),
            self.plural()
        );
        match name {
            Some(n) => format!("{base}/{n}"),
            None => base,
        }
    }
}

fn prefix(api_version: &str) -> String {
    match api_version {
        "v1" => "/api/v1".into(),
        grouped => format!("/apis/{grouped}"),
    }
}

/// What a request path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    /// `None`: every namespace (a list or watch across the cluster).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The version it is served at, if not the one it is stored at (`versions`).
    pub version: Option<&'static str>,
}

/// Reads `/api/v1/namespaces/ns/pods/name/status` and its kin.
pub fn parse(path: &str) -> Option<Target> {
    let stored = Kind::ALL.into_iter().map(|k| (k, None));
    let others = Kind::ALL.into_iter().flat_map(|k| {
        super::versions::others(k)
            .iter()
            .map(move |v| (k, Some(*v)))
    });
    let (kind, version) = stored
        .chain(others)
        .find(|(k, v)| path.starts_with(&format!("{}/", prefix(v.unwrap_or(k.api_version())))))?;
    let served = prefix(version.unwrap_or(kind.api_version()));
    let rest: Vec<&str> = path[served.len()..]
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (namespace, rest) = match rest.as_slice() {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    (plural == kind.plural()).then_some(Target {
        kind,
        namespace,
        name,
        subresource,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_targets() {
        let t = parse("/apis/app.example.com/v1beta1/namespaces/ns/podsets/web/status").unwrap();
        assert_eq!(
            (t.kind, t.namespace.as_deref(), t.name.as_deref()),
            (Kind::PodSet, Some("ns"), Some("web"))
        );
        assert_eq!(t.subresource.as_deref(), Some("status"));
        let all = parse("/api/v1/pods").unwrap();
        assert_eq!((all.kind, all.namespace, all.name), (Kind::Pod, None, None));
        assert!(parse("/api/v1/namespaces/ns/configmaps").is_none());
        let alpha = parse("/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/ns/ats/a");
        let alpha = alpha.unwrap();
        assert_eq!(alpha.kind, Kind::At);
        assert_eq!(alpha.version, Some(crate::model::versions::AT_ALPHA));
        assert_eq!(t.version, None);
        assert_eq!(Kind::At.qualified(), "ats.cnat.programming-kubernetes.info");
        assert_eq!(
            Kind::Lease.path("x", Some("l")),
            "/apis/coordination.k8s.io/v1/namespaces/x/leases/l"
        );
    }
}
