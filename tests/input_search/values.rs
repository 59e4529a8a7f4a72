//! The values objects are drawn from: what a user would write for a field of a schema, and
//! values at or past its edges (32- and 64-bit limits, the schema's bounds and one past them,
//! long and odd strings, Quantities, date-times, time zones, values of another type). The same
//! generator state always draws the same values.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use crate::generate::{ITEM, VALUE, child};

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
    // Local times, for a schedule read in its time zone: skipped and repeated by daylight
    // saving in Berlin and New York, and no date at all.
    "2026-03-29T02:30:00",
    "2026-11-01T01:30:00",
    "2026-02-30T00:00:00",
];
/// Time zones a user would write: daylight saving, half- and quarter-hour offsets, a link, the
/// newest name, the far edge of the offsets.
const KNOWN_ZONES: &[&str] = &[
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "UTC",
    "Etc/GMT-14",
    "US/Pacific",
    "Europe/Kyiv",
];
/// Names the zone pattern admits and no zone database holds, or holds only ignoring case; and
/// names the pattern refuses.
const ODD_ZONES: &[&str] = &[
    "europe/berlin",
    "Mars/Olympus_Mons",
    "Etc/GMT+13",
    "Europe/Berlin/",
    "../etc/passwd",
    "Europe/Berlin ",
];
/// Names of the containers the At templates drawn hold, and ones they do not.
const CONTAINER_NAMES: &[&str] = &["main", "side", "busybox", "Main"];

/// Draws values; the same seed, the same values.
pub struct Gen {
    pub rng: fastrand::Rng,
    pub now: Timestamp,
}

impl Gen {
    /// A valid schedule: a minute ago (due now) or a day ahead (PENDING).
    pub fn schedule(&mut self) -> String {
        self.local_schedule(&TimeZone::UTC) + "Z"
    }

    /// The same time read on the clocks of `zone`, without a `Z`: a v1beta1 schedule in its
    /// time zone.
    pub fn local_schedule(&mut self, zone: &TimeZone) -> String {
        let offset = if self.rng.bool() { -60 } else { 86_400 };
        let at = self.now + SignedDuration::from_secs(offset);
        let local = at.to_zoned(zone.clone()).datetime();
        local.strftime("%Y-%m-%dT%H:%M:%S").to_string()
    }

    /// A time zone's name, one in four odd (see [`ODD_ZONES`]), and the zone of its clocks
    /// (UTC's for a name no database holds).
    pub fn zone(&mut self) -> (&'static str, TimeZone) {
        let zones = if self.rng.u8(0..4) == 0 {
            ODD_ZONES
        } else {
            KNOWN_ZONES
        };
        let name = self.pick(zones);
        (name, jiff::tz::db().get(name).unwrap_or(TimeZone::UTC))
    }

    /// Sets the value at `path` below `node` (whose schema is `schema`), creating what is
    /// missing on the way with its required fields.
    pub fn set(&mut self, node: &mut Value, schema: &Value, path: &[String], value: Value) {
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

    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.rng.usize(..from.len())]
    }

    /// The least valid-looking value of `schema`: required fields only.
    pub fn minimal(&mut self, schema: &Value, field: &str) -> Value {
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
    pub fn plausible(&mut self, schema: &Value, field: &str) -> Value {
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
        match field {
            "timeZone" => return json!(self.pick(KNOWN_ZONES)),
            "containerName" => return json!(self.pick(&CONTAINER_NAMES[..2])),
            _ => {}
        }
        match schema["type"].as_str().unwrap_or_default() {
            "integer" => {
                let low = bound(schema, "minimum").unwrap_or(0).max(0);
                let high = bound(schema, "maximum").unwrap_or(100).min(low + 100);
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
    pub fn edge(&mut self, schema: &Value, field: &str) -> Value {
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
                self.string(schema, field)
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
            _ => self.string(schema, field),
        }
    }

    fn integer(&mut self, schema: &Value) -> Value {
        let mut edges: Vec<i64> = vec![-1, 0, 1];
        if schema["format"] == "int64" {
            edges.extend([i64::MIN, i64::MAX, (1 << 53) + 1, -(1 << 53) - 1]);
        } else {
            edges.extend([i32::MIN.into(), i32::MAX.into(), 1 << 31, -(1 << 31) - 1]);
        }
        for which in ["minimum", "maximum"] {
            if let Some(b) = bound(schema, which) {
                edges.extend([b.saturating_sub(1), b, b.saturating_add(1)]);
            }
        }
        match self.rng.u8(0..12) {
            0 => json!(1.5),
            1 => json!(u64::MAX),
            _ => json!(edges[self.rng.usize(..edges.len())]),
        }
    }

    fn string(&mut self, schema: &Value, field: &str) -> Value {
        match field {
            "timeZone" if self.rng.bool() => {
                let zones = if self.rng.bool() {
                    KNOWN_ZONES
                } else {
                    ODD_ZONES
                };
                return json!(self.pick(zones));
            }
            "containerName" if self.rng.bool() => return json!(self.pick(CONTAINER_NAMES)),
            _ => {}
        }
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
                1 => json!(self.local_schedule(&TimeZone::UTC)),
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
    pub fn draw(&mut self, schema: &Value, field: &str, depth: usize) -> Value {
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

/// A schema's numeric bound (`minimum`, `maximum`), which the API server serves as a float.
fn bound(schema: &Value, which: &str) -> Option<i64> {
    schema[which].as_f64().map(|b| b as i64)
}

fn is_quantity(schema: &Value) -> bool {
    schema["description"]
        .as_str()
        .is_some_and(|d| d.starts_with("Quantity is"))
}

fn as_object(node: &mut Value) -> &mut Map<String, Value> {
    if !node.is_object() {
        *node = json!({});
    }
    node.as_object_mut().unwrap()
}
