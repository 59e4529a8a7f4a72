//! What a side saw, with what differs between the sides by nature made comparable.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::side::Side;

/// The pod fields the API server's defaulting and admission fill in (the ServiceAccount
/// token volume, default tolerations, ...). The model does not: the operator never reads
/// them.
const DEFAULTED_POD_SPEC: &[&str] = &[
    "dnsPolicy",
    "enableServiceLinks",
    "preemptionPolicy",
    "priority",
    "restartPolicy",
    "schedulerName",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
    "tolerations",
    "volumes",
];
const DEFAULTED_CONTAINER: &[&str] = &[
    "imagePullPolicy",
    "resources",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "volumeMounts",
];

/// What a side saw, with what differs by nature made comparable.
pub(crate) fn normalized(side: &Side) -> Vec<(String, Value)> {
    let mut steps = side.steps.clone();
    // Each UID stands for the name of its object.
    let mut uids = BTreeMap::new();
    for (_, v) in &steps {
        visit(v, &mut |o| {
            if let (Some(uid), Some(name)) = (
                o["metadata"]["uid"].as_str(),
                o["metadata"]["name"].as_str(),
            ) {
                let name = side
                    .aliases
                    .iter()
                    .fold(name.to_string(), |n, (from, to)| n.replace(from, to));
                uids.insert(uid.to_string(), format!("<uid of {name}>"));
            }
        });
    }
    let mut versions = BTreeSet::new();
    for (_, v) in &mut steps {
        rewrite(v, &mut |key, v| match v {
            Value::String(s) => {
                for (from, to) in &side.aliases {
                    *s = s.replace(from, to);
                }
                for (from, to) in &uids {
                    *s = s.replace(from, to);
                }
                *s = masked_uuids(s);
                if is_timestamp(s) {
                    *s = "<time>".into();
                }
                if key == "message" {
                    *s = numbers_masked(s);
                }
                if key == "resourceVersion"
                    && let Ok(n) = s.parse::<u64>()
                {
                    versions.insert(n);
                }
            }
            Value::Object(o) => {
                o.remove("managedFields");
                if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut)
                    && spec.contains_key("containers")
                {
                    for field in DEFAULTED_POD_SPEC {
                        spec.remove(*field);
                    }
                    for c in spec["containers"].as_array_mut().into_iter().flatten() {
                        for field in DEFAULTED_CONTAINER {
                            c.as_object_mut().map(|c| c.remove(*field));
                        }
                    }
                }
            }
            _ => {}
        });
    }
    let rank: BTreeMap<String, String> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| (v.to_string(), format!("<rv {i}>")))
        .collect();
    for (_, v) in &mut steps {
        rewrite(v, &mut |key, v| {
            if key == "resourceVersion"
                && let Some(r) = v.as_str().and_then(|s| rank.get(s))
            {
                *v = r.clone().into();
            }
        });
    }
    steps
}

/// Calls `f` on every object in `v`.
fn visit(v: &Value, f: &mut impl FnMut(&Value)) {
    match v {
        Value::Object(o) => {
            f(v);
            o.values().for_each(|v| visit(v, f));
        }
        Value::Array(a) => a.iter().for_each(|v| visit(v, f)),
        _ => {}
    }
}

/// Calls `f` on every value in `v`, with the key it is under (`""` in arrays), the value
/// after its children.
fn rewrite(v: &mut Value, f: &mut impl FnMut(&str, &mut Value)) {
    fn walk(key: &str, v: &mut Value, f: &mut impl FnMut(&str, &mut Value)) {
        match v {
            Value::Object(o) => o.iter_mut().for_each(|(k, v)| walk(k, v, f)),
            Value::Array(a) => a.iter_mut().for_each(|v| walk("", v, f)),
            _ => {}
        }
        f(key, v);
    }
    walk("", v, f)
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[10] == b'T'
        && s.ends_with('Z')
}

/// Every number in a message (a resourceVersion, a token's lifetime) as `N`.
fn numbers_masked(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c.is_ascii_digit() {
            true if out.ends_with('N') => {}
            true => out.push('N'),
            false => out.push(c),
        }
    }
    out
}

/// UUID-shaped substrings (UIDs of objects the sequence never saw) as `<uid>`.
fn masked_uuids(s: &str) -> String {
    let shape = |w: &[u8]| {
        w.len() == 36
            && w.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    let mut out = String::new();
    let mut rest = s;
    while rest.len() >= 36 {
        if shape(&rest.as_bytes()[..36]) {
            out.push_str("<uid>");
            rest = &rest[36..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out + rest
}
