use prost::Message;

use super::*;

/// The messages as the API server writes them: with the fields this module skips, so that
/// decoding is seen to skip them (numbers from `generated.proto`).
mod full {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(message, optional, tag = "1")]
        pub type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub raw: Option<Vec<u8>>,
        #[prost(string, optional, tag = "4")]
        pub content_type: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeMeta {
        #[prost(string, optional, tag = "1")]
        pub api_version: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub kind: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct List {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ListMeta>,
        #[prost(message, repeated, tag = "2")]
        pub items: Vec<Item>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListMeta {
        #[prost(string, optional, tag = "2")]
        pub resource_version: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub continue_: Option<String>,
        #[prost(int64, optional, tag = "4")]
        pub remaining_item_count: Option<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Item {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ObjectMeta {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub generate_name: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub namespace: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub uid: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub resource_version: Option<String>,
        #[prost(message, optional, tag = "9")]
        pub deletion_timestamp: Option<Time>,
        #[prost(btree_map = "string, string", tag = "11")]
        pub labels: std::collections::BTreeMap<String, String>,
        #[prost(message, repeated, tag = "13")]
        pub owner_references: Vec<OwnerReference>,
        #[prost(bytes = "vec", repeated, tag = "17")]
        pub managed_fields: Vec<Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Time {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
        #[prost(int32, optional, tag = "2")]
        pub nanos: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OwnerReference {
        #[prost(string, optional, tag = "1")]
        pub kind: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub uid: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub api_version: Option<String>,
        #[prost(bool, optional, tag = "6")]
        pub controller: Option<bool>,
        #[prost(bool, optional, tag = "7")]
        pub block_owner_deletion: Option<bool>,
    }
}

fn owner(kind: &str, uid: &str, controller: Option<bool>) -> full::OwnerReference {
    full::OwnerReference {
        kind: Some(kind.into()),
        name: Some("web".into()),
        uid: Some(uid.into()),
        api_version: Some("app.example.com/v1alpha1".into()),
        controller,
        block_owner_deletion: Some(true),
    }
}

fn pod(name: &str, owners: Vec<full::OwnerReference>, deleting: bool) -> full::Item {
    let metadata = full::ObjectMeta {
        name: Some(name.into()),
        generate_name: Some("web-pod".into()),
        namespace: Some("ns".into()),
        uid: Some(format!("uid-{name}")),
        resource_version: Some("7".into()),
        deletion_timestamp: deleting.then_some(full::Time {
            seconds: Some(1_800_000_000),
            nanos: None,
        }),
        labels: [("app".to_string(), "web".to_string())].into(),
        owner_references: owners,
        managed_fields: vec![b"\x0a\x03kcm".to_vec(); 40],
    };
    full::Item {
        metadata: Some(metadata),
    }
}

/// A body as the API server sends one: the magic number, then the envelope around the list.
fn body(list: &full::List) -> Vec<u8> {
    let unknown = full::Unknown {
        type_meta: Some(full::TypeMeta {
            api_version: Some("meta.k8s.io/v1".into()),
            kind: Some("PartialObjectMetadataList".into()),
        }),
        raw: Some(list.encode_to_vec()),
        content_type: Some(String::new()),
    };
    [MAGIC, &unknown.encode_to_vec()].concat()
}

fn listed(name: &str, controller: Option<(&str, &str)>, deleting: bool) -> Listed {
    Listed {
        name: name.into(),
        uid: format!("uid-{name}"),
        deleting,
        controller: controller.map(|(kind, uid)| Owner {
            kind: kind.into(),
            uid: uid.into(),
        }),
    }
}

#[test]
fn a_protobuf_page_reads_as_its_json_twin_does() {
    let list = full::List {
        metadata: Some(full::ListMeta {
            resource_version: Some("4242".into()),
            continue_: Some("token".into()),
            remaining_item_count: Some(3),
        }),
        items: vec![
            pod("a", vec![owner("PodSet", "ps-1", Some(true))], false),
            pod(
                "b",
                vec![owner("Node", "n", None), owner("At", "at-1", Some(true))],
                true,
            ),
            pod("c", vec![owner("PodSet", "ps-1", Some(false))], false),
        ],
    };
    let json = serde_json::json!({
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "4242", "continue": "token", "remainingItemCount": 3},
        "items": [
            {"metadata": {"name": "a", "uid": "uid-a", "managedFields": [{"manager": "kcm"}],
                "ownerReferences": [{"kind": "PodSet", "name": "web", "uid": "ps-1",
                    "apiVersion": "app.example.com/v1alpha1", "controller": true}]}},
            {"metadata": {"name": "b", "uid": "uid-b", "deletionTimestamp": "2027-01-15T08:00:00Z",
                "ownerReferences": [{"kind": "Node", "name": "n", "uid": "n", "apiVersion": "v1"},
                    {"kind": "At", "name": "web", "uid": "at-1", "apiVersion": "x/v1",
                        "controller": true}]}},
            {"metadata": {"name": "c", "uid": "uid-c", "labels": {"app": "web"},
                "ownerReferences": [{"kind": "PodSet", "name": "web", "uid": "ps-1",
                    "apiVersion": "app.example.com/v1alpha1", "controller": false}]}},
        ],
    });
    let expected = Page {
        items: vec![
            listed("a", Some(("PodSet", "ps-1")), false),
            listed("b", Some(("At", "at-1")), true),
            listed("c", None, false),
        ],
        version: "4242".into(),
        next: Some("token".into()),
    };
    assert_eq!(from_protobuf(&body(&list)).unwrap(), expected);
    let json = serde_json::to_vec(&json).unwrap();
    assert_eq!(from_json(&json).unwrap(), expected);
}

#[test]
fn a_body_without_the_magic_number_is_refused_not_misread() {
    let list = full::List::default();
    let err = from_protobuf(&list.encode_to_vec()).unwrap_err();
    assert!(err.to_string().contains("magic number"), "{err}");
}

#[test]
fn a_refusal_in_either_encoding_keeps_its_code_and_reason() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(string, optional, tag = "2")]
        status: Option<String>,
        #[prost(string, optional, tag = "3")]
        message: Option<String>,
        #[prost(string, optional, tag = "4")]
        reason: Option<String>,
        #[prost(int32, optional, tag = "6")]
        code: Option<i32>,
    }
    let status = Status {
        status: Some("Failure".into()),
        message: Some("the continue token expired".into()),
        reason: Some("Expired".into()),
        code: Some(410),
    };
    let unknown = full::Unknown {
        raw: Some(status.encode_to_vec()),
        ..Default::default()
    };
    let protobuf = [MAGIC, &unknown.encode_to_vec()].concat();
    let json = br#"{"kind":"Status","status":"Failure","message":"the continue token expired","reason":"Expired","code":410}"#;
    for (body, is_protobuf) in [(&protobuf[..], true), (&json[..], false)] {
        let kube::Error::Api(s) = failure(http::StatusCode::GONE, body, is_protobuf) else {
            panic!("not an API error");
        };
        assert_eq!((s.code, &*s.reason), (410, "Expired"));
        assert_eq!(s.message, "the continue token expired");
    }
    let kube::Error::Api(s) = failure(http::StatusCode::BAD_GATEWAY, b"<html>", false) else {
        panic!("not an API error");
    };
    assert_eq!((s.code, &*s.message), (502, "<html>"));
}

/// A page of two W5 pods as kube-apiserver 1.37.2 answered it, in protobuf and (the same
/// snapshot, `resourceVersionMatch=Exact`) in JSON: both read the same.
#[test]
fn a_real_api_servers_page_reads_the_same_in_either_encoding() {
    let protobuf = from_protobuf(include_bytes!("pods.pb")).unwrap();
    let json = from_json(include_bytes!("pods.json")).unwrap();
    assert_eq!(protobuf, json);
    assert_eq!(protobuf.version, "73258");
    assert!(protobuf.next.is_some());
    let owner = Owner {
        kind: "PodSet".into(),
        uid: "36ec387e-3c5f-4bcf-8577-36d2bfdbb327".into(),
    };
    let names: Vec<_> = protobuf.items.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["w-0-pod4kzzb", "w-0-pod4sdwl"]);
    assert!(
        protobuf
            .items
            .iter()
            .all(|p| p.controller.as_ref() == Some(&owner))
    );
    assert_eq!(
        protobuf.items[0].uid,
        "411faf41-8b0d-43e8-a488-da09bea6e677"
    );
}
