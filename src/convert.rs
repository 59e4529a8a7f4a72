//! `podset-operator convert`: a manifest's PodSets and Ats rewritten at another version,
//! offline, by the conversion webhook's own code (`kubectl convert` knows only built-in
//! kinds). Every other document passes through unchanged.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::api::conversion;

#[derive(clap::Args, Debug)]
pub struct Convert {
    /// The manifest (YAML, several documents allowed); `-` reads standard input.
    #[arg(short = 'f', long = "filename", default_value = "-")]
    file: PathBuf,
    /// The version to write PodSets and Ats at.
    #[arg(long, default_value = crate::api::STORAGE_VERSION, value_parser = ["v1alpha1", "v1beta1"])]
    to: String,
}

impl Convert {
    /// Writes the converted manifest to standard output.
    pub fn run(&self) -> Result<()> {
        let text = if self.file.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            text
        } else {
            std::fs::read_to_string(&self.file)
                .with_context(|| format!("reading {}", self.file.display()))?
        };
        print!("{}", convert_manifest(&text, &self.to)?);
        Ok(())
    }
}

/// `text`'s documents, each PodSet and At at `version`.
pub fn convert_manifest(text: &str, version: &str) -> Result<String> {
    let mut out = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document).with_context(|| format!("document {}", i + 1))?;
        if value.is_null() {
            continue;
        }
        out.push(serde_yaml::to_string(&converted(value, version)?)?);
    }
    Ok(out.join("---\n"))
}

fn converted(value: Value, version: &str) -> Result<Value> {
    let group = match value["kind"].as_str() {
        Some("At") => "cnat.programming-kubernetes.info",
        Some("PodSet") => "app.example.com",
        _ => return Ok(value),
    };
    let desired = format!("{group}/{version}");
    conversion::convert(value, &desired).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_books_sample_moves_to_v1beta1_and_back_and_other_documents_pass() {
        let sample = include_str!("../config/samples/cnat_v1alpha1_at.yaml");
        let text =
            format!("{sample}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n");
        let beta = convert_manifest(&text, "v1beta1").unwrap();
        assert!(
            beta.contains("apiVersion: cnat.programming-kubernetes.info/v1beta1"),
            "{beta}"
        );
        assert!(beta.contains("- echo YAY"), "{beta}");
        assert!(beta.contains("kind: ConfigMap"), "{beta}");
        let alpha = convert_manifest(&beta, "v1alpha1").unwrap();
        let back: Value = serde_yaml::from_str(alpha.split("---\n").next().unwrap()).unwrap();
        let original: Value = serde_yaml::from_str(sample).unwrap();
        assert_eq!(back, original);
    }
}
