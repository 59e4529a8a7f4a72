//! The API server's refusals, as `Status` objects (and the `Status` of a delete).

use serde_json::{Value, json};

use super::resource::Kind;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    /// Empty where the API server gives none.
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

    /// `details` naming the object as the refusal does: by its resource (`pods`), or by its
    /// kind (`Pod`) where validation refuses it; its group and name where it has them.
    fn about(mut self, what: &str, group: Option<&str>, name: &str) -> Self {
        let mut details = json!({"kind": what});
        if let Some(group) = group {
            details["group"] = group.into();
        }
        if !name.is_empty() {
            details["name"] = name.into();
        }
        self.details = Some(details);
        self
    }

    fn about_resource(self, kind: Kind, name: &str) -> Self {
        self.about(kind.plural(), kind.group(), name)
    }

    /// The field that was refused, as `details.causes`: `problem` reads as in `field.Error`
    /// ("Required value: ...", "Invalid value: ...").
    fn cause(mut self, field: &str, reason: &str, problem: &str) -> Self {
        if let Some(details) = &mut self.details {
            details["causes"] = json!([{"reason": reason, "message": problem, "field": field}]);
        }
        self
    }

    /// A JSON patch that could not be applied (a failed `test`, a path not there): the API
    /// server says only this, with empty details.
    pub fn patch_not_applied() -> Self {
        let message = "the server rejected our request due to an error in our request";
        Self {
            details: Some(json!({})),
            ..Self::new(422, "Invalid", message)
        }
    }

    pub fn not_found(kind: Kind, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", kind.qualified());
        Self::new(404, "NotFound", message).about_resource(kind, name)
    }

    pub fn namespace_not_found(namespace: &str) -> Self {
        let message = format!("namespaces \"{namespace}\" not found");
        Self::new(404, "NotFound", message).about("namespaces", None, namespace)
    }

    pub fn already_exists(kind: Kind, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", kind.qualified());
        Self::new(409, "AlreadyExists", message).about_resource(kind, name)
    }

    pub fn conflict(kind: Kind, name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            kind.qualified()
        );
        Self::new(409, "Conflict", message).about_resource(kind, name)
    }

    /// A delete's precondition failed: this refusal names the kind.
    pub fn precondition(kind: Kind, name: &str, field: &str, wanted: &str, is: &str) -> Self {
        let consequence = match field {
            "UID" => "The object might have been deleted and then recreated",
            _ => "The object might have been modified",
        };
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the {field} in the precondition ({wanted}) does not match the {field} in record ({is}). {consequence}",
            kind.qualified_kind()
        );
        Self::new(409, "Conflict", message).about(kind.name(), kind.group(), name)
    }

    /// Validation refused a field of the object: this refusal names the kind.
    pub fn invalid(kind: Kind, name: &str, field: &str, reason: &str, problem: &str) -> Self {
        let message = format!(
            "{} \"{name}\" is invalid: {field}: {problem}",
            kind.qualified_kind()
        );
        Self::new(422, "Invalid", message)
            .about(kind.name(), kind.group(), name)
            .cause(field, reason, problem)
    }

    /// A PUT without the resourceVersion its kind requires: this refusal names the resource.
    pub fn version_required(kind: Kind, name: &str) -> Self {
        let (field, problem) = (
            "metadata.resourceVersion",
            "Invalid value: 0: must be specified for an update",
        );
        let message = format!(
            "{} \"{name}\" is invalid: {field}: {problem}",
            kind.qualified()
        );
        Self::new(422, "Invalid", message)
            .about_resource(kind, name)
            .cause(field, "FieldValueInvalid", problem)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// The answer to a delete of an object the API server does not send back (all but pods).
    pub fn deleted(kind: Kind, name: &str, uid: &str) -> Value {
        let mut details = json!({"name": name, "kind": kind.plural(), "uid": uid});
        if let Some(group) = kind.group() {
            details["group"] = group.into();
        }
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details})
    }

    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "code": self.code,
        });
        if !self.reason.is_empty() {
            status["reason"] = self.reason.into();
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}
