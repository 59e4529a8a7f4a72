//! The pod template in a CRD's schema (a PodSet's and an At's `spec.template`): only the
//! metadata its pods take, and the rules its kind holds it to.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ValidationRule,
};

/// The fields of a pod template's metadata the pods take: the CRD keeps only these, and the
/// API server prunes the rest (names, times, owners, finalizers: meaningless on a template).
/// Typed as `ObjectMeta`, they made a PodSet whose template had an admitted
/// `deletionTimestamp: []` unreadable.
pub const METADATA: [&str; 2] = ["annotations", "labels"];

/// The schema of `spec.<field>` in `schema`, a CRD's root, if it has one.
pub(super) fn field_of_spec<'a>(
    schema: &'a mut JSONSchemaProps,
    field: &str,
) -> Option<&'a mut JSONSchemaProps> {
    schema
        .properties
        .as_mut()?
        .get_mut("spec")?
        .properties
        .as_mut()?
        .get_mut(field)
}

/// `schema` without the descriptions of its fields, at every depth.
pub(super) fn undocumented(schema: &mut JSONSchemaProps) {
    schema.description = None;
    for property in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        undocumented(property);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = &mut schema.items {
        undocumented(item);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &mut schema.additional_properties {
        undocumented(values);
    }
}

/// The schema of `spec.template.<field>` in `schema`, a CRD's root, if it has one.
pub(super) fn field<'a>(
    schema: &'a mut JSONSchemaProps,
    field: &str,
) -> Option<&'a mut JSONSchemaProps> {
    ["spec", "template", field]
        .iter()
        .try_fold(schema, |s, field| s.properties.as_mut()?.get_mut(*field))
}

/// Keeps only [`METADATA`] in the schema of `spec.template.metadata`, if `schema` (a CRD's
/// root) has one.
pub(super) fn prune_metadata(schema: &mut JSONSchemaProps) {
    if let Some(fields) = field(schema, "metadata").and_then(|m| m.properties.as_mut()) {
        fields.retain(|name, _| METADATA.contains(&name.as_str()));
    }
}

/// Puts `rules` (a CEL rule and its message each) on `spec.template.spec`, if `schema` (a
/// CRD's root) has one.
pub(super) fn hold_to(schema: &mut JSONSchemaProps, rules: &[(&str, &str)]) {
    let Some(spec) = field(schema, "spec") else {
        return;
    };
    let rules = rules.iter().map(|(rule, message)| ValidationRule {
        rule: rule.to_string(),
        message: Some(message.to_string()),
        reason: Some("FieldValueForbidden".into()),
        ..Default::default()
    });
    spec.x_kubernetes_validations = Some(rules.collect());
}
