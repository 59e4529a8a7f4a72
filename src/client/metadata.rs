//! Lists of objects' metadata a page at a time, read in protobuf where the API server serves it.
//!
//! A new leader's check of its warm cache lists the metadata of every managed pod: 100,000
//! at W5. In JSON each pod's metadata carries its managedFields, which the metadata API
//! cannot leave out, and the server encodes them and the client parses them only to drop
//! them. In protobuf (what kube-controller-manager's metadata informers read) the server
//! encodes faster and the client skips every field it does not name without building it.
//! The API server serves built-in types' metadata in protobuf and custom resources' only in
//! JSON; the request offers both, and the answer's `Content-Type` says which came (a server
//! that ignores the offer, such as the simulation's, answers JSON).

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt as _;
use kube::api::ListParams;
use kube::core::Status;
use prost::Message;

/// What a page of [`list_metadata_paged`] tells of each object: enough to count it against
/// its controller. Everything else (labels, annotations, managedFields) is not read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listed {
    pub name: String,
    pub uid: String,
    /// It has a deletion timestamp.
    pub deleting: bool,
    /// Its controlling owner reference, if it has one.
    pub controller: Option<Owner>,
}

/// An owner reference's kind and UID.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Owner {
    pub kind: String,
    pub uid: String,
}

/// The items a page holds at most. Ten times kube-controller-manager's 500: the API server
/// spends about 20 ms on a page whatever its size, so at W5's 100,000 pods pages of 500 took
/// 4.96 s and pages of 5,000 1.64 s (one curl each, same cluster). A page of 5,000 pods'
/// metadata is about 6 MB in protobuf, held only while it is read.
pub const PAGE: u32 = 5000;
/// Protobuf first, then JSON, each as a `PartialObjectMetadataList` (the metadata API).
pub const ACCEPT_METADATA: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What every protobuf body starts with, before its `runtime.Unknown` envelope.
const MAGIC: &[u8] = b"k8s\0";

/// Lists the metadata of what `params` selects through `api` a page of [`PAGE`] at a time,
/// each page named by the last one's continue token, handing each page's items to `visit`
/// (so that only what it keeps outlives the page); the list's version. Every page is of the
/// first page's snapshot.
pub async fn list_metadata_paged<K>(
    api: &kube::Api<K>,
    params: &ListParams,
    mut visit: impl FnMut(Vec<Listed>),
) -> kube::Result<String>
where
    K: kube::Resource + Clone,
{
    let client = api.clone().into_client();
    let request = kube::core::Request::new(api.resource_url());
    let mut params = params.clone().limit(PAGE);
    loop {
        let page = fetch(&client, &request, &params).await?;
        visit(page.items);
        match page.next {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(page.version),
        }
    }
}

/// One page, read in whichever encoding the server chose of the two offered.
async fn fetch(
    client: &kube::Client,
    request: &kube::core::Request,
    params: &ListParams,
) -> kube::Result<Page> {
    let mut req = request
        .list_metadata(params)
        .map_err(kube::Error::BuildRequest)?;
    req.headers_mut()
        .insert(ACCEPT, http::HeaderValue::from_static(ACCEPT_METADATA));
    req.extensions_mut().insert("list_metadata");
    let (parts, body) = client
        .send(req.map(kube::client::Body::from))
        .await?
        .into_parts();
    let body = body.collect().await?.to_bytes();
    let protobuf = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with(PROTOBUF));
    match (parts.status.is_success(), protobuf) {
        (false, _) => Err(failure(parts.status, &body, protobuf)),
        (true, true) => from_protobuf(&body),
        (true, false) => from_json(&body),
    }
}

/// One page: its items, its version and the token of the next page.
#[derive(Debug, PartialEq)]
struct Page {
    items: Vec<Listed>,
    version: String,
    next: Option<String>,
}

/// The JSON form of a page, with only the fields [`Listed`] tells: serde skips the rest
/// (managedFields above all) without building them.
mod json {
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct List {
        #[serde(default)]
        pub metadata: ListMeta,
        #[serde(default)]
        pub items: Vec<Item>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ListMeta {
        pub resource_version: Option<String>,
        #[serde(rename = "continue")]
        pub continue_: Option<String>,
    }

    #[derive(Deserialize)]
    pub struct Item {
        #[serde(default)]
        pub metadata: ObjectMeta,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ObjectMeta {
        pub name: Option<String>,
        pub uid: Option<String>,
        pub deletion_timestamp: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        pub owner_references: Vec<OwnerReference>,
    }

    #[derive(Deserialize)]
    pub struct OwnerReference {
        #[serde(default)]
        pub kind: String,
        #[serde(default)]
        pub uid: String,
        pub controller: Option<bool>,
    }
}

fn from_json(body: &[u8]) -> kube::Result<Page> {
    let list: json::List = serde_json::from_slice(body).map_err(kube::Error::SerdeError)?;
    let items = list.items.into_iter().map(|item| {
        let meta = item.metadata;
        let mut refs = meta.owner_references.into_iter();
        let controller = refs.find(|r| r.controller == Some(true));
        Listed {
            name: meta.name.unwrap_or_default(),
            uid: meta.uid.unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            controller: controller.map(|r| Owner {
                kind: r.kind,
                uid: r.uid,
            }),
        }
    });
    Ok(Page {
        items: items.collect(),
        version: list.metadata.resource_version.unwrap_or_default(),
        next: list.metadata.continue_,
    })
}

fn from_protobuf(body: &[u8]) -> kube::Result<Page> {
    let list: pb::PartialObjectMetadataList = unwrap(body)?;
    let meta = list.metadata.unwrap_or_default();
    let items = list
        .items
        .into_iter()
        .map(|o| listed(o.metadata.unwrap_or_default()));
    Ok(Page {
        items: items.collect(),
        version: meta.resource_version.unwrap_or_default(),
        next: meta.continue_,
    })
}

fn listed(meta: pb::ObjectMeta) -> Listed {
    let controller = meta
        .owner_references
        .into_iter()
        .find(|r| r.controller == Some(true));
    Listed {
        name: meta.name.unwrap_or_default(),
        uid: meta.uid.unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
        controller: controller.map(|r| Owner {
            kind: r.kind.unwrap_or_default(),
            uid: r.uid.unwrap_or_default(),
        }),
    }
}

/// The message inside a protobuf body: past the magic number, inside its envelope.
fn unwrap<M: Message + Default>(body: &[u8]) -> kube::Result<M> {
    let invalid = |why: String| kube::Error::Service(why.into());
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| invalid("a protobuf answer without its magic number".into()))?;
    let unknown = pb::Unknown::decode(envelope).map_err(|e| invalid(format!("protobuf: {e}")))?;
    M::decode(Bytes::from(unknown.raw.unwrap_or_default()))
        .map_err(|e| invalid(format!("protobuf: {e}")))
}

/// The API server's refusal, as kube reports one: its `Status`, in whichever encoding it came.
fn failure(code: http::StatusCode, body: &[u8], protobuf: bool) -> kube::Error {
    let status = match protobuf {
        true => unwrap::<pb::Status>(body).ok().map(|s| Status {
            message: s.message.unwrap_or_default(),
            reason: s.reason.unwrap_or_default(),
            ..Status::failure("", "")
        }),
        false => serde_json::from_slice::<Status>(body).ok(),
    };
    let status = status.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        Status::failure(text.trim(), "Failed to parse error data")
    });
    kube::Error::Api(status.with_code(code.as_u16()).boxed())
}

/// The protobuf messages of `k8s.io/apimachinery` this module reads, with only the fields it
/// reads (their numbers are the `generated.proto` files'): decoding skips the rest.
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(bytes = "vec", optional, tag = "2")]
        pub raw: Option<Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PartialObjectMetadataList {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ListMeta>,
        #[prost(message, repeated, tag = "2")]
        pub items: Vec<PartialObjectMetadata>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListMeta {
        #[prost(string, optional, tag = "2")]
        pub resource_version: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub continue_: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PartialObjectMetadata {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ObjectMeta {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub uid: Option<String>,
        /// A `Time`; only whether it is there is read.
        #[prost(message, optional, tag = "9")]
        pub deletion_timestamp: Option<Time>,
        #[prost(message, repeated, tag = "13")]
        pub owner_references: Vec<OwnerReference>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Time {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OwnerReference {
        #[prost(string, optional, tag = "1")]
        pub kind: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub uid: Option<String>,
        #[prost(bool, optional, tag = "6")]
        pub controller: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, optional, tag = "3")]
        pub message: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub reason: Option<String>,
    }
}

#[cfg(test)]
mod tests;
