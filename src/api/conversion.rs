//! An At converted between its versions, as the API server asks the conversion webhook to:
//! v1beta1 is the hub (stored, read by the operator), v1alpha1 the book's version (a shell
//! command and an image). Lossless both ways, as Kubernetes keeps what an older version
//! cannot hold: a v1beta1 spec that v1alpha1 cannot express (a richer template, a time zone,
//! a deadline, a TTL) travels in the annotation [`SPEC_ANNOTATION`] of its v1alpha1 form, and
//! comes back whole. A v1alpha1 client that edits such an object changes only what it sees:
//! the fields it changed are applied to the saved spec, the rest is kept.
//!
//! Conversion works on the JSON as stored, never on the Rust types: an object the types cannot
//! hold (an admitted template the operator reports as unreadable) still converts, so one bad
//! object never makes a whole list fail. It never fails for an At of either version.
//!
//! PodSets have one schema in both versions; the API server converts them itself (strategy
//! `None`), and this module only changes their `apiVersion` if asked.

use jiff::civil::DateTime;
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::{Map, Value, json};

use super::{AT_COMMAND_CONTAINER, DEPRECATED_VERSION, STORAGE_VERSION};

/// Annotation on a v1alpha1 At holding its v1beta1 spec (JSON), when v1alpha1 cannot express
/// it. The hub never carries it.
pub const SPEC_ANNOTATION: &str = "cnat.programming-kubernetes.info/v1beta1-spec";

const AT_GROUP: &str = "cnat.programming-kubernetes.info";
const PODSET_GROUP: &str = "app.example.com";

/// The answer to a `ConversionReview`: every object converted, in order, or a failure naming
/// the first that could not be (only a request that is not one of our objects).
pub fn review(review: ConversionReview) -> ConversionReview {
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(e) => return ConversionResponse::invalid(refusal(e.to_string())).into_review(),
    };
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<Value>, String> = request
        .objects
        .iter()
        .map(|object| convert(object.clone(), &desired))
        .collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => response.success(objects),
        Err(message) => response.failure(refusal(message)),
    }
    .into_review()
}

fn refusal(message: String) -> Status {
    Status::failure(&message, "BadRequest").with_code(400)
}

/// `object` at `desired` (`group/version`).
pub fn convert(mut object: Value, desired: &str) -> Result<Value, String> {
    let from = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let (group, from_version) = from.split_once('/').unwrap_or(("", ""));
    let (desired_group, to_version) = desired.split_once('/').unwrap_or(("", ""));
    let known = |v: &str| v == STORAGE_VERSION || v == DEPRECATED_VERSION;
    let ours = matches!(
        (group, kind.as_str()),
        (AT_GROUP, "At") | (PODSET_GROUP, "PodSet")
    );
    if !object.is_object()
        || !ours
        || group != desired_group
        || !known(from_version)
        || !known(to_version)
    {
        return Err(format!("cannot convert {kind} {from} to {desired}"));
    }
    if kind == "At" && from_version != to_version {
        if to_version == STORAGE_VERSION {
            to_hub(&mut object);
        } else {
            from_hub(&mut object);
        }
    }
    object["apiVersion"] = Value::String(desired.to_string());
    Ok(object)
}

/// A v1alpha1 At's spec and metadata as v1beta1's: the saved spec if it has one, with the
/// v1alpha1 fields a client changed since applied to it.
fn to_hub(object: &mut Value) {
    let saved = take_annotation(object);
    let alpha = object.get("spec").cloned().unwrap_or_else(|| json!({}));
    let spec = match saved {
        Some(saved) => {
            let seen = project(&saved);
            edited(saved, &seen, &alpha)
        }
        None => from_alpha(&alpha),
    };
    object["spec"] = spec;
}

/// A v1beta1 At as v1alpha1's: its projection, and the whole spec in the annotation unless the
/// projection says all of it.
fn from_hub(object: &mut Value) {
    let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
    let alpha = project(&spec);
    take_annotation(object);
    if from_alpha(&alpha) != spec {
        let text = serde_json::to_string(&spec).expect("JSON serializes");
        annotations(object).insert(SPEC_ANNOTATION.into(), Value::String(text));
    }
    object["spec"] = alpha;
}

/// The v1beta1 spec a v1alpha1 spec says: one container, named as v1alpha1's always was,
/// running the command through `sh -c` in its image (the operator's default if none).
fn from_alpha(alpha: &Value) -> Value {
    let mut container = json!({
        "name": AT_COMMAND_CONTAINER,
        "command": ["sh", "-c", alpha.get("command").cloned().unwrap_or(json!(""))],
    });
    if let Some(image) = alpha.get("image") {
        container["image"] = image.clone();
    }
    let mut spec = json!({
        "schedule": alpha.get("schedule").cloned().unwrap_or(json!("")),
        "template": {"spec": {"containers": [container]}},
    });
    if let Some(deadline) = alpha.get("startDeadlineSeconds") {
        spec["startDeadlineSeconds"] = deadline.clone();
    }
    spec
}

/// What v1alpha1 shows of a v1beta1 spec: the schedule as a UTC time, the command container's
/// command line and image, the start deadline.
fn project(spec: &Value) -> Value {
    let container = command_container(spec);
    let mut alpha = json!({
        "schedule": utc_schedule(spec),
        "command": container.map(command_line).unwrap_or_default(),
    });
    if let Some(image) = container.and_then(|c| c.get("image")) {
        alpha["image"] = image.clone();
    }
    if let Some(deadline) = spec.get("startDeadlineSeconds") {
        alpha["startDeadlineSeconds"] = deadline.clone();
    }
    alpha
}

/// `saved`, the v1beta1 spec a v1alpha1 At carries, with each v1alpha1 field that differs
/// from what `saved` projects to (`seen`) taken from `alpha`: a v1alpha1 client changed it.
fn edited(mut saved: Value, seen: &Value, alpha: &Value) -> Value {
    let changed = |field: &str| seen.get(field) != alpha.get(field);
    if changed("schedule") {
        // v1alpha1's schedule is UTC.
        saved["schedule"] = alpha.get("schedule").cloned().unwrap_or(json!(""));
        remove(&mut saved, "timeZone");
    }
    if changed("startDeadlineSeconds") {
        match alpha.get("startDeadlineSeconds") {
            Some(deadline) => saved["startDeadlineSeconds"] = deadline.clone(),
            None => remove(&mut saved, "startDeadlineSeconds"),
        }
    }
    if changed("command") || changed("image") {
        let Some(container) = command_container_mut(&mut saved) else {
            return from_alpha(alpha);
        };
        if changed("command") {
            let line = alpha.get("command").cloned().unwrap_or(json!(""));
            container.insert("command".into(), json!(["sh", "-c", line]));
            container.remove("args");
        }
        if changed("image") {
            match alpha.get("image") {
                Some(image) => container.insert("image".into(), image.clone()),
                None => container.remove("image"),
            };
        }
    }
    saved
}

/// The container whose exit decides the At: the one `containerName` names, else the first.
fn command_container(spec: &Value) -> Option<&Value> {
    let containers = spec.pointer("/template/spec/containers")?.as_array()?;
    match spec.get("containerName").and_then(Value::as_str) {
        Some(name) => containers.iter().find(|c| c["name"] == name),
        None => containers.first(),
    }
}

fn command_container_mut(spec: &mut Value) -> Option<&mut Map<String, Value>> {
    let name = spec
        .get("containerName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let containers = spec
        .pointer_mut("/template/spec/containers")?
        .as_array_mut()?;
    let container = match name {
        Some(name) => containers.iter_mut().find(|c| c["name"] == name.as_str()),
        None => containers.first_mut(),
    };
    container?.as_object_mut()
}

/// A container's command and arguments as one `sh -c` line: the line itself if it is one,
/// else each word quoted for the shell.
fn command_line(container: &Value) -> String {
    let words = |field: &str| -> Vec<String> {
        container[field]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|w| w.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (command, args) = (words("command"), words("args"));
    match (command.as_slice(), args.is_empty()) {
        ([sh, dash_c, line], true) if sh == "sh" && dash_c == "-c" => line.clone(),
        _ => command
            .iter()
            .chain(&args)
            .map(|w| quoted(w))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `word` as the shell reads it back: as it is if it is plain, else in single quotes.
fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The schedule as v1alpha1 says it, in UTC with a `Z`: the local time in the At's zone
/// converted, a schedule without a zone taken as UTC. A zone or time that cannot be read is
/// left as written (with a `Z`): the annotation keeps the spec whole anyway.
fn utc_schedule(spec: &Value) -> String {
    let schedule = spec["schedule"].as_str().unwrap_or_default();
    if schedule.ends_with('Z') {
        return schedule.to_string();
    }
    let zoned = spec["timeZone"].as_str().and_then(|zone| {
        let zone = super::at::time_zone(zone).ok()?;
        let local = DateTime::strptime("%Y-%m-%dT%H:%M:%S", schedule).ok()?;
        let instant = local.to_zoned(zone).ok()?.timestamp();
        Some(instant.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    });
    zoned.unwrap_or_else(|| format!("{schedule}Z"))
}

/// Removes [`SPEC_ANNOTATION`] from `object`; the spec it held, if it is one.
fn take_annotation(object: &mut Value) -> Option<Value> {
    let annotations = object
        .pointer_mut("/metadata/annotations")?
        .as_object_mut()?;
    let text = annotations.remove(SPEC_ANNOTATION)?;
    if annotations.is_empty() {
        object["metadata"]
            .as_object_mut()
            .map(|m| m.remove("annotations"));
    }
    serde_json::from_str::<Value>(text.as_str()?)
        .ok()
        .filter(Value::is_object)
}

fn annotations(object: &mut Value) -> &mut Map<String, Value> {
    let metadata = object
        .as_object_mut()
        .expect("an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    let annotations = metadata
        .as_object_mut()
        .expect("metadata is an object")
        .entry("annotations")
        .or_insert_with(|| json!({}));
    annotations.as_object_mut().expect("annotations are a map")
}

fn remove(object: &mut Value, field: &str) {
    if let Some(map) = object.as_object_mut() {
        map.remove(field);
    }
}

#[cfg(test)]
mod tests;
