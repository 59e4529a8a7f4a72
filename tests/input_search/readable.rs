//! Objects written and read at either version, raw, and the check that whatever the API server
//! admitted reads the same at both: PodSets by the API server's own conversion (strategy
//! None), Ats through the operator's webhook, which the test cluster serves.

use anyhow::{Result, anyhow, ensure};
use podset_operator::api::conversion::{SPEC_ANNOTATION, convert};
use podset_operator::api::{DEPRECATED_VERSION, STORAGE_VERSION};
use serde_json::Value;

use crate::findings;
use crate::generate::{Generated, Schemas, api_version};
use crate::held::{alpha_null_image_dropped, held, same};
use testenv::harness::{Kind, PROMPTLY, TestNs, poll_some};

/// The URL of `ns`'s objects of `kind` at `version`, `name` among them if given.
fn url(ns: &TestNs, kind: Kind, version: &str, name: Option<&str>) -> String {
    let one = name.map(|n| format!("/{n}")).unwrap_or_default();
    ns.url_at(kind, &api_version(kind, version)) + &one
}

/// Sends `body` (an object of `kind` at `version`) to `ns` by `method`, to `name` if given;
/// the code and message of the API server's refusal, if it refused.
pub async fn send(
    ns: &TestNs,
    method: http::Method,
    (kind, version, name): (Kind, &str, Option<&str>),
    query: &str,
    body: &Value,
) -> Result<Option<(u16, String)>> {
    let url = url(ns, kind, version, name) + query;
    ns.send_raw(method, url, body.to_string().into_bytes())
        .await
}

/// The object `name` of `kind` read at `version`; `None` if there is none.
pub async fn get(ns: &TestNs, kind: Kind, version: &str, name: &str) -> Result<Option<Value>> {
    let request = http::Request::get(url(ns, kind, version, Some(name))).body(Vec::new())?;
    match ns.client.request::<Value>(request).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `g`, admitted, reads the same at both versions: reads of one resourceVersion at each have
/// the same metadata (but the conversion's annotation) and status; the version it was written
/// at gives back what was written, as the API server holds it; an At's reads are what the
/// webhook makes of each other; an At read at v1alpha1 and written back unchanged leaves its
/// v1beta1 spec as it was; and an At written at v1alpha1 is one v1beta1 admits too. Gone (an
/// At deleted by its TTL) is nothing to check. The open finding it shows, if it shows one
/// ([`crate::findings`]): all else is checked all the same.
pub async fn readable(
    ns: &TestNs,
    schemas: &Schemas,
    g: &Generated,
) -> Result<Option<&'static str>> {
    let what = format!("{:?} {} read alike at both versions", g.kind, g.name);
    let checked = poll_some(PROMPTLY, &what, || async {
        match reads(ns, g).await? {
            Reads::Gone => Ok(Some(Ok(None))),
            Reads::Moved => Ok(None),
            Reads::Both(beta, alpha) => checked(ns, schemas, g, &beta, &alpha).await,
        }
    });
    checked.await?
}

/// Reads of one object at both versions.
enum Reads {
    /// At v1beta1 and at v1alpha1, of one resourceVersion.
    Both(Value, Value),
    /// Written to between them: to read again.
    Moved,
    Gone,
}

async fn reads(ns: &TestNs, g: &Generated) -> Result<Reads> {
    let read = |version| get(ns, g.kind, version, &g.name);
    let (Some(beta), Some(alpha), Some(again)) = (
        read(STORAGE_VERSION).await?,
        read(DEPRECATED_VERSION).await?,
        read(STORAGE_VERSION).await?,
    ) else {
        return Ok(Reads::Gone);
    };
    let version = |o: &Value| o["metadata"]["resourceVersion"].clone();
    if version(&beta) != version(&alpha) || version(&alpha) != version(&again) {
        return Ok(Reads::Moved);
    }
    Ok(Reads::Both(beta, alpha))
}

/// The checks of [`readable`] on two reads: what they came to (the open finding shown, if
/// any); `None` if a write came between (to read again).
async fn checked(
    ns: &TestNs,
    schemas: &Schemas,
    g: &Generated,
    beta: &Value,
    alpha: &Value,
) -> Result<Option<Result<Option<&'static str>>>> {
    if let Err(e) = alike(schemas, g, beta, alpha) {
        return Ok(Some(Err(e)));
    }
    if g.kind == Kind::PodSet {
        return Ok(Some(Ok(None)));
    }
    let open = match beta_refused(ns, g, beta).await? {
        Ok(open) => open,
        Err(e) => return Ok(Some(Err(e))),
    };
    let written_back = (Kind::At, DEPRECATED_VERSION, Some(g.name.as_str()));
    match send(ns, http::Method::PUT, written_back, "", alpha).await? {
        Some((409, _)) => return Ok(None),
        Some((code, message)) => {
            let e = anyhow!("its v1alpha1 read written back: {code} {message}");
            return Ok(Some(Err(e)));
        }
        None => {}
    }
    let after = get(ns, g.kind, STORAGE_VERSION, &g.name).await?;
    let changed = after.filter(|after| !same(&after["spec"], &beta["spec"]));
    Ok(Some(match changed {
        None => Ok(open),
        Some(after) => Err(anyhow!(
            "its v1alpha1 read written back changed its v1beta1 spec from {:#} to {:#}",
            beta["spec"],
            after["spec"]
        )),
    }))
}

/// The checks of [`readable`] that need no request.
fn alike(schemas: &Schemas, g: &Generated, beta: &Value, alpha: &Value) -> Result<()> {
    let mut alpha_metadata = alpha["metadata"].clone();
    let annotations = alpha_metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut);
    if let Some(annotations) = annotations {
        annotations.remove(SPEC_ANNOTATION);
        if annotations.is_empty() {
            alpha_metadata
                .as_object_mut()
                .map(|m| m.remove("annotations"));
        }
    }
    ensure!(
        same(&alpha_metadata, &beta["metadata"]),
        "metadata differ: {alpha_metadata:#} at v1alpha1, {:#} at v1beta1",
        beta["metadata"]
    );
    ensure!(
        same(&alpha["status"], &beta["status"]),
        "status differs: {:#} at v1alpha1",
        alpha["status"]
    );
    let (spec, status) = schemas.schema(g.kind, g.version);
    let mut wrote = held(&g.body, spec, status);
    if (g.kind, g.version) == (Kind::At, DEPRECATED_VERSION) {
        alpha_null_image_dropped(&mut wrote);
    }
    let read = if g.version == STORAGE_VERSION {
        beta
    } else {
        alpha
    };
    ensure!(
        same(&read["spec"], &wrote["spec"]),
        "wrote {:#} at {}, read {:#}",
        wrote["spec"],
        g.version,
        read["spec"]
    );
    match g.kind {
        Kind::PodSet => ensure!(
            same(&alpha["spec"], &beta["spec"]),
            "the spec differs: {:#} at v1alpha1",
            alpha["spec"]
        ),
        Kind::At => {
            let converted = |o: &Value, version| {
                convert(o.clone(), &api_version(Kind::At, version)).map_err(anyhow::Error::msg)
            };
            let (spec, status) = schemas.schema(Kind::At, STORAGE_VERSION);
            let hub = held(&converted(alpha, STORAGE_VERSION)?, spec, status);
            ensure!(
                same(&hub, beta),
                "its v1alpha1 read converts to {hub:#}, not its v1beta1 read"
            );
            let (spec, status) = schemas.schema(Kind::At, DEPRECATED_VERSION);
            let spoke = held(&converted(beta, DEPRECATED_VERSION)?, spec, status);
            ensure!(
                same(&spoke, alpha),
                "its v1beta1 read converts to {spoke:#}, not its v1alpha1 read"
            );
        }
    }
    Ok(())
}

/// Whether v1beta1 admits the v1beta1 spec of `g` (read as `beta`), written at v1alpha1: an
/// error if it does not, unless the spec came from `g`'s annotation, which v1beta1 refuses
/// too: then the open finding [`findings::SMUGGLED`].
async fn beta_refused(
    ns: &TestNs,
    g: &Generated,
    beta: &Value,
) -> Result<Result<Option<&'static str>>> {
    if g.version != DEPRECATED_VERSION {
        return Ok(Ok(None));
    }
    let Some(refused) = refused_at_v1beta1(ns, &g.name, &beta["spec"]).await? else {
        return Ok(Ok(None));
    };
    let annotation = g.body["metadata"]["annotations"][SPEC_ANNOTATION].as_str();
    let written = annotation.and_then(|a| serde_json::from_str::<Value>(a).ok());
    if let Some(written) = written.filter(Value::is_object)
        && refused_at_v1beta1(ns, &g.name, &written).await?.is_some()
    {
        return Ok(Ok(Some(findings::SMUGGLED)));
    }
    Ok(Err(anyhow!(
        "admitted at v1alpha1, its v1beta1 spec is refused at v1beta1: {refused}"
    )))
}

/// Why v1beta1 refuses `spec`, if it does: an At of `name` with it, created at v1beta1 in a
/// dry run. (The API server checks a write against the schema of the version it is made at,
/// not the stored version it is converted to.)
pub async fn refused_at_v1beta1(ns: &TestNs, name: &str, spec: &Value) -> Result<Option<String>> {
    let copy = serde_json::json!({
        "apiVersion": api_version(Kind::At, STORAGE_VERSION),
        "kind": "At",
        "metadata": {"name": format!("dry-{name}")},
        "spec": spec,
    });
    let created = (Kind::At, STORAGE_VERSION, None);
    let refused = send(ns, http::Method::POST, created, "?dryRun=All", &copy).await?;
    Ok(refused.map(|(code, message)| format!("{code} {message}")))
}
