//! A model of kube-apiserver with the semantics the operator depends on (see `store`), served
//! over the same REST paths, so that the operator's real client, its watchers and its request
//! layers talk to it unchanged.

pub mod error;
pub mod http;
pub mod objects;
pub mod resource;
pub mod selector;
pub mod service;
pub mod store;
pub mod versions;
pub mod watch;
