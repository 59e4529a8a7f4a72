//! The PodSet and At operators: API types, pure decision logic, and the controllers.

pub mod api;
pub mod cache;
pub mod client;
pub mod clock;
pub mod conditions;
pub mod controller;
pub mod error;
pub mod events;
pub mod expectations;
pub mod fence;
pub mod flags;
pub mod health;
pub mod http;
pub mod jitter;
pub mod leader;
pub mod manifests;
pub mod memory;
pub mod metrics;
pub mod monitoring;
pub mod notify;
pub mod operator;
pub mod plan;
pub mod rbac;
pub mod status_writes;
pub mod telemetry;
pub mod uid;
