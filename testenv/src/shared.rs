//! The clusters a test binary shares: one per key, started on first use, stopped at exit.

use anyhow::Result;

use crate::{Cluster, Options};

type SharedClusters = std::collections::BTreeMap<&'static str, std::sync::Arc<Cluster>>;

static SHARED: std::sync::Mutex<SharedClusters> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());
static SHARED_START: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One cluster per `key` for every test in this test binary (tests isolate themselves by
/// namespace), started on first use with `opts` and stopped when the process exits.
pub async fn shared(
    key: &'static str,
    opts: impl FnOnce() -> Options,
) -> Result<std::sync::Arc<Cluster>> {
    let _starting = SHARED_START.lock().await;
    if let Some(c) = SHARED.lock().expect("shared cluster lock").get(key) {
        return Ok(c.clone());
    }
    let cluster = std::sync::Arc::new(Cluster::start(opts()).await?);
    let mut shared = SHARED.lock().expect("shared cluster lock");
    if shared.is_empty() {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(stop_shared) };
    }
    shared.insert(key, cluster.clone());
    Ok(cluster)
}

extern "C" fn stop_shared() {
    if let Ok(mut shared) = SHARED.lock() {
        drop(std::mem::take(&mut *shared));
    }
}
