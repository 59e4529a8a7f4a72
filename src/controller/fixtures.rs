//! What the controller tests share.

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use super::{Backoff, Context};
use crate::api::{PodSet, PodSetSpec};
use crate::expectations::{Expectations, StatusWrites};

/// A Context whose API answers nothing (no test here calls it).
pub fn context() -> Arc<Context> {
    let svc = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
        Err::<http::Response<kube::client::Body>, tower::BoxError>("no API in unit tests".into())
    });
    let client = Client::new(svc, "default");
    Arc::new(Context {
        client: client.clone(),
        pods: Default::default(),
        expectations: Expectations::default(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        ),
        metrics: Default::default(),
        backoff: Backoff::default(),
        podset_statuses: StatusWrites::default(),
        resync: std::time::Duration::from_secs(300),
    })
}

/// PodSet `ns/web` with UID `ps-uid` and one replica.
pub fn podset() -> PodSet {
    let mut ps = PodSet::new(
        "web",
        PodSetSpec {
            replicas: 1,
            template: None,
        },
    );
    ps.metadata.namespace = Some("ns".into());
    ps.metadata.uid = Some("ps-uid".into());
    ps
}
