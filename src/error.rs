//! Errors a reconcile returns; each variant is also a metric label.

use thiserror::Error;

#[derive(Error, Debug)]
pub enum Error {
    #[error("writing status: {0}")]
    StatusWrite(#[source] kube::Error),

    #[error("reading from the API: {0}")]
    ApiRead(#[source] kube::Error),

    #[error("pod API call: {0}")]
    PodApi(#[source] kube::Error),

    #[error("deleting a finished At after its TTL: {0}")]
    Expire(#[source] kube::Error),

    #[error("the reconcile did not finish within {0:?}")]
    Timeout(std::time::Duration),
}

impl Error {
    /// A short, bounded label for the errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::StatusWrite(_) => "status_write",
            Error::ApiRead(_) => "api_read",
            Error::PodApi(_) => "pod_api",
            Error::Expire(_) => "expire",
            Error::Timeout(_) => "timeout",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
