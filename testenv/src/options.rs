//! Which components a [`Cluster`](crate::Cluster) runs, and how.

use std::path::PathBuf;

use crate::versions;

/// Which components to run. The default is etcd, apiserver and controller-manager.
#[derive(Clone, Debug)]
pub struct Options {
    /// Run kube-controller-manager (service accounts, node lifecycle, garbage collector...).
    pub controller_manager: bool,
    /// The controller-manager's `--controllers` value; `None` keeps its defaults.
    pub controllers: Option<String>,
    /// Extra controller-manager flags (for example client QPS for benchmarks).
    pub controller_manager_args: Vec<String>,
    /// Run kube-scheduler.
    pub scheduler: bool,
    /// kubemark hollow nodes; pods bound to them go Running, but no container starts.
    /// Needs the scheduler. With real nodes too, they carry
    /// [`HOLLOW_TAINT`](crate::HOLLOW_TAINT).
    pub nodes: usize,
    /// Real nodes (kubelet + containerd + runc): pods run real containers. Needs the
    /// scheduler; the cluster then also runs its own image registry.
    pub real_nodes: usize,
    /// Extra kube-apiserver flags.
    pub apiserver_args: Vec<String>,
    /// Keep the state here instead of a temporary directory (for `make cluster-up`).
    pub dir: Option<PathBuf>,
    /// CRD manifests to install before the controller-manager starts, so its garbage
    /// collector knows them at once instead of at its next discovery resync (~30 s).
    pub crds: Option<String>,
    /// Have the apiserver write an audit log (see [`audit`](crate::audit)). Benchmarks turn it
    /// off: it costs a write per request.
    pub audit: bool,
    /// The Kubernetes version; `None` is [`versions::default_version`].
    pub version: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            controller_manager: true,
            controllers: None,
            controller_manager_args: Vec::new(),
            scheduler: false,
            nodes: 0,
            real_nodes: 0,
            apiserver_args: Vec::new(),
            dir: None,
            crds: None,
            audit: true,
            version: None,
        }
    }
}

impl Options {
    /// Scheduler plus `n` hollow nodes, so pods really go Running.
    pub fn with_nodes(mut self, n: usize) -> Self {
        self.scheduler = n > 0 || self.scheduler;
        self.nodes = n;
        self
    }

    /// Scheduler plus `n` real nodes.
    pub fn with_real_nodes(mut self, n: usize) -> Self {
        self.scheduler = n > 0 || self.scheduler;
        self.real_nodes = n;
        self
    }

    pub fn without_controller_manager(mut self) -> Self {
        self.controller_manager = false;
        self
    }

    /// Kubernetes `version` (`1.33`, `1.33.13`) instead of the default.
    pub fn on_version(mut self, version: &str) -> Self {
        self.version = Some(versions::resolve(version));
        self
    }
}
