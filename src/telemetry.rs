//! Logging: JSON lines by default (for log collectors), plain text for a terminal.
//!
//! A line logged inside a span carries the span's fields at its top level, as
//! controller-runtime's logs do: `controller` from the controller's span, `namespace`,
//! `object` and `generation` from a reconcile's, `lease` and `term` from a leadership
//! term's, and `name`, the innermost span's name. The code logging it does not repeat them.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::time::SystemTime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The target of the line that says where the operator listens (`starting`), apart from the
/// others so that a quiet log (`--log-level=warn,podset_operator::start=info`) still says it:
/// a launcher that lets the kernel pick the ports reads them there.
pub const START_TARGET: &str = "podset_operator::start";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Installs the global subscriber. `level` is an `EnvFilter` directive such as `info` or
/// `podset_operator=debug,kube=info`.
pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(level)?;
    let installed = match format {
        LogFormat::Json => tracing_subscriber::registry()
            .with(filter)
            .with(json_lines(std::io::stderr))
            .try_init()
            .map_err(|e| e.to_string()),
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init()
            .map_err(|e| e.to_string()),
    };
    installed.map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}

/// One JSON object a line: timestamp, level, target, the event's fields and its spans'.
pub fn json_lines<S, W>(writer: W) -> json_subscriber::JsonLayer<S, W>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + 'static,
{
    let mut layer = json_subscriber::JsonLayer::new(writer);
    layer
        .with_timer("timestamp", SystemTime)
        .with_level("level")
        .with_target("target")
        .with_flattened_event()
        .with_top_level_flattened_span_list();
    layer
}

/// The JSON lines `f` logs, read back.
#[cfg(test)]
pub(crate) fn captured(f: impl FnOnce()) -> Vec<serde_json::Value> {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::registry().with(json_lines(move || writer.clone()));
    tracing::subscriber::with_default(subscriber, f);
    let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    out.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_carries_its_spans_fields_at_the_top_level() {
        let lines = captured(|| {
            let _term = tracing::info_span!("term", lease = "l", term = 2).entered();
            let _reconcile =
                tracing::info_span!("reconcile", namespace = "ns", object = "web").entered();
            tracing::warn!(pods = 3, "created pods");
        });
        let line = &lines[0];
        assert_eq!(line["message"], "created pods", "{line}");
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["pods"], 3, "{line}");
        assert_eq!(line["namespace"], "ns", "{line}");
        assert_eq!(line["object"], "web", "{line}");
        assert_eq!(line["name"], "reconcile", "the innermost span's name");
        assert_eq!(line["lease"], "l", "{line}");
        assert_eq!(line["term"], 2, "{line}");
        assert!(line["timestamp"].as_str().is_some(), "{line}");
    }
}
