//! The operator binary run as a process: one launcher for the end-to-end tests and the
//! benchmarks, so that both start it with the same flags, on free loopback ports, under a
//! name the leftover check knows.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::Process;

/// How to start one operator process. The flags every run needs are set here; a caller adds
/// its own with [`Launcher::args`] and [`Launcher::env`].
#[derive(Clone, Debug)]
pub struct Launcher {
    binary: PathBuf,
    name: String,
    log_dir: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    instance: String,
    log_format: Option<String>,
    log_level: Option<String>,
    metrics_secure: bool,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Launcher {
    /// `binary` watching `namespace` with the credentials of `kubeconfig`; its log is
    /// `<log_dir>/<name>.log`. Its instance name (in events and the leader Lease) starts
    /// with "podset-testenv-", which marks test processes for the leftover check.
    pub fn new(
        binary: impl Into<PathBuf>,
        name: &str,
        log_dir: &Path,
        kubeconfig: &Path,
        namespace: &str,
    ) -> Self {
        Self {
            binary: binary.into(),
            name: name.into(),
            log_dir: log_dir.into(),
            kubeconfig: kubeconfig.into(),
            namespace: namespace.into(),
            instance: format!("podset-testenv-{name}"),
            log_format: None,
            log_level: None,
            metrics_secure: true,
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Its `--instance`, which must start with "podset-testenv-" (see [`Launcher::new`]).
    pub fn instance(mut self, instance: &str) -> Self {
        assert!(
            instance.starts_with("podset-testenv-"),
            "{instance}: the leftover check would not know it"
        );
        self.instance = instance.into();
        self
    }

    pub fn log_format(mut self, format: &str) -> Self {
        self.log_format = Some(format.into());
        self
    }

    pub fn log_level(mut self, level: &str) -> Self {
        self.log_level = Some(level.into());
        self
    }

    /// `/metrics` over plain HTTP (the benchmark scrapes its own operator on loopback);
    /// by default it is HTTPS with a self-signed certificate, as shipped.
    pub fn plain_metrics(mut self) -> Self {
        self.metrics_secure = false;
        self
    }

    /// More flags, after the launcher's own.
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// A variable added to its environment.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts it, and waits for it to listen; it is not ready yet (see
    /// [`Operator::wait_ready`]).
    pub fn start(self) -> Result<Operator> {
        let mut args: Vec<String> = vec![
            "run".into(),
            format!("--namespace={}", self.namespace),
            format!("--instance={}", self.instance),
            // Ports the kernel picks as it binds, read back from the log: a port found free
            // beforehand can be taken before the operator binds it (CI saw it).
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-probe-bind-address=127.0.0.1:0".into(),
        ];
        args.extend(self.log_format.map(|f| format!("--log-format={f}")));
        // However quiet, it says where it listens.
        let start = podset_operator::telemetry::START_TARGET;
        args.extend(
            self.log_level
                .map(|l| format!("--log-level={l},{start}=info")),
        );
        if !self.metrics_secure {
            args.push("--metrics-secure=false".into());
        }
        args.extend(self.args);
        let mut process = Process::new(&self.name, &self.binary, args, &self.log_dir)
            .env("KUBECONFIG", &self.kubeconfig.to_string_lossy());
        for (key, value) in &self.env {
            process = process.env(key, value);
        }
        // Its errors without anyhow's backtraces, which would bury them (panics keep theirs).
        process = process.env("RUST_LIB_BACKTRACE", "0");
        // An earlier operator of this name logged to the same file.
        let earlier = Listening::count(&process);
        process
            .start()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let listening = Listening::after(&mut process, earlier)?;
        Ok(Operator {
            process,
            instance: self.instance,
            metrics_port: listening.metrics.port(),
            health_port: listening.health.port(),
        })
    }
}

/// Where a started operator listens, as its "starting" log line says.
pub struct Listening {
    pub metrics: SocketAddr,
    pub health: SocketAddr,
}

/// How long a starting operator may take to bind its ports and log them.
const LISTENING_WITHIN: Duration = Duration::from_secs(30);

impl Listening {
    /// Waits for `process`'s start number `earlier + 1` (its log is appended across restarts)
    /// to log where it listens. A process that exits first fails with its log. Blocks: it
    /// takes milliseconds, and the operator says it before it talks to any server.
    pub fn after(process: &mut Process, earlier: usize) -> Result<Self> {
        let deadline = std::time::Instant::now() + LISTENING_WITHIN;
        loop {
            let log = std::fs::read_to_string(&process.log).unwrap_or_default();
            if let Some(listening) = log.lines().filter_map(Self::from_line).nth(earlier) {
                return Ok(listening);
            }
            if let Some(status) = process.exited() {
                bail!(
                    "{} exited ({status}) before it listened:\n{log}",
                    process.name
                );
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "{} did not listen within {LISTENING_WITHIN:?}:\n{log}",
                    process.name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many times `process` has said where it listens.
    pub fn count(process: &Process) -> usize {
        let log = std::fs::read_to_string(&process.log).unwrap_or_default();
        log.lines().filter_map(Self::from_line).count()
    }

    /// The addresses of a "starting" line, in JSON or text (colours stripped).
    fn from_line(line: &str) -> Option<Self> {
        let plain = strip_colours(line);
        let addr = |key: &str| -> Option<SocketAddr> {
            let after = &plain[plain.find(key)? + key.len()..];
            let value = after.trim_start_matches(['"', ':', '=']);
            let end = value.find(['"', ' ', ',', '}']).unwrap_or(value.len());
            value[..end].parse().ok()
        };
        if !plain.contains("starting") {
            return None;
        }
        Some(Self {
            metrics: addr("metrics_addr")?,
            health: addr("health_addr")?,
        })
    }
}

/// Prometheus text as `series -> value`, the series spelled `name{k="v",...}` as exposed.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// `line` without its ANSI colour sequences (`ESC [ ... m`).
fn strip_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            plain.push(c);
        }
    }
    plain
}

/// An operator process. Killed when dropped; its log is printed if the test is failing.
pub struct Operator {
    pub process: Process,
    /// Its name in events and in the leader Lease.
    pub instance: String,
    pub metrics_port: u16,
    pub health_port: u16,
}

impl Operator {
    /// Waits up to `timeout` for its `/readyz` (its initial lists done).
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let url = format!("http://127.0.0.1:{}/readyz", self.health_port);
        crate::poll(timeout, "the operator's /readyz", || async {
            let r = reqwest::get(&url).await;
            Ok(r.is_ok_and(|r| r.status().is_success()))
        })
        .await
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    pub fn kill(&mut self) {
        self.process
            .stop_with(libc::SIGKILL, Duration::from_secs(5));
    }

    /// SIGTERM; the exit status if the operator exited on its own within 15 s.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        self.process
            .stop_with(libc::SIGTERM, Duration::from_secs(15))
    }

    /// Starts it again (it listens on new ports) and waits for it to listen.
    pub fn restart(&mut self) -> Result<()> {
        let earlier = Listening::count(&self.process);
        self.process.start().context("restarting the operator")?;
        let listening = Listening::after(&mut self.process, earlier)?;
        self.metrics_port = listening.metrics.port();
        self.health_port = listening.health.port();
        Ok(())
    }

    /// `GET /metrics` over HTTPS (the operator's certificate is self-signed), with `token`
    /// as the bearer token if any: the status code and body.
    pub async fn get_metrics(&self, token: Option<&str>) -> Result<(u16, String)> {
        crate::get_metrics(self.metrics_port, token).await
    }

    /// Its `/metrics` as `series -> value`, scraped with `token`.
    pub async fn scrape(&self, token: &str) -> Result<BTreeMap<String, f64>> {
        let (code, body) = self.get_metrics(Some(token)).await?;
        anyhow::ensure!(code == 200, "/metrics answered {code}: {body}");
        Ok(parse_metrics(&body))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.process.log).unwrap_or_default()
    }

    /// Whether its log says it leads: its last term began and has not ended.
    pub fn leads(&self) -> bool {
        let log = self.log();
        log.rfind("became the leader") > log.rfind("; stepping down")
    }

    /// The JSON lines of its log (`--log-format=json`), each parsed.
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Fails if the operator exited, panicked, or was warned by the API server (a deprecated
    /// API, a dropped field: see `client::WARNING_LOGGED_AS`).
    pub fn assert_healthy(&mut self) {
        self.assert_healthy_but_warned(&[]);
    }

    /// [`Self::assert_healthy`], but for API server warnings that contain one of `expected`
    /// (what a test's own input draws).
    pub fn assert_healthy_but_warned(&mut self, expected: &[&str]) {
        let unexpected: Vec<serde_json::Value> = self
            .log_lines()
            .into_iter()
            .filter(|l| l["message"] == podset_operator::client::WARNING_LOGGED_AS)
            .filter(|l| {
                let warning = l["warning"].as_str().unwrap_or_default();
                !expected.iter().any(|e| warning.contains(e))
            })
            .collect();
        assert!(
            unexpected.is_empty(),
            "the API server warned the operator: {unexpected:#?}"
        );
        assert!(
            self.process.exited().is_none(),
            "operator exited:\n{}",
            self.process.log_tail(50)
        );
        assert!(
            !self.log().contains("panicked"),
            "operator panicked:\n{}",
            self.process.log_tail(50)
        );
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if crate::failing() {
            eprintln!(
                "----- {} log -----\n{}",
                self.process.name,
                self.process.log_tail(80)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "starting" line as the operator writes it, in both log formats.
    #[test]
    fn the_ports_are_read_from_the_starting_line_in_json_and_in_colour() {
        let json = r#"{"level":"INFO","health_addr":"127.0.0.1:35589","message":"starting","metrics_addr":"127.0.0.1:32799","podset":true}"#;
        let text = "\u{1b}[2m2026-11-27T15:23:27Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m starting \u{1b}[3mmetrics_addr\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:33243 \u{1b}[3mhealth_addr\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:42309 \u{1b}[3mleader_elect\u{1b}[0m\u{1b}[2m=\u{1b}[0mfalse";
        for (line, metrics, health) in [(json, 32799, 35589), (text, 33243, 42309)] {
            let listening = Listening::from_line(line).expect(line);
            assert_eq!(
                (listening.metrics.port(), listening.health.port()),
                (metrics, health)
            );
        }
        assert!(Listening::from_line(r#"{"message":"became the leader"}"#).is_none());
    }
}
