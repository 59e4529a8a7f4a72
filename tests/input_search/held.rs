//! What the API server holds of an object at a version, as far as conversion can tell. Every
//! object it stores, and every answer of a conversion webhook, goes through
//! apiextensions-apiserver's `unstructuredSchemaCoercer` for the version it is at: fields the
//! schema does not know are pruned, and so are nulls where the schema does not say `nullable`
//! and gives no default (`PruneNonNullableNullsWithoutDefaults`), and the metadata is
//! read into an `ObjectMeta` and written back (its empty fields omitted, unknown ones dropped);
//! then the schema's defaults fill what is missing (a PodSet's `replicas`; an At has none).
//! Validation then refuses values of the wrong type and missing required fields.

use serde_json::{Map, Value};

/// The fields of an `ObjectMeta`: the API server drops any other.
const OBJECT_META: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// `object` as the API server holds it at the version whose `spec` and `status` schemas these
/// are.
pub fn held(object: &Value, spec: &Value, status: &Value) -> Value {
    let mut object = object.clone();
    let Some(root) = object.as_object_mut() else {
        return object;
    };
    root.retain(|field, _| {
        ["apiVersion", "kind", "metadata", "spec", "status"].contains(&&**field)
    });
    for (field, schema) in [("spec", spec), ("status", status)] {
        match root.get_mut(field) {
            Some(Value::Null) if schema["nullable"] != true => {
                root.remove(field);
            }
            Some(value) => pruned(value, schema),
            None => {}
        }
    }
    if let Some(Value::Object(metadata)) = root.get_mut("metadata") {
        metadata.retain(|field, value| OBJECT_META.contains(&&**field) && !omitted(value));
    }
    object
}

/// What a client that wrote `object` at v1alpha1, an At, reads back at that version, as far as
/// held values go: `image: null` comes back absent. v1alpha1 says the image is nullable, and
/// v1beta1's container image is not: the API server prunes the null from the v1beta1 At it
/// stores. Null and absent are one to every reader.
pub fn alpha_null_image_dropped(object: &mut Value) {
    if let Some(spec) = object["spec"].as_object_mut()
        && spec.get("image") == Some(&Value::Null)
    {
        spec.remove("image");
    }
}

/// Whether `a` and `b` are the same JSON, numbers by value: the API server writes a float that
/// is whole as an integer (`0.0` as `0`), and reads an integer past 64 bits as a float.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64() == y.as_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// What Go's `omitempty` leaves out of an `ObjectMeta`.
fn omitted(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(_) => false,
    }
}

/// Prunes below `value` what `schema` does not know and the nulls it does not allow, and fills
/// in its defaults.
fn pruned(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|name, value| {
                let sub = field(schema, name);
                let kept = !sub.is_null()
                    && (!value.is_null() || sub["nullable"] == true || !sub["default"].is_null());
                if kept {
                    pruned(value, sub);
                }
                kept
            });
            let properties = schema["properties"].as_object().into_iter().flatten();
            for (name, sub) in properties.filter(|(_, sub)| !sub["default"].is_null()) {
                let nulled = fields
                    .get(name)
                    .is_some_and(|v| v.is_null() && sub["nullable"] != true);
                if !fields.contains_key(name) || nulled {
                    fields.insert(name.clone(), sub["default"].clone());
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| pruned(i, &schema["items"])),
        _ => {}
    }
}

/// The schema of an object's field `name` (a map's value, if the object is a map); `Null` if
/// it has none.
fn field<'a>(schema: &'a Value, name: &str) -> &'a Value {
    match &schema["additionalProperties"] {
        values @ Value::Object(_) => values,
        _ => &schema["properties"][name],
    }
}

/// Whether `value` has the types `schema` says and its required fields, as validation wants
/// (integers as the API server holds them: 64-bit).
pub fn typed(schema: &Value, value: &Value) -> bool {
    if schema["x-kubernetes-int-or-string"] == true {
        return value.is_string() || value.is_i64();
    }
    if value.is_null() {
        return schema["nullable"] == true;
    }
    match schema["type"].as_str().unwrap_or_default() {
        "string" => value.is_string(),
        "integer" => value.is_i64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value
            .as_array()
            .is_some_and(|items| items.iter().all(|i| typed(&schema["items"], i))),
        "object" => value.as_object().is_some_and(|o| typed_object(schema, o)),
        _ => true,
    }
}

fn typed_object(schema: &Value, object: &Map<String, Value>) -> bool {
    let mut required = schema["required"].as_array().into_iter().flatten();
    required.all(|r| r.as_str().is_some_and(|r| object.contains_key(r)))
        && object.iter().all(|(name, v)| typed(field(schema, name), v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_and_nulls_the_schema_does_not_allow_are_pruned_and_empty_metadata_omitted() {
        let spec = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "nullable": true},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "d": {"type": "integer", "default": 1},
            "l": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        }});
        let object = json!({
            "apiVersion": "g/v", "kind": "K", "extra": 1,
            "metadata": {"name": "n", "labels": {}, "annotations": {"k": ""}, "generation": 0, "bogus": 1},
            "spec": {"a": null, "b": null, "c": 1, "m": {"k": "v"}, "l": [{"x": 1, "y": 2}], "e": {}},
        });
        let held = held(&object, &spec, &json!({}));
        assert_eq!(
            held,
            json!({
                "apiVersion": "g/v", "kind": "K",
                "metadata": {"name": "n", "annotations": {"k": ""}},
                "spec": {"b": null, "m": {"k": "v"}, "l": [{"x": 1}], "d": 1},
            })
        );
        assert!(typed(&spec, &held["spec"]));
        assert!(!typed(&spec, &json!({"a": 1})));
        assert!(!typed(&spec, &json!({"l": [{"x": 1.5}]})));
        assert!(!typed(&spec, &json!({"l": [{"x": u64::MAX}]})));
    }
}
