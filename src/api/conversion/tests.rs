use super::*;

const ALPHA: &str = "cnat.programming-kubernetes.info/v1alpha1";
const BETA: &str = "cnat.programming-kubernetes.info/v1beta1";

fn at(version: &str, spec: Value) -> Value {
    json!({
        "apiVersion": version,
        "kind": "At",
        "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 3,
                     "annotations": {"team": "blue"}},
        "spec": spec,
        "status": {"phase": "PENDING"},
    })
}

fn book() -> Value {
    at(
        ALPHA,
        json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}),
    )
}

fn rich() -> Value {
    at(
        BETA,
        json!({
            "schedule": "2026-03-29T02:30:00",
            "timeZone": "Europe/Berlin",
            "containerName": "migrate",
            "activeDeadlineSeconds": 60,
            "ttlSecondsAfterFinished": 30,
            "template": {"spec": {
                "serviceAccountName": "migrator",
                "containers": [
                    {"name": "proxy", "image": "envoy"},
                    {"name": "migrate", "image": "tools:2", "command": ["/migrate"], "args": ["--up", "it's"],
                     "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]},
                ],
            }},
        }),
    )
}

#[test]
fn the_books_at_becomes_one_busybox_container_running_its_command_through_a_shell() {
    let hub = convert(book(), BETA).unwrap();
    assert_eq!(hub["apiVersion"], BETA);
    assert_eq!(
        hub["spec"],
        json!({
            "schedule": "2019-04-12T10:12:00Z",
            "template": {"spec": {"containers": [
                {"name": "busybox", "command": ["sh", "-c", "echo YAY"]},
            ]}},
        })
    );
    assert_eq!(hub["metadata"], book()["metadata"], "metadata untouched");
    assert_eq!(hub["status"], book()["status"]);
    assert_eq!(
        convert(hub, ALPHA).unwrap(),
        book(),
        "and back, no annotation"
    );
}

#[test]
fn what_v1alpha1_cannot_say_travels_in_an_annotation_and_comes_back_whole() {
    let alpha = convert(rich(), ALPHA).unwrap();
    assert_eq!(
        alpha["spec"],
        json!({
            // 02:30 does not exist in Berlin that night: the clocks went from 02:00 to 03:00.
            "schedule": "2026-03-29T01:30:00Z",
            "command": "/migrate --up 'it'\\''s'",
            "image": "tools:2",
        })
    );
    let saved = alpha["metadata"]["annotations"][SPEC_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(saved).unwrap(),
        rich()["spec"]
    );
    assert_eq!(alpha["metadata"]["annotations"]["team"], "blue");
    assert_eq!(convert(alpha, BETA).unwrap(), rich());
}

#[test]
fn a_v1alpha1_edit_changes_only_what_it_changed() {
    let mut alpha = convert(rich(), ALPHA).unwrap();
    alpha["spec"]["command"] = json!("echo edited");
    let hub = convert(alpha.clone(), BETA).unwrap();
    let container = &hub["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(container["command"], json!(["sh", "-c", "echo edited"]));
    assert!(
        container.get("args").is_none(),
        "the old arguments went with the old command"
    );
    assert_eq!(
        container["env"],
        rich()["spec"]["template"]["spec"]["containers"][1]["env"]
    );
    assert_eq!(
        hub["spec"]["timeZone"], "Europe/Berlin",
        "the schedule was not edited"
    );
    assert_eq!(hub["spec"]["ttlSecondsAfterFinished"], 30);

    alpha["spec"]["schedule"] = json!("2026-05-01T08:00:00Z");
    let hub = convert(alpha, BETA).unwrap();
    assert_eq!(hub["spec"]["schedule"], "2026-05-01T08:00:00Z");
    assert!(
        hub["spec"].get("timeZone").is_none(),
        "a v1alpha1 schedule is UTC"
    );
    assert_eq!(hub["spec"]["containerName"], "migrate");
}

#[test]
fn an_annotation_that_is_no_spec_is_dropped_and_the_v1alpha1_fields_rule() {
    let mut alpha = book();
    alpha["metadata"]["annotations"][SPEC_ANNOTATION] = json!("not json");
    let hub = convert(alpha, BETA).unwrap();
    assert_eq!(hub, convert(book(), BETA).unwrap());
}

#[test]
fn podsets_change_only_their_version_and_strangers_are_refused() {
    let podset = json!({"apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
                        "metadata": {"name": "p"}, "spec": {"replicas": 3}});
    let converted = convert(podset.clone(), "app.example.com/v1beta1").unwrap();
    assert_eq!(converted["spec"], podset["spec"]);
    assert_eq!(converted["apiVersion"], "app.example.com/v1beta1");
    for desired in [
        "cnat.programming-kubernetes.info/v1",
        "app.example.com/v1beta1",
    ] {
        assert!(convert(book(), desired).is_err(), "{desired}");
    }
}

#[test]
fn a_review_answers_every_object_in_order() {
    let request: ConversionReview = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "r1", "desiredAPIVersion": ALPHA, "objects": [rich(), convert(book(), BETA).unwrap()]},
    }))
    .unwrap();
    let answer = serde_json::to_value(review(request)).unwrap();
    assert_eq!(answer["response"]["uid"], "r1");
    assert_eq!(answer["response"]["result"]["status"], "Success");
    let objects = answer["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(objects[0]["spec"]["image"], "tools:2");
    assert_eq!(objects[1], book());
}
