//! Objects generated from the CRDs' own OpenAPI schemas (issue 31, after Acto): a valid base
//! object with one to three fields, anywhere in the schema, set to values from its edges; or a
//! whole spec drawn from the schema. The same seed always gives the same object.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value, json};

use testenv::harness::Kind;

/// One generated object: what it is, and how it was made (for the report).
#[derive(Clone)]
pub struct Generated {
    pub seed: u64,
    pub kind: Kind,
    pub name: String,
    pub body: Value,
    pub how: String,
}

/// The `spec` schema of each kind, and every path below it.
pub struct Schemas {
    podset: Spec,
    at: Spec,
}

struct Spec {
    schema: Value,
    paths: Vec<Vec<String>>,
}

/// Path segments that are not field names: an array's item, a map's value.
const ITEM: &str = "[]";
const VALUE: &str = "{}";

impl Schemas {
    /// From the CRDs (as the API server serves them).
    pub fn new(podset: &CustomResourceDefinition, at: &CustomResourceDefinition) -> Self {
        let spec = |crd: &CustomResourceDefinition| {
            let crd = serde_json::to_value(crd).expect("a CRD serializes");
            let schema =
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                    .clone();
            let mut paths = Vec::new();
            collect_paths(&schema, &mut Vec::new(), &mut paths);
            Spec { schema, paths }
        };
        Schemas {
            podset: spec(podset),
            at: spec(at),
        }
    }

    /// How many paths each kind's spec has.
    pub fn paths(&self) -> (usize, usize) {
        (self.podset.paths.len(), self.at.paths.len())
    }

    /// The object of `seed`: seven PodSets for every three Ats; most are a base object with a
    /// few fields mutated, one in seven a spec drawn whole from the schema.
    pub fn generate(&self, seed: u64, now: Timestamp) -> Generated {
        let mut rng = fastrand::Rng::with_seed(seed);
        let kind = if rng.u8(0..10) < 7 {
            Kind::PodSet
        } else {
            Kind::At
        };
        let spec = match kind {
            Kind::PodSet => &self.podset,
            Kind::At => &self.at,
        };
        let mut g = Gen { rng, now };
        let (body, how) = if g.rng.u8(0..7) == 0 {
            (g.draw(&spec.schema, "spec", 0), "drawn whole".to_string())
        } else {
            let mut body = g.base(kind);
            let mut changed = Vec::new();
            for _ in 0..g.rng.usize(1..=3) {
                let path = &spec.paths[g.rng.usize(..spec.paths.len())];
                let leaf = child_at(&spec.schema, path);
                let value = g.edge(leaf, path.last().map_or("spec", |s| s.as_str()));
                changed.push(format!("{}={:.60}", path.join("."), value.to_string()));
                g.set(&mut body, &spec.schema, path, value);
            }
            (body, changed.join(" "))
        };
        let name = format!("in-{seed:x}");
        let body = json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{kind:?}"),
            "metadata": {"name": name},
            "spec": body,
        });
        Generated {
            seed,
            kind,
            name,
            body,
            how,
        }
    }
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

fn child<'a>(schema: &'a Value, segment: &str) -> &'a Value {
    match segment {
        ITEM => &schema["items"],
        VALUE => &schema["additionalProperties"],
        field => &schema["properties"][field],
    }
}

fn child_at<'a>(schema: &'a Value, path: &[String]) -> &'a Value {
    path.iter().fold(schema, |s, segment| child(s, segment))
}

fn is_quantity(schema: &Value) -> bool {
    schema["description"]
        .as_str()
        .is_some_and(|d| d.starts_with("Quantity is"))
}

const STRINGS: &[&str] = &[
    "",
    " ",
    "-",
    ".",
    "..",
    "/",
    "a/b",
    "UPPER",
    "0",
    "-1",
    "true",
    "null",
    "ünïcødé ✓",
    "\u{0}",
    "line\nbreak",
    "$(HOME)",
    "${HOME}",
    "'\"`;|&",
    "*",
    "\\",
    "http://x",
];
/// Lengths around the API's limits: a label value, a DNS label, a DNS subdomain, and big.
const LENGTHS: &[usize] = &[63, 64, 253, 254, 4096, 70_000];
const QUANTITIES: &[&str] = &[
    "0",
    "1",
    "-1",
    "100m",
    "0.001",
    "0.0001",
    "1e3",
    "1E-3",
    "1Ki",
    "1ki",
    "8Ei",
    "9223372036854775807",
    "9223372036854775808",
    "1e400",
    "+1",
    ".5",
    "5.",
    "1 Gi",
    "Gi",
    "999999999999999999999Ei",
];
const DATE_TIMES: &[&str] = &[
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "2016-12-31T23:59:60Z",
    "2023-02-29T12:00:00Z",
    "2024-02-29T12:00:00Z",
    "2038-01-19T03:14:08Z",
    "9999-12-31T23:59:59Z",
    "2026-01-01T24:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-01-01T00:00:00+01:00",
    "2026-01-01t00:00:00z",
    "2026-01-01T00:00:00.5Z",
    "2026-01-01 00:00:00Z",
];

struct Gen {
    rng: fastrand::Rng,
    now: Timestamp,
}

impl Gen {
    fn base(&mut self, kind: Kind) -> Value {
        match kind {
            Kind::PodSet if self.rng.bool() => json!({"replicas": self.rng.i32(1..=4)}),
            Kind::PodSet => json!({
                "replicas": self.rng.i32(1..=4),
                "template": {
                    "metadata": {"labels": {"tier": "input-search"}},
                    "spec": {"containers": [{
                        "name": "main",
                        "image": "busybox:1.36",
                        "command": ["sleep", "3600"],
                    }]},
                },
            }),
            Kind::At => json!({
                "schedule": self.schedule(),
                "command": "echo input-search",
            }),
        }
    }

    /// A valid schedule: a minute ago (due now) or a day ahead (PENDING).
    fn schedule(&mut self) -> String {
        let offset = if self.rng.bool() { -60 } else { 86_400 };
        let at = self.now + SignedDuration::from_secs(offset);
        at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Sets the value at `path` below `node` (whose schema is `schema`), creating what is
    /// missing on the way with its required fields.
    fn set(&mut self, node: &mut Value, schema: &Value, path: &[String], value: Value) {
        let Some((segment, rest)) = path.split_first() else {
            *node = value;
            return;
        };
        let sub = child(schema, segment);
        let next = match segment.as_str() {
            ITEM => {
                if !node.is_array() {
                    *node = json!([]);
                }
                let items = node.as_array_mut().unwrap();
                if items.is_empty() {
                    items.push(self.minimal(sub, ""));
                }
                let i = self.rng.usize(..items.len());
                &mut items[i]
            }
            VALUE => {
                let key = self.key();
                let map = as_object(node);
                let key = map.keys().next().cloned().unwrap_or(key);
                let fresh = self.minimal(sub, "");
                map.entry(key).or_insert(fresh)
            }
            field => {
                let fresh = self.minimal(sub, field);
                as_object(node).entry(field).or_insert(fresh)
            }
        };
        self.set(next, sub, rest, value);
    }

    /// A map key: mostly plain, sometimes one the API server's key rules refuse.
    fn key(&mut self) -> String {
        match self.rng.u8(0..4) {
            0 => self.pick(STRINGS).to_string(),
            1 => "example.com/key".into(),
            _ => "key".into(),
        }
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.rng.usize(..from.len())]
    }

    /// The least valid-looking value of `schema`: required fields only.
    fn minimal(&mut self, schema: &Value, field: &str) -> Value {
        if schema["properties"].is_object() {
            let mut object = Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or_default();
                let value = self.minimal(&schema["properties"][name], name);
                object.insert(name.to_string(), value);
            }
            return Value::Object(object);
        }
        self.plausible(schema, field)
    }

    /// A value a user would write for `schema` (a field named `field`).
    fn plausible(&mut self, schema: &Value, field: &str) -> Value {
        if let Some(options) = schema["enum"].as_array() {
            return options[self.rng.usize(..options.len())].clone();
        }
        if is_quantity(schema) {
            return json!(self.pick(&["100m", "64Mi", "1"]));
        }
        if schema["x-kubernetes-int-or-string"] == true {
            return if self.rng.bool() {
                json!(8080)
            } else {
                json!("http")
            };
        }
        match schema["type"].as_str().unwrap_or_default() {
            "integer" => {
                let low = schema["minimum"].as_i64().unwrap_or(0).max(0);
                let high = schema["maximum"].as_i64().unwrap_or(100).min(low + 100);
                json!(self.rng.i64(low..=high.max(low)))
            }
            "number" => json!(1.5),
            "boolean" => json!(self.rng.bool()),
            "array" => json!([self.minimal(&schema["items"], field)]),
            "object" if schema["additionalProperties"].is_object() => {
                json!({"key": self.plausible(&schema["additionalProperties"], field)})
            }
            "object" => json!({}),
            _ if schema["pattern"].is_string() || schema["format"] == "date-time" => {
                json!(self.schedule())
            }
            _ => json!(match field {
                "name" => format!("n{}", self.rng.u16(..)),
                "image" => "busybox:1.36".into(),
                "command" | "args" => "true".into(),
                _ => self
                    .pick(&["a", "x1", "key", "value", "/tmp", "TCP"])
                    .into(),
            }),
        }
    }

    /// A value at or past the edges of `schema`; sometimes of another type altogether.
    fn edge(&mut self, schema: &Value, field: &str) -> Value {
        if self.rng.u8(0..20) == 0 {
            return [
                json!(null),
                json!("x"),
                json!(1),
                json!([]),
                json!({}),
                json!(true),
            ][self.rng.usize(..6)]
            .clone();
        }
        if is_quantity(schema) {
            return json!(self.pick(QUANTITIES));
        }
        if schema["x-kubernetes-int-or-string"] == true {
            return if self.rng.bool() {
                self.integer(schema)
            } else {
                self.string(schema)
            };
        }
        match schema["type"].as_str().unwrap_or_default() {
            "integer" => self.integer(schema),
            "number" => json!([0.0, -0.5, 1e308, 1e-308][self.rng.usize(..4)]),
            "boolean" => json!(self.rng.bool()),
            "array" => {
                let n = [0, 1, 2, 300][self.rng.usize(..4)];
                let items: Vec<Value> = (0..n)
                    .map(|_| self.minimal(&schema["items"], field))
                    .collect();
                Value::Array(items)
            }
            "object" => match self.rng.u8(0..3) {
                0 => json!({}),
                1 => self.draw(schema, field, 0),
                _ => self.minimal(schema, field),
            },
            _ => self.string(schema),
        }
    }

    fn integer(&mut self, schema: &Value) -> Value {
        let mut edges: Vec<i64> = vec![-1, 0, 1];
        if schema["format"] == "int64" {
            edges.extend([i64::MIN, i64::MAX, (1 << 53) + 1, -(1 << 53) - 1]);
        } else {
            edges.extend([i32::MIN.into(), i32::MAX.into(), 1 << 31, -(1 << 31) - 1]);
        }
        for bound in ["minimum", "maximum"] {
            if let Some(b) = schema[bound].as_i64() {
                edges.extend([b.saturating_sub(1), b, b.saturating_add(1)]);
            }
        }
        match self.rng.u8(0..12) {
            0 => json!(1.5),
            1 => json!(u64::MAX),
            _ => json!(edges[self.rng.usize(..edges.len())]),
        }
    }

    fn string(&mut self, schema: &Value) -> Value {
        if let Some(options) = schema["enum"].as_array()
            && self.rng.bool()
        {
            let option = options[self.rng.usize(..options.len())]
                .as_str()
                .unwrap_or("");
            return json!(option.to_lowercase());
        }
        if schema["pattern"].is_string() || schema["format"] == "date-time" {
            return match self.rng.u8(0..4) {
                0 => json!(self.schedule()),
                _ => json!(self.pick(DATE_TIMES)),
            };
        }
        match self.rng.u8(0..3) {
            0 => {
                let n = LENGTHS[self.rng.usize(..LENGTHS.len())];
                json!("a".repeat(n))
            }
            _ => json!(self.pick(STRINGS)),
        }
    }

    /// A whole value drawn from `schema`: required fields always, each optional one with odds
    /// that fall with depth; leaves plausible, one in four at an edge.
    fn draw(&mut self, schema: &Value, field: &str, depth: usize) -> Value {
        if let Some(properties) = schema["properties"].as_object() {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut object = Map::new();
            for (name, sub) in properties {
                let odds = 3 * (depth as u32 + 1);
                if required.contains(&name.as_str()) || (depth < 6 && self.rng.u32(0..odds) == 0) {
                    object.insert(name.clone(), self.draw(sub, name, depth + 1));
                }
            }
            return Value::Object(object);
        }
        if schema["type"] == "array" && depth < 6 {
            let n = self.rng.usize(0..=2);
            let items = (0..n).map(|_| self.draw(&schema["items"], field, depth + 1));
            return Value::Array(items.collect());
        }
        if self.rng.u8(0..4) == 0 {
            self.edge(schema, field)
        } else {
            self.plausible(schema, field)
        }
    }
}

fn as_object(node: &mut Value) -> &mut Map<String, Value> {
    if !node.is_object() {
        *node = json!({});
    }
    node.as_object_mut().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use podset_operator::api::{at_crd, podset_crd};

    fn schemas() -> Schemas {
        Schemas::new(&podset_crd(), &at_crd())
    }

    #[test]
    fn a_seed_always_gives_the_same_object_and_seeds_reach_deep_fields() {
        let s = schemas();
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let (podset_paths, at_paths) = s.paths();
        assert!(podset_paths > 1000, "{podset_paths} PodSet paths");
        assert!(at_paths > 1000, "{at_paths} At paths: its template's too");
        for seed in 0..200 {
            assert_eq!(s.generate(seed, now).body, s.generate(seed, now).body);
        }
        let deep = (0..200)
            .map(|seed| s.generate(seed, now))
            .filter(|g| g.how.contains("template.spec.containers.[]."))
            .count();
        assert!(deep > 5, "only {deep} of 200 reach into a container");
    }
}
