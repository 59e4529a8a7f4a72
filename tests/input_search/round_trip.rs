//! The At's conversion round-trips, over objects drawn from both versions' schemas (after
//! apimachinery's round-trip fuzz tests), without a cluster. Each object is dressed with the
//! metadata and status a stored At has, and taken as the API server holds it ([`held`]);
//! each conversion's answer is taken as the API server holds that, as it does. Properties:
//!
//! 1. hub-spoke-hub: a v1beta1 At read at v1alpha1 and back is the same object, metadata,
//!    status and all, whatever its spec (what v1alpha1 cannot say travels in the annotation);
//! 2. spoke-hub-spoke: a v1alpha1 At, written without the annotation or read unedited with it,
//!    stored at v1beta1 and read at v1alpha1 is the same object;
//! 3. an edit at v1alpha1 of an At carrying the annotation changes only what it changed: the
//!    v1alpha1 client reads back what it wrote; in the v1beta1 spec only the edited fields'
//!    footprint moved (a schedule: `schedule` and `timeZone`; the command: the command
//!    container's `command` and `args`; the image: its `image`; the start deadline: itself);
//!    metadata and status are the edited ones; and the v1beta1 rules on what conversion writes
//!    (no `timeZone` beside a UTC schedule, the command container named) still hold;
//! 4. every answer is what the API server holds as it is: nothing in it to prune, every field
//!    of its version's type.
//!
//! Outside the domain, each for its reason: a v1beta1 At that carries the annotation itself
//! loses it (the conversion's own; the hub never holds it: property 1 expects it dropped); a
//! v1alpha1 `image: null` reads back absent (null and absent are one to every reader, and
//! v1beta1's container image is not nullable: the API server prunes the null from the hub it
//! stores); an edit at v1alpha1 of an At without the command container the v1beta1 rules
//! require gives the v1alpha1 spec alone (no such At is stored: property 3 skips them).

use jiff::Timestamp;
use podset_operator::api::conversion::{SPEC_ANNOTATION, convert};
use podset_operator::api::{DEPRECATED_VERSION, STORAGE_VERSION, at_crd, podset_crd};
use serde_json::{Value, json};
use testenv::harness::Kind;

use crate::generate::{Schemas, api_version};
use crate::held::{alpha_null_image_dropped, held, typed};
use crate::values::Gen;

/// Seeds per run; `ROUND_TRIP_SEEDS` to choose.
const SEEDS: u64 = 3000;
/// The v1alpha1 fields, each of which an edit may change.
const ALPHA_FIELDS: [&str; 4] = ["schedule", "command", "image", "startDeadlineSeconds"];

struct Trips {
    schemas: Schemas,
    now: Timestamp,
}

impl Trips {
    /// `object` as the API server holds it at `version`.
    fn held(&self, object: &Value, version: &str) -> Value {
        let (spec, status) = self.schemas.schema(Kind::At, version);
        held(object, spec, status)
    }

    /// `object` converted to `version`, as the API server holds the answer; an error if the
    /// answer is not that already, or not of the version's types.
    fn convert(&self, object: &Value, version: &str) -> Result<Value, String> {
        let answer = convert(object.clone(), &api_version(Kind::At, version))?;
        let held = self.held(&answer, version);
        if held != answer {
            let at = difference(&answer, &held, String::new()).unwrap_or_default();
            return Err(format!(
                "the API server prunes the answer at {version}: {at}"
            ));
        }
        let (spec, status) = self.schemas.schema(Kind::At, version);
        if !typed(spec, &held["spec"]) || !typed(status, &held["status"]) {
            return Err(format!(
                "the answer at {version} is not of its types: {held:#}"
            ));
        }
        Ok(held)
    }

    /// The At of `seed` at `version`, dressed and held; `None` if the API server would refuse it.
    fn at(&self, seed: u64, version: &str) -> Option<Value> {
        let mut object = self.schemas.object(seed, Kind::At, version, self.now).body;
        let mut g = Gen {
            rng: fastrand::Rng::with_seed(!seed),
            now: self.now,
        };
        let (spec, status) = self.schemas.schema(Kind::At, version);
        dress(&mut g, &mut object, status);
        if version == DEPRECATED_VERSION {
            alpha_null_image_dropped(&mut object);
        }
        let object = held(&object, spec, status);
        let schedule = object["spec"]["schedule"].as_str().unwrap_or_default();
        // v1alpha1's pattern: a UTC time, with its `Z` (conversion reads no other part of it).
        let utc = version == STORAGE_VERSION || (schedule.len() == 20 && schedule.ends_with('Z'));
        let admitted = typed(spec, &object["spec"]) && typed(status, &object["status"]) && utc;
        let read = version == STORAGE_VERSION || self.read_of_a_stored_at(&object);
        (admitted && read).then_some(object)
    }

    /// Whether `object`'s annotation, if it holds a spec, holds one the API server holds at
    /// v1beta1: the one it was read from. (Any other is stored all the same, unchecked by
    /// v1beta1's schema: the cluster's input search draws those. An annotation that is no
    /// spec is dropped, and the v1alpha1 fields rule.)
    fn read_of_a_stored_at(&self, object: &Value) -> bool {
        let text = annotation(object).and_then(Value::as_str);
        let spec = text.and_then(|t| serde_json::from_str::<Value>(t).ok());
        let Some(spec) = spec.filter(Value::is_object) else {
            return true;
        };
        let (beta, status) = self.schemas.schema(Kind::At, STORAGE_VERSION);
        let at = json!({"spec": spec});
        held(&at, beta, status) == at && typed(beta, &spec)
    }
}

/// Adds to `object` the metadata a stored At has (labels, annotations, a finalizer; one in
/// twenty the conversion's own annotation, holding no spec) and, most of the time, a status
/// drawn from `status`.
fn dress(g: &mut Gen, object: &mut Value, status: &Value) {
    let metadata = &mut object["metadata"];
    metadata["namespace"] = json!("input-search");
    metadata["uid"] = json!(format!("{:032x}", g.rng.u128(..)));
    metadata["resourceVersion"] = json!(g.rng.u32(1..).to_string());
    metadata["generation"] = json!(g.rng.i64(1..=9));
    metadata["creationTimestamp"] = json!("2026-01-02T03:04:05Z");
    for (map, key) in [
        ("labels", "tier"),
        ("annotations", "team"),
        ("annotations", "example.com/note"),
    ] {
        if g.rng.bool() {
            metadata[map][key] = json!(g.pick(&["blue", "", "line\nbreak", "{\"json\": 1}"]));
        }
    }
    if g.rng.u8(0..20) == 0 {
        metadata["annotations"][SPEC_ANNOTATION] =
            json!(g.pick(&["", "{}", "not json", "{\"schedule\": 1}"]));
    }
    if g.rng.bool() {
        metadata["finalizers"] = json!(["example.com/keep"]);
    }
    if g.rng.u8(0..4) != 0 {
        object["status"] = g.draw(status, "status", 1);
    }
}

/// Property 1: a v1beta1 At read at v1alpha1 and written back is the same object.
fn hub_spoke_hub(t: &Trips, hub: &Value) -> Result<(), String> {
    let spoke = t.convert(hub, DEPRECATED_VERSION)?;
    let back = t.convert(&spoke, STORAGE_VERSION)?;
    same(
        "v1beta1 -> v1alpha1 -> v1beta1",
        &back,
        &t.held(&unannotated(hub), STORAGE_VERSION),
    )
}

/// Property 2: a v1alpha1 At stored at v1beta1 and read at v1alpha1 is the same object; one
/// that carried the annotation, the same but for the annotation, and standing for the same
/// v1beta1 At.
fn spoke_hub_spoke(t: &Trips, spoke: &Value) -> Result<(), String> {
    let hub = t.convert(spoke, STORAGE_VERSION)?;
    let back = t.convert(&hub, DEPRECATED_VERSION)?;
    if annotation(spoke).is_none() {
        return same("v1alpha1 -> v1beta1 -> v1alpha1", &back, spoke);
    }
    let (left, right) = (unannotated(&back), unannotated(spoke));
    same(
        "v1alpha1 -> v1beta1 -> v1alpha1, but for the annotation",
        &t.held(&left, DEPRECATED_VERSION),
        &t.held(&right, DEPRECATED_VERSION),
    )?;
    same(
        "the v1beta1 At the v1alpha1 read stands for",
        &t.convert(&back, STORAGE_VERSION)?,
        &hub,
    )
}

/// Property 3: `hub` read at v1alpha1, and written back with some of its v1alpha1 fields set
/// as `other` has them, a label added and its status changed, changes only what was changed.
fn edit(t: &Trips, g: &mut Gen, hub: &Value, other: &Value) -> Result<(), String> {
    let read = t.convert(hub, DEPRECATED_VERSION)?;
    let mut write = read.clone();
    let mut changed = Vec::new();
    for field in ALPHA_FIELDS {
        if g.rng.bool() {
            match other["spec"].get(field) {
                Some(value) => write["spec"][field] = value.clone(),
                None => remove(&mut write["spec"], field),
            }
        }
        if write["spec"].get(field) != read["spec"].get(field) {
            changed.push(field);
        }
    }
    if g.rng.bool() {
        write["metadata"]["labels"]["edited"] = json!("yes");
    }
    if g.rng.bool() {
        write["status"]["phase"] = json!("DONE");
    }
    let write = t.held(&write, DEPRECATED_VERSION);
    let stored = t.convert(&write, STORAGE_VERSION)?;
    let written = t.held(&unannotated(&write), STORAGE_VERSION);
    same(
        "the metadata written",
        &stored["metadata"],
        &written["metadata"],
    )?;
    same("the status written", &stored["status"], &written["status"])?;
    let reread = t.convert(&stored, DEPRECATED_VERSION)?;
    same(
        "the v1alpha1 spec read back",
        &reread["spec"],
        &write["spec"],
    )?;
    let outside = |spec: &Value| footprint_removed(spec, &changed);
    let what = format!("the v1beta1 spec but for {changed:?}");
    same(&what, &outside(&stored["spec"]), &outside(&hub["spec"]))?;
    let broken = |holds: fn(&Value) -> bool| holds(&hub["spec"]) && !holds(&stored["spec"]);
    let rule = [
        ("zone", broken(zone_rule)),
        ("container", broken(container_rule)),
    ];
    match rule.iter().find(|(_, broken)| *broken) {
        Some((rule, _)) => Err(format!(
            "the edit {changed:?} broke the {rule} rule: {:#}",
            stored["spec"]
        )),
        None => Ok(()),
    }
}

/// `spec` without what an edit at v1alpha1 of `changed` may move in it.
fn footprint_removed(spec: &Value, changed: &[&str]) -> Value {
    let mut spec = spec.clone();
    for field in changed {
        match *field {
            "schedule" => ["schedule", "timeZone"]
                .iter()
                .for_each(|f| remove(&mut spec, f)),
            "command" | "image" => {
                let footprint: &[&str] = if *field == "image" {
                    &["image"]
                } else {
                    &["command", "args"]
                };
                if let Some(container) = command_container(&mut spec) {
                    footprint.iter().for_each(|f| remove(container, f));
                }
            }
            other => remove(&mut spec, other),
        }
    }
    spec
}

/// The container whose exit decides the At, as the v1beta1 API says: the one `containerName`
/// names, else the first.
fn command_container(spec: &mut Value) -> Option<&mut Value> {
    let name = spec["containerName"].as_str().map(str::to_string);
    let containers = spec
        .pointer_mut("/template/spec/containers")
        .and_then(Value::as_array_mut);
    containers.and_then(|c| match name {
        Some(name) => c.iter_mut().find(|c| c["name"] == name.as_str()),
        None => c.first_mut(),
    })
}

/// The v1beta1 rule that the command's container exists: named, or the only one.
fn container_rule(spec: &Value) -> bool {
    let containers = spec
        .pointer("/template/spec/containers")
        .and_then(Value::as_array);
    containers.is_some_and(|c| match spec["containerName"].as_str() {
        Some(name) => c.iter().any(|c| c["name"] == name),
        None => c.len() == 1,
    })
}

/// The v1beta1 rule that a UTC schedule (`Z`) has no `timeZone` beside it.
fn zone_rule(spec: &Value) -> bool {
    spec["timeZone"].is_null() || !spec["schedule"].as_str().unwrap_or_default().ends_with('Z')
}

fn annotation(object: &Value) -> Option<&Value> {
    object["metadata"]["annotations"].get(SPEC_ANNOTATION)
}

/// `object` without the conversion's annotation.
fn unannotated(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(annotations) = object.pointer_mut("/metadata/annotations") {
        remove(annotations, SPEC_ANNOTATION);
    }
    object
}

fn remove(object: &mut Value, field: &str) {
    if let Some(map) = object.as_object_mut() {
        map.remove(field);
    }
}

/// An error naming where `got` and `want` first differ, unless they are equal.
fn same(what: &str, got: &Value, want: &Value) -> Result<(), String> {
    match difference(got, want, String::new()) {
        None => Ok(()),
        Some(at) => Err(format!("{what}: {at}")),
    }
}

/// Where `a` and `b` first differ: a JSON pointer and both values.
fn difference(a: &Value, b: &Value, at: String) -> Option<String> {
    if let (Value::Object(x), Value::Object(y)) = (a, b) {
        let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
        return keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
            (Some(v), Some(w)) => difference(v, w, format!("{at}/{k}")),
            (v, w) => Some(format!("{at}/{k}: {v:.300?} vs {w:.300?}")),
        });
    }
    (a != b).then(|| format!("{at}: {a:.300} vs {b:.300}"))
}

#[test]
fn conversion_round_trips_ats_drawn_from_both_versions_and_edits_change_only_what_they_change() {
    let seeds = std::env::var("ROUND_TRIP_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEEDS);
    let began = std::time::Instant::now();
    let t = Trips {
        schemas: Schemas::new(&podset_crd(), &at_crd()),
        now: Timestamp::from_second(1_800_000_000).unwrap(),
    };
    let mut checked = std::collections::BTreeMap::<&str, u64>::new();
    let mut failed = std::collections::BTreeMap::<&str, Vec<String>>::new();
    let mut seeds_failing = std::collections::BTreeSet::new();
    let mut record = |property, seed: u64, result: Result<(), String>| {
        *checked.entry(property).or_default() += 1;
        if let Err(e) = result {
            seeds_failing.insert(seed);
            failed
                .entry(property)
                .or_default()
                .push(format!("seed {seed}: {e}"));
        }
    };
    for seed in 0..seeds {
        if let Some(hub) = t.at(seed, STORAGE_VERSION) {
            record("1 hub-spoke-hub", seed, hub_spoke_hub(&t, &hub));
            if container_rule(&hub["spec"]) {
                let mut others = (1..).filter_map(|k| t.at(seed ^ (k << 32), DEPRECATED_VERSION));
                let other = others.next().expect("a v1alpha1 At admitted");
                let mut g = Gen {
                    rng: fastrand::Rng::with_seed(seed),
                    now: t.now,
                };
                record("3 edit at v1alpha1", seed, edit(&t, &mut g, &hub, &other));
            }
        }
        if let Some(spoke) = t.at(seed, DEPRECATED_VERSION) {
            let annotated = annotation(&spoke).is_some();
            let property = if annotated {
                "2 spoke-hub-spoke, annotated"
            } else {
                "2 spoke-hub-spoke"
            };
            record(property, seed, spoke_hub_spoke(&t, &spoke));
        }
    }
    println!(
        "{seeds} seeds in {:.1?}: checked {checked:?}",
        began.elapsed()
    );
    for (property, n) in &checked {
        assert!(
            *n > seeds / 10,
            "property {property} checked only {n} times in {seeds} seeds"
        );
    }
    let failures: Vec<String> = failed
        .iter()
        .map(|(p, f)| {
            format!(
                "{p}: {} failing, first: {}",
                f.len(),
                f[..f.len().min(3)].join("\n  ")
            )
        })
        .collect();
    let n = seeds_failing.len();
    assert!(
        failures.is_empty(),
        "{n} of {seeds} seeds failing:\n{}",
        failures.join("\n")
    );
}
