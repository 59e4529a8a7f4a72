//! Logging: JSON lines by default (for log collectors), plain text for a terminal.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Installs the global subscriber. `level` is an `EnvFilter` directive such as `info` or
/// `podset_operator=debug,kube=info`.
pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(level)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    }
    .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}
