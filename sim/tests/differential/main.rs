//! The model checked against the real API server (issue 26): each sequence sends the same
//! requests, through a `kube::Client`, to the model of kube-apiserver (`podset_sim::model`)
//! and to a real kube-apiserver with the project's CRDs, in a namespace of the same name, and
//! the answers must agree once normalized: UIDs stand for the object they name, timestamps
//! are `<time>`, managedFields go, and resourceVersions become their rank among those the
//! sequence saw (the order matters, not the values).
//!
//! What the model leaves out on purpose, because the operator cannot tell, is said where a
//! sequence meets it: the pod fields the API server's defaulting and admission fill in
//! (`DEFAULTED_POD_SPEC`), the immutability of a pod's spec, the window a watch may start in,
//! and when bookmarks come.

mod at_versions;
mod deletes;
mod finalizers;
mod garbage_collection;
mod lists;
mod normalize;
mod objects;
mod pod_edits;
mod side;
mod status;
mod watches;
mod writes;

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use normalize::normalized;
use side::{Side, real_side};

/// Some API server writes (bootstrap objects) come before the first of a test's own.
const FIRST_VERSION: u64 = 1000;
/// How long a sequence waits for a watch event or the garbage collector.
const DEADLINE: Duration = Duration::from_secs(30);
/// The label of a step compared only if the real server answered it.
const OPTIONAL: &str = "(optional) ";
/// A UID no object has.
const WRONG_UID: &str = "00000000-0000-4000-8000-00000000dead";

/// Runs `sequence` on the model (`model_side` or `world_side`) and on the real server, at
/// once, in a namespace of the same name, and compares what each saw.
async fn differential<F, Fut>(name: &str, model: fn(&str) -> Side, sequence: F) -> Result<()>
where
    F: Fn(Side) -> Fut,
    Fut: Future<Output = Result<Side>>,
{
    let ns = format!("diff-{name}-{}", std::process::id() % 10_000);
    let model = model(&ns);
    let real = real_side(&ns).await?;
    let (model, real) = tokio::join!(sequence(model), sequence(real));
    let (model, real) = (
        model.context("on the model")?,
        real.context("on the real API server")?,
    );
    let (model, real) = (normalized(&model), normalized(&real));
    let mut differences = Vec::new();
    for i in 0..model.len().max(real.len()) {
        let (m, r) = (model.get(i), real.get(i));
        let optional = r.is_some_and(|(step, v)| step.starts_with(OPTIONAL) && v.is_null());
        if m != r && !optional {
            let show = |s: Option<&(String, Value)>| {
                s.map_or("(none)".into(), |(step, v)| {
                    format!("{step}: {}", serde_json::to_string_pretty(v).expect("JSON"))
                })
            };
            differences.push(format!(
                "step {i}:\n  model: {}\n  real:  {}",
                show(m),
                show(r)
            ));
        }
    }
    if !differences.is_empty() {
        bail!(
            "{name}: the model and the API server disagree:\n{}",
            differences.join("\n")
        );
    }
    Ok(())
}
