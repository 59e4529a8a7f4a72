//! The malformed PodSets: their spec, template, names and metadata.

use serde_json::{Value, json};

use super::{Case, Expect, Kind, case, long, ps};

pub fn cases() -> Vec<Case> {
    use Expect::*;
    let mib = "x".repeat(1 << 20);
    let with_template = |template: Value| json!({"replicas": 1, "template": template});
    vec![
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
            Refused(422, "restartPolicy must be Always"),
        ),
        ps(
            "template activeDeadlineSeconds",
            22,
            with_template(json!({"spec": {"activeDeadlineSeconds": 30,
                "containers": [{"name": "c", "image": "busybox"}]}})),
            Refused(422, "activeDeadlineSeconds is not supported"),
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
    ]
}
