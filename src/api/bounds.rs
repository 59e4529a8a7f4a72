//! Numbers the schema admits and the Rust types cannot hold, refused by the CRD. kube-openapi
//! does not enforce `format: int32`, and an int-or-string field takes any integer, so without
//! bounds the API server stores a PodSet whose template has a port of 2^31 and the operator
//! cannot read it (issue 31). The bounds are those of the types: what the pod's own validation
//! refuses within them (a port of 70000) is reported by the operator when the create fails.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// The int-or-string fields that are Quantities (a `String` in Rust, any number fits) rather
/// than IntOrStrings (an `i32` or a name): quantities also fill every map of them.
const QUANTITIES: [&str; 2] = ["sizeLimit", "divisor"];

/// Adds the bounds of `i32` to every 32-bit integer and every IntOrString under `schema`.
pub fn bound(schema: &mut JSONSchemaProps) {
    bound_named(schema, "");
}

fn bound_named(schema: &mut JSONSchemaProps, name: &str) {
    let int32 =
        schema.type_.as_deref() == Some("integer") && schema.format.as_deref() == Some("int32");
    let int_or_string =
        schema.x_kubernetes_int_or_string == Some(true) && !QUANTITIES.contains(&name);
    if int32 || int_or_string {
        schema.minimum.get_or_insert(f64::from(i32::MIN));
        schema.maximum.get_or_insert(f64::from(i32::MAX));
    }
    for (name, property) in schema.properties.iter_mut().flatten() {
        bound_named(property, name);
    }
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => bound_named(item, ""),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(bound),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &mut schema.additional_properties {
        // A map's values: a Quantity map (resources) takes any number.
        if values.x_kubernetes_int_or_string != Some(true) {
            bound(values);
        }
    }
    for nested in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        nested.iter_mut().flatten().for_each(bound);
    }
}

#[cfg(test)]
mod tests {
    use crate::api::podset_crd;
    use serde_json::Value;

    /// Every bounded node's path, from the PodSet's schema.
    fn bounded(schema: &Value, path: String, found: &mut Vec<String>) {
        if schema.get("maximum").and_then(Value::as_f64) == Some(f64::from(i32::MAX)) {
            found.push(path.clone());
        }
        for (key, child) in schema.as_object().into_iter().flatten() {
            if matches!(key.as_str(), "properties") {
                for (name, property) in child.as_object().into_iter().flatten() {
                    bounded(property, format!("{path}.{name}"), found);
                }
            } else if matches!(key.as_str(), "items" | "additionalProperties") {
                bounded(child, format!("{path}[]"), found);
            }
        }
    }

    #[test]
    fn int32s_and_int_or_string_ports_are_bounded_and_quantities_are_not() {
        let crd = podset_crd();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let mut found = Vec::new();
        bounded(&schema["openAPIV3Schema"], String::new(), &mut found);
        let has = |suffix: &str| found.iter().any(|p| p.ends_with(suffix));
        let outside = |p: &&String| !p.starts_with(".spec.template.") && !p.starts_with(".status.");
        assert_eq!(found.iter().find(outside), None, "{found:#?}");
        assert!(has(".readinessProbe.httpGet.port"), "{found:#?}");
        assert!(has(".containers[].ports[].containerPort"), "{found:#?}");
        assert!(has(".lifecycle.preStop.tcpSocket.port"), "{found:#?}");
        assert!(
            !has("sizeLimit") && !has(".resources.limits[]"),
            "{found:#?}"
        );
    }
}
