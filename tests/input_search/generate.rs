//! Objects generated from the CRDs' own OpenAPI schemas (issue 31, after Acto), at each
//! version the CRDs serve: a valid base object with one to three fields, anywhere in that
//! version's schema, set to values from its edges ([`crate::values`]); or a whole spec drawn
//! from the schema; or, for an At at v1alpha1, one read at that version and created again,
//! which carries its v1beta1 spec in the conversion's annotation. The same seed always gives
//! the same object.

use jiff::Timestamp;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use podset_operator::api::conversion;
use podset_operator::api::{AT_COMMAND_CONTAINER, DEPRECATED_VERSION, STORAGE_VERSION};
use serde_json::{Value, json};

use crate::values::Gen;
use testenv::harness::Kind;

/// The versions both CRDs serve.
pub const VERSIONS: [&str; 2] = [STORAGE_VERSION, DEPRECATED_VERSION];

/// One generated object: what it is, and how it was made (for the report).
#[derive(Clone)]
pub struct Generated {
    pub seed: u64,
    pub kind: Kind,
    /// The version it is written at: [`STORAGE_VERSION`] or [`DEPRECATED_VERSION`].
    pub version: &'static str,
    pub name: String,
    pub body: Value,
    pub how: String,
}

/// `group/version` of `kind` at `version`.
pub fn api_version(kind: Kind, version: &str) -> String {
    let group = kind.api_version().split_once('/').map_or("", |(g, _)| g);
    format!("{group}/{version}")
}

/// The schemas of each kind at each version, and every path below each spec.
pub struct Schemas {
    versions: Vec<Version>,
}

/// One version of a kind, as its CRD serves it.
struct Version {
    kind: Kind,
    name: &'static str,
    spec: Value,
    status: Value,
    paths: Vec<Vec<String>>,
}

/// Path segments that are not field names: an array's item, a map's value.
pub const ITEM: &str = "[]";
pub const VALUE: &str = "{}";

impl Schemas {
    /// From the CRDs (as the API server serves them).
    pub fn new(podset: &CustomResourceDefinition, at: &CustomResourceDefinition) -> Self {
        let mut versions = Vec::new();
        for (kind, crd) in [(Kind::PodSet, podset), (Kind::At, at)] {
            let crd = serde_json::to_value(crd).expect("a CRD serializes");
            for name in VERSIONS {
                let served = crd["spec"]["versions"].as_array().into_iter().flatten();
                let version = served
                    .into_iter()
                    .find(|v| v["name"] == name)
                    .unwrap_or_else(|| panic!("{kind:?} {name} is not served"));
                let root = &version["schema"]["openAPIV3Schema"]["properties"];
                let mut paths = Vec::new();
                collect_paths(&root["spec"], &mut Vec::new(), &mut paths);
                versions.push(Version {
                    kind,
                    name,
                    spec: root["spec"].clone(),
                    status: root["status"].clone(),
                    paths,
                });
            }
        }
        Schemas { versions }
    }

    fn version(&self, kind: Kind, version: &str) -> &Version {
        let found = self
            .versions
            .iter()
            .find(|v| v.kind == kind && v.name == version);
        found.unwrap_or_else(|| panic!("{kind:?} has no version {version}"))
    }

    /// The schemas of `kind`'s spec and status at `version`.
    pub fn schema(&self, kind: Kind, version: &str) -> (&Value, &Value) {
        let v = self.version(kind, version);
        (&v.spec, &v.status)
    }

    /// How many paths each kind's spec has at each version.
    pub fn paths(&self) -> Vec<(Kind, &'static str, usize)> {
        let count = |v: &Version| (v.kind, v.name, v.paths.len());
        self.versions.iter().map(count).collect()
    }

    /// The object of `seed`: as many PodSets as Ats, half of each at each version; most are a
    /// base object with a few fields mutated, one in seven a spec drawn whole from the schema,
    /// and one v1alpha1 At in four a copy of one read at that version.
    pub fn generate(&self, seed: u64, now: Timestamp) -> Generated {
        let mut rng = fastrand::Rng::with_seed(seed);
        let kind = if rng.bool() { Kind::PodSet } else { Kind::At };
        let version = VERSIONS[rng.usize(..VERSIONS.len())];
        self.drawn(&mut Gen { rng, now }, seed, kind, version)
    }

    /// The object of `seed` of `kind` at `version`.
    pub fn object(&self, seed: u64, kind: Kind, version: &str, now: Timestamp) -> Generated {
        let rng = fastrand::Rng::with_seed(seed);
        self.drawn(&mut Gen { rng, now }, seed, kind, version)
    }

    fn drawn(&self, g: &mut Gen, seed: u64, kind: Kind, version: &str) -> Generated {
        let version = self.version(kind, version);
        if kind == Kind::At && version.name == DEPRECATED_VERSION && g.rng.u8(0..4) == 0 {
            return self.copied(g, seed);
        }
        let (spec, how) = if g.rng.u8(0..7) == 0 {
            (g.draw(&version.spec, "spec", 0), "drawn whole".to_string())
        } else {
            let mut spec = base(g, kind, version.name);
            let n = g.rng.usize(1..=3);
            let how = mutate(g, version, &mut spec, n);
            (spec, how)
        };
        let name = format!("in-{seed:x}");
        let body = json!({
            "apiVersion": api_version(kind, version.name),
            "kind": format!("{kind:?}"),
            "metadata": {"name": name},
            "spec": spec,
        });
        Generated {
            seed,
            kind,
            version: version.name,
            name,
            body,
            how,
        }
    }

    /// An At read at v1alpha1 and created again (a copy under another name, say): a drawn
    /// v1beta1 At's v1alpha1 form, whose annotation holds the v1beta1 spec when v1alpha1
    /// cannot say it, sometimes with a v1alpha1 field changed.
    fn copied(&self, g: &mut Gen, seed: u64) -> Generated {
        let beta = self.drawn(g, seed, Kind::At, STORAGE_VERSION);
        let alpha = api_version(Kind::At, DEPRECATED_VERSION);
        let mut body = conversion::convert(beta.body, &alpha).expect("an At converts");
        let mut how = format!("read at v1alpha1 from [{}]", beta.how);
        if g.rng.bool() {
            let changed = mutate(
                g,
                self.version(Kind::At, DEPRECATED_VERSION),
                &mut body["spec"],
                1,
            );
            how = format!("{how}, then {changed}");
        }
        Generated {
            version: DEPRECATED_VERSION,
            body,
            how,
            ..beta
        }
    }
}

/// Sets `n` fields of `spec`, anywhere in `version`'s schema, to values at or past their
/// edges; which, and to what. Half of an At's are its own fields (its schedule, zone,
/// deadlines...), which its template's paths would otherwise outnumber by hundreds.
fn mutate(g: &mut Gen, version: &Version, spec: &mut Value, n: usize) -> String {
    let own: Vec<&Vec<String>> = version.paths.iter().filter(|p| p.len() == 1).collect();
    let mut changed = Vec::new();
    for _ in 0..n {
        let path = if version.kind == Kind::At && g.rng.bool() {
            own[g.rng.usize(..own.len())]
        } else {
            &version.paths[g.rng.usize(..version.paths.len())]
        };
        let leaf = child_at(&version.spec, path);
        let value = g.edge(leaf, path.last().map_or("spec", |s| s.as_str()));
        changed.push(format!("{}={:.60}", path.join("."), value.to_string()));
        g.set(spec, &version.spec, path, value);
    }
    changed.join(" ")
}

/// A valid spec of `kind` at `version`, as a user would write it.
fn base(g: &mut Gen, kind: Kind, version: &str) -> Value {
    match kind {
        Kind::PodSet if g.rng.bool() => json!({"replicas": g.rng.i32(1..=4)}),
        Kind::PodSet => json!({
            "replicas": g.rng.i32(1..=4),
            "template": {
                "metadata": {"labels": {"tier": "input-search"}},
                "spec": {"containers": [{
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                }]},
            },
        }),
        Kind::At if version == DEPRECATED_VERSION => json!({
            "schedule": g.schedule(),
            "command": "echo input-search",
        }),
        Kind::At => beta_at(g),
    }
}

/// A v1beta1 At a user would write: one container running a shell line (half the time
/// named as v1alpha1 names it: an At written at v1alpha1 and edited at v1beta1), a command
/// with arguments in an image, or two containers and the one that decides named; one in
/// three in a time zone (one in four of those odd), one in four with each deadline and a
/// time to live.
fn beta_at(g: &mut Gen) -> Value {
    let shell = json!({"name": "main", "command": ["sh", "-c", "echo input-search"]});
    let mut spec = match g.rng.u8(0..3) {
        0 => {
            let name = if g.rng.bool() {
                AT_COMMAND_CONTAINER
            } else {
                "main"
            };
            let container = json!({"name": name, "command": ["sh", "-c", "echo input-search"]});
            json!({"template": {"spec": {"containers": [container]}}})
        }
        1 => json!({"template": {"spec": {"containers": [{
            "name": "main",
            "image": "busybox:1.36",
            "command": ["echo"],
            "args": ["input", "search"],
        }]}}}),
        _ => json!({"containerName": "main", "template": {"spec": {"containers": [
            {"name": "side", "image": "busybox:1.36", "command": ["sleep", "3600"]},
            shell,
        ]}}}),
    };
    spec["schedule"] = if g.rng.u8(0..3) == 0 {
        let (name, zone) = g.zone();
        spec["timeZone"] = json!(name);
        json!(g.local_schedule(&zone))
    } else {
        json!(g.schedule())
    };
    let limits = [
        ("startDeadlineSeconds", 1),
        ("activeDeadlineSeconds", 1),
        ("ttlSecondsAfterFinished", 0),
    ];
    for (field, least) in limits {
        if g.rng.u8(0..4) == 0 {
            spec[field] = json!(g.rng.i64(least..=30));
        }
    }
    spec
}

fn collect_paths(schema: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut visit = |segment: &str, child: &Value| {
        prefix.push(segment.to_string());
        out.push(prefix.clone());
        collect_paths(child, prefix, out);
        prefix.pop();
    };
    if let Some(properties) = schema["properties"].as_object() {
        for (name, child) in properties {
            visit(name, child);
        }
    }
    if schema["items"].is_object() {
        visit(ITEM, &schema["items"]);
    }
    if schema["additionalProperties"].is_object() {
        visit(VALUE, &schema["additionalProperties"]);
    }
}

pub fn child<'a>(schema: &'a Value, segment: &str) -> &'a Value {
    match segment {
        ITEM => &schema["items"],
        VALUE => &schema["additionalProperties"],
        field => &schema["properties"][field],
    }
}

pub fn child_at<'a>(schema: &'a Value, path: &[String]) -> &'a Value {
    path.iter().fold(schema, |s, segment| child(s, segment))
}

#[cfg(test)]
mod tests {
    use super::*;
    use podset_operator::api::{at_crd, podset_crd};

    fn schemas() -> Schemas {
        Schemas::new(&podset_crd(), &at_crd())
    }

    #[test]
    fn a_seed_always_gives_the_same_object_and_seeds_reach_every_version_and_deep_fields() {
        let s = schemas();
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        for (kind, version, paths) in s.paths() {
            if (kind, version) == (Kind::At, DEPRECATED_VERSION) {
                assert_eq!(paths, 4, "schedule, command, image, startDeadlineSeconds");
            } else {
                assert!(
                    paths > 1000,
                    "{paths} {kind:?} {version} paths: its template's"
                );
            }
        }
        let drawn: Vec<Generated> = (0..400).map(|seed| s.generate(seed, now)).collect();
        for g in &drawn[..200] {
            assert_eq!(g.body, s.generate(g.seed, now).body);
        }
        let count = |f: &dyn Fn(&Generated) -> bool| drawn.iter().filter(|g| f(g)).count();
        for kind in [Kind::PodSet, Kind::At] {
            for version in VERSIONS {
                let at = api_version(kind, version);
                let n = count(&|g| {
                    g.kind == kind && g.version == version && g.body["apiVersion"] == at
                });
                assert!(n > 60, "only {n} of 400 are {kind:?}s at {version}");
            }
        }
        let deep = |kind| {
            count(&|g| {
                g.kind == kind
                    && g.version == STORAGE_VERSION
                    && g.how.contains("template.spec.containers.[].")
            })
        };
        assert!(deep(Kind::PodSet) > 5, "{} PodSets", deep(Kind::PodSet));
        assert!(
            deep(Kind::At) > 5,
            "{} Ats reach into a container",
            deep(Kind::At)
        );
        let zoned = count(&|g| g.body["spec"]["timeZone"].is_string());
        assert!(zoned > 10, "only {zoned} Ats in a time zone");
        let copies =
            count(&|g| g.body["metadata"]["annotations"][conversion::SPEC_ANNOTATION].is_string());
        assert!(
            copies > 10,
            "only {copies} v1alpha1 Ats carry a v1beta1 spec"
        );
    }
}
