//! Label and field selectors, as the API server reads them from a query.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A conjunction of terms over labels (`app=web,!gone`) or fields (`metadata.name=x`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    terms: Vec<Term>,
}

impl Selector {
    /// Parses the `=`, `==`, `!=`, `key` and `!key` forms; `Err` for what it does not read
    /// (the API server answers 400 then).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for raw in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let term = if let Some((k, v)) = raw.split_once("!=") {
                Term::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = raw.split_once("==").or_else(|| raw.split_once('=')) {
                Term::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = raw.strip_prefix('!') {
                Term::Absent(k.trim().into())
            } else if raw.contains(['(', ' ', '<', '>']) {
                return Err(format!("unable to parse requirement: {raw:?}"));
            } else {
                Term::Exists(raw.into())
            };
            terms.push(term);
        }
        Ok(Self { terms })
    }

    /// Whether `lookup` (a key's value, if set) satisfies every term.
    pub fn matches<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.terms.iter().all(|t| match t {
            Term::Equals(k, v) => lookup(k) == Some(v.as_str()),
            Term::NotEquals(k, v) => lookup(k) != Some(v.as_str()),
            Term::Exists(k) => lookup(k).is_some(),
            Term::Absent(k) => lookup(k).is_none(),
        })
    }

    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.matches(|k| labels[k].as_str())
    }

    /// The fields every resource supports: `metadata.name` and `metadata.namespace`.
    pub fn matches_fields(&self, object: &Value) -> bool {
        self.matches(|k| match k {
            "metadata.name" => object["metadata"]["name"].as_str(),
            "metadata.namespace" => object["metadata"]["namespace"].as_str(),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_forms_the_clients_send() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns",
            "labels": {"app.kubernetes.io/managed-by": "podset-operator", "app": "web"}}});
        let managed = Selector::parse("app.kubernetes.io/managed-by=podset-operator").unwrap();
        assert!(managed.matches_labels(&pod));
        assert!(
            Selector::parse("app==web,!gone")
                .unwrap()
                .matches_labels(&pod)
        );
        assert!(!Selector::parse("app!=web").unwrap().matches_labels(&pod));
        assert!(!Selector::parse("missing").unwrap().matches_labels(&pod));
        assert!(Selector::parse("").unwrap().matches_labels(&pod));
        assert!(
            Selector::parse("metadata.name=p")
                .unwrap()
                .matches_fields(&pod)
        );
        assert!(Selector::parse("app in (a,b)").is_err());
    }
}
