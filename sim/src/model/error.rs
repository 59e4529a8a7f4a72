//! The API server's refusals, as `Status` objects.

use serde_json::{Value, json};

use super::resource::Kind;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` (`name`, `group`, `kind`), where the API server gives them.
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn about(mut self, kind: Kind, name: &str) -> Self {
        let mut details = json!({"name": name, "kind": kind.plural()});
        if let Some(group) = kind.group() {
            details["group"] = group.into();
        }
        self.details = Some(details);
        self
    }

    pub fn not_found(kind: Kind, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", kind.qualified());
        Self::new(404, "NotFound", message).about(kind, name)
    }

    pub fn namespace_not_found(namespace: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
        );
        e.details = Some(json!({"name": namespace, "kind": "namespaces"}));
        e
    }

    pub fn already_exists(kind: Kind, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", kind.qualified());
        Self::new(409, "AlreadyExists", message).about(kind, name)
    }

    pub fn conflict(kind: Kind, name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            kind.qualified()
        );
        Self::new(409, "Conflict", message).about(kind, name)
    }

    pub fn precondition(kind: Kind, name: &str, field: &str, wanted: &str, is: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {is}",
            kind.qualified()
        );
        Self::new(409, "Conflict", message).about(kind, name)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}
