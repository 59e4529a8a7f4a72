//! The malformed objects the bad-input test submits, and what must become of each.

use podset_operator::api::at::{LATEST_SCHEDULE, SCHEDULE_MESSAGE};
use serde_json::{Value, json};

pub use testenv::harness::Kind;

/// What must become of a malformed object.
#[derive(Debug)]
pub enum Expect {
    /// The API server refuses it with this code, its message naming this.
    Refused(u16, &'static str),
    /// Stored; the PodSet then has this many (Pending) pods and says so.
    Available(i32),
    /// Stored; the PodSet reports ReplicaFailure with this in the message, and a Warning.
    ReplicaFailure(&'static str),
    /// Stored; the At runs (RUNNING), its pod's command exactly the spec's.
    Running,
    /// Stored; the At waits for its schedule.
    Pending,
}

pub struct Case {
    pub what: &'static str,
    pub kind: Kind,
    pub name: String,
    /// The request body, sent as is.
    pub body: String,
    pub expect: Expect,
    /// JSON pointers that must be gone from the stored object (pruned unknown fields).
    pub pruned: &'static [&'static str],
    /// Whether a failure must also show as a Warning event.
    pub event: bool,
}

pub fn case(what: &'static str, kind: Kind, name: &str, obj: Value, expect: Expect) -> Case {
    let mut obj = obj;
    let defaults = json!({
        "apiVersion": kind.api_version(),
        "kind": format!("{kind:?}"),
        "metadata": {"name": name},
    });
    for (k, v) in defaults.as_object().unwrap() {
        obj.as_object_mut()
            .unwrap()
            .entry(k.clone())
            .or_insert(v.clone());
    }
    Case {
        what,
        kind,
        name: name.to_string(),
        body: obj.to_string(),
        expect,
        pruned: &[],
        event: true,
    }
}

pub fn ps(what: &'static str, i: usize, spec: Value, expect: Expect) -> Case {
    case(
        what,
        Kind::PodSet,
        &format!("bad-ps-{i}"),
        json!({"spec": spec}),
        expect,
    )
}

pub fn at(what: &'static str, i: usize, spec: Value, expect: Expect) -> Case {
    case(
        what,
        Kind::At,
        &format!("bad-at-{i}"),
        json!({"spec": spec}),
        expect,
    )
}

pub fn when(schedule: &str) -> Value {
    json!({"schedule": schedule, "command": "echo hi"})
}

pub fn cases() -> Vec<Case> {
    use Expect::*;
    let long = |n: usize| "a".repeat(n);
    let mib = "x".repeat(1 << 20);
    let with_template = |template: Value| json!({"replicas": 1, "template": template});
    let mut cases = vec![
        ps(
            "replicas a string",
            1,
            json!({"replicas": "3"}),
            Refused(422, "spec.replicas"),
        ),
        ps(
            "replicas a float",
            2,
            json!({"replicas": 2.5}),
            Refused(422, "spec.replicas"),
        ),
        ps(
            "replicas negative",
            3,
            json!({"replicas": -1}),
            Refused(422, "greater than or equal to 1"),
        ),
        ps(
            "replicas zero",
            4,
            json!({"replicas": 0}),
            Refused(422, "greater than or equal to 1"),
        ),
        ps(
            "replicas 11",
            5,
            json!({"replicas": 11}),
            Refused(422, "less than or equal to 10"),
        ),
        ps(
            "replicas 2^31",
            6,
            json!({"replicas": 2147483648u64}),
            Refused(422, "spec.replicas"),
        ),
        ps(
            "replicas 1e20",
            7,
            json!({"replicas": 1e20}),
            Refused(422, "spec.replicas"),
        ),
        ps("replicas null", 8, json!({"replicas": null}), Available(1)),
        case(
            "no spec",
            Kind::PodSet,
            "bad-ps-9",
            json!({}),
            Refused(422, "spec"),
        ),
        ps("spec a string", 10, json!("three"), Refused(422, "spec")),
        ps("spec an array", 11, json!([3]), Refused(422, "spec")),
        Case {
            pruned: &["/spec/surprise"],
            ..ps(
                "unknown spec field",
                12,
                json!({"replicas": 2, "surprise": true}),
                Available(2),
            )
        },
        // Found by the input search: admitted (the API server did not type-check it), it
        // made the PodSet unreadable; only labels and annotations are kept now.
        Case {
            pruned: &[
                "/spec/template/metadata/deletionTimestamp",
                "/spec/template/metadata/name",
            ],
            ..ps(
                "template metadata beyond labels",
                50,
                json!({"replicas": 1, "template": {"metadata": {"deletionTimestamp": [],
                    "name": "x", "labels": {"tier": "web"}}}}),
                Available(1),
            )
        },
        Case {
            pruned: &["/bogus"],
            ..case(
                "unknown top-level field",
                Kind::PodSet,
                "bad-ps-13",
                json!({"spec": {"replicas": 1}, "bogus": {"x": 1}}),
                Available(1),
            )
        },
        ps(
            "template a number",
            14,
            json!({"template": 5}),
            Refused(422, "spec.template"),
        ),
        ps(
            "template spec without containers",
            15,
            with_template(json!({"spec": {}})),
            Refused(422, "containers"),
        ),
        ps(
            "template with no container",
            16,
            with_template(json!({"spec": {"containers": []}})),
            ReplicaFailure("spec.containers: Required value"),
        ),
        ps(
            "container without image",
            17,
            with_template(json!({"spec": {"containers": [{"name": "c"}]}})),
            ReplicaFailure("image"),
        ),
        ps(
            "1 MiB template annotation",
            18,
            with_template(json!({"metadata": {"annotations": {"big": mib}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
            ReplicaFailure("Too long"),
        ),
        ps(
            "unicode template label value",
            19,
            with_template(json!({"metadata": {"labels": {"tier": "ünïcødé"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
            ReplicaFailure("metadata.labels"),
        ),
        ps(
            "unicode template annotation",
            20,
            with_template(
                json!({"metadata": {"annotations": {"note": "héllo ✓ 日本語 🚀"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            ),
            Available(1),
        ),
        ps(
            "template restartPolicy Never",
            21,
            with_template(json!({"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}})),
            Available(1),
        ),
        // A name is also the value of the pods' `app` label: the schema caps it at 63.
        case(
            "name of 253 chars",
            Kind::PodSet,
            &long(253),
            json!({"spec": {}}),
            Refused(422, "more than 63 bytes"),
        ),
        case(
            "name of 64 chars",
            Kind::PodSet,
            &long(64),
            json!({"spec": {}}),
            Refused(422, "more than 63 bytes"),
        ),
        case(
            "name of 254 chars",
            Kind::PodSet,
            &long(254),
            json!({"spec": {}}),
            Refused(422, "must be no more than 253 characters"),
        ),
        case(
            "dotted name of 63 chars",
            Kind::PodSet,
            &format!("a.{}", long(61)),
            json!({"spec": {}}),
            Available(1),
        ),
        case(
            "uppercase name",
            Kind::PodSet,
            "Bad-Name",
            json!({"spec": {}}),
            Refused(422, "RFC 1123"),
        ),
        case(
            "unicode name",
            Kind::PodSet,
            "pödset",
            json!({"spec": {}}),
            Refused(422, "RFC 1123"),
        ),
        case(
            "no name",
            Kind::PodSet,
            "",
            json!({"spec": {}}),
            Refused(422, "name or generateName is required"),
        ),
        case(
            "invalid label on the PodSet",
            Kind::PodSet,
            "bad-ps-28",
            json!({"metadata": {"name": "bad-ps-28", "labels": {"app": "ü ü"}}, "spec": {}}),
            Refused(422, "metadata.labels"),
        ),
        case(
            "status set at create",
            Kind::PodSet,
            "bad-ps-29",
            json!({"spec": {"replicas": 2},
                "status": {"availableReplicas": 10, "podNames": ["fake"]}}),
            Available(2),
        ),
        case(
            "wrong apiVersion",
            Kind::PodSet,
            "bad-ps-30",
            json!({"apiVersion": "app.example.com/v1", "spec": {}}),
            Refused(400, "does not match"),
        ),
        case(
            "wrong kind",
            Kind::PodSet,
            "bad-ps-31",
            json!({"kind": "ReplicaSet", "spec": {}}),
            Refused(422, "must be PodSet"),
        ),
        // The API server's message lists every field error: far longer than an event's note
        // may be (1024 characters).
        ps(
            "twenty invalid containers",
            32,
            with_template(json!({"spec": {"containers": (0..20)
                .map(|i| json!({"name": format!("Container-Number-{i}-Has-An-Invalid-Name"),
                    "image": "busybox"}))
                .collect::<Vec<_>>()}})),
            ReplicaFailure("Invalid value"),
        ),
        at(
            "impossible date",
            1,
            when("2019-02-30T10:00:00Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "hour 25",
            2,
            when("2019-04-12T25:00:00Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "February 29th, not a leap year",
            3,
            when("2019-02-29T10:00:00Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "February 29th, leap year",
            4,
            when("2020-02-29T10:00:00Z"),
            Running,
        ),
        at(
            "a space for the T",
            5,
            when("2019-04-12 10:12:00Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "a timezone offset",
            6,
            when("2019-04-12T10:12:00+02:00"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "fractional seconds",
            7,
            when("2019-04-12T10:12:00.5Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "a cron expression",
            8,
            when("*/5 * * * *"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "leading space",
            9,
            when(" 2019-04-12T10:12:00Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "empty schedule",
            10,
            when(""),
            Refused(422, "spec.schedule"),
        ),
        at(
            "schedule a number",
            11,
            json!({"schedule": 1555063920, "command": "echo"}),
            Refused(422, "spec.schedule"),
        ),
        at(
            "no schedule",
            12,
            json!({"command": "echo hi"}),
            Refused(422, "spec.schedule"),
        ),
        at(
            "no command",
            13,
            json!({"schedule": "2019-04-12T10:12:00Z"}),
            Refused(422, "spec.command"),
        ),
        at(
            "empty command",
            14,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": ""}),
            Refused(422, "spec.command"),
        ),
        at(
            "command a list",
            15,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": ["echo", "hi"]}),
            Refused(422, "spec.command"),
        ),
        at(
            "command a number",
            16,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": 42}),
            Refused(422, "spec.command"),
        ),
        case(
            "spec null",
            Kind::At,
            "bad-at-17",
            json!({"spec": null}),
            Refused(422, "spec"),
        ),
        at(
            "1 MiB command",
            18,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": format!("echo {}", "y".repeat(1 << 20))}),
            Running,
        ),
        at(
            "unicode command",
            19,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": "echo 'héllo wörld ✓ 日本語 🚀' \u{202e}"}),
            Running,
        ),
        at(
            "shell metacharacters",
            20,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": "echo \"$(id)\" `date`; exit 3 && rm -rf / ; #"}),
            Running,
        ),
        at("year 0000", 21, when("0000-01-01T00:00:00Z"), Running),
        // Past the operator's clock: admitted before the search of issue 31 found it.
        at(
            "year 9999, last day",
            22,
            when("9999-12-31T23:59:59Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "the latest the operator reads",
            40,
            when(LATEST_SCHEDULE),
            Pending,
        ),
        Case {
            pruned: &["/spec/retries"],
            ..at(
                "unknown spec field",
                23,
                json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo", "retries": 3}),
                Running,
            )
        },
        case(
            "status set at create",
            Kind::At,
            "bad-at-24",
            json!({"spec": when("2019-04-12T10:12:00Z"),
                "status": {"phase": "DONE", "succeeded": true}}),
            Running,
        ),
        case(
            "name of 253 chars",
            Kind::At,
            &long(253).replace('a', "b"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "more than 63 bytes"),
        ),
        case(
            "name of 100 chars",
            Kind::At,
            &long(100).replace('a', "c"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "more than 63 bytes"),
        ),
        case(
            "name of 254 chars",
            Kind::At,
            &long(254).replace('a', "b"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "must be no more than 253 characters"),
        ),
        case(
            "unicode name",
            Kind::At,
            "ät",
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "RFC 1123"),
        ),
    ];
    cases.push(Case {
        body: format!(
            r#"{{"apiVersion": "{}", "kind": "At", "metadata": {{"name": "bad-at-99"}}, "spec": {{"#,
            Kind::At.api_version()
        ),
        ..case("truncated JSON", Kind::At, "bad-at-99", json!({}), Refused(400, ""))
    });
    cases
}
