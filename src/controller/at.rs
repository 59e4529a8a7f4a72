//! The At reconcile (issue 4: being written).

use std::sync::Arc;

use kube::runtime::controller::Action;

use super::{Context, retry_after};
use crate::api::At;
use crate::error::{Error, Result};

pub async fn reconcile(_at: Arc<At>, _ctx: Arc<Context>) -> Result<Action> {
    Ok(Action::await_change())
}

pub fn error_policy(at: Arc<At>, _error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(at.as_ref(), &ctx)
}
