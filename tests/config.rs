//! Issue 31, item 3: every flag of `podset-operator run`, and its environment variable, with
//! empty, malformed and out-of-range values. Each is refused at start by an error naming the
//! flag (exit 2, before anything else), or taken as the documented default or spelling. No
//! cluster: a value that is taken lets the operator go on to look for credentials, which a
//! missing kubeconfig ends (exit 1).

use std::process::Command;

/// What must become of a value.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Exit 2, the error naming the flag and saying this.
    Refused(&'static str),
    /// Taken (documented): the operator goes on.
    Taken,
}
use Expect::{Refused, Taken};

/// (flag, environment variable, value, what must become of it). The documented defaults
/// taken: an empty namespace watches all, a concurrency of 0 is unbounded, `:PORT` listens on
/// every interface.
#[rustfmt::skip]
const TABLE: &[(&str, &str, &str, Expect)] = &[
    ("namespace", "WATCH_NAMESPACE", "", Taken),
    ("namespace", "WATCH_NAMESPACE", "team-a", Taken),
    ("namespace", "WATCH_NAMESPACE", "team-b, team-a", Taken),
    ("namespace", "WATCH_NAMESPACE", "team-a,,team-b", Refused("not a namespace name")),
    ("namespace", "WATCH_NAMESPACE", "team-a,Team_B", Refused("not a namespace name")),
    ("namespace", "WATCH_NAMESPACE", "Team_A", Refused("not a namespace name")),
    ("namespace", "WATCH_NAMESPACE", " ", Refused("not a namespace name")),
    ("namespace", "WATCH_NAMESPACE", "a.b", Refused("not a namespace name")),
    ("controllers", "CONTROLLERS", "at", Taken),
    ("controllers", "CONTROLLERS", "podset,at", Taken),
    ("controllers", "CONTROLLERS", "", Refused("")),
    ("controllers", "CONTROLLERS", "podsets", Refused("possible values")),
    ("concurrency", "CONCURRENCY", "0", Taken),
    ("concurrency", "CONCURRENCY", "-1", Refused("")),
    ("concurrency", "CONCURRENCY", "70000", Refused("")),
    ("concurrency", "CONCURRENCY", "ten", Refused("invalid digit")),
    ("at-concurrency", "AT_CONCURRENCY", "0", Taken),
    ("at-concurrency", "AT_CONCURRENCY", "-1", Refused("")),
    ("at-concurrency", "AT_CONCURRENCY", "70000", Refused("")),
    ("resync-period-seconds", "RESYNC_PERIOD_SECONDS", "0", Refused("1..=86400")),
    ("resync-period-seconds", "RESYNC_PERIOD_SECONDS", "86401", Refused("1..=86400")),
    ("resync-period-seconds", "RESYNC_PERIOD_SECONDS", "18446744073709551615", Refused("1..=86400")),
    ("max-mutating-requests", "MAX_MUTATING_REQUESTS", "0", Refused("1..=10000")),
    ("max-mutating-requests", "MAX_MUTATING_REQUESTS", "10001", Refused("1..=10000")),
    ("metrics-bind-address", "METRICS_BIND_ADDRESS", ":9443", Taken),
    ("metrics-bind-address", "METRICS_BIND_ADDRESS", "127.0.0.1:9443", Taken),
    ("metrics-bind-address", "METRICS_BIND_ADDRESS", "9443", Refused("is not IP:PORT")),
    ("metrics-bind-address", "METRICS_BIND_ADDRESS", "localhost:9443", Refused("is not IP:PORT")),
    ("metrics-bind-address", "METRICS_BIND_ADDRESS", "", Refused("")),
    ("metrics-secure", "METRICS_SECURE", "yes", Refused("possible values")),
    ("metrics-secure", "METRICS_SECURE", "", Refused("")),
    ("metrics-cert-dir", "METRICS_CERT_DIR", "", Refused("")),
    ("health-probe-bind-address", "HEALTH_PROBE_BIND_ADDRESS", ":8082", Taken),
    ("health-probe-bind-address", "HEALTH_PROBE_BIND_ADDRESS", "0.0.0.0", Refused("is not IP:PORT")),
    ("leader-elect", "LEADER_ELECT", "fasle", Refused("'fasle'")),
    ("leader-elect", "LEADER_ELECT", "1", Refused("'1'")),
    ("warm-standby", "WARM_STANDBY", "yes", Refused("possible values")),
    ("warm-standby", "WARM_STANDBY", "false", Taken),
    ("leader-election-id", "LEADER_ELECTION_ID", "", Refused("not a Lease name")),
    ("leader-election-id", "LEADER_ELECTION_ID", "Leader", Refused("not a Lease name")),
    ("leader-election-id", "LEADER_ELECTION_ID", "leader.example.com", Taken),
    ("leader-election-namespace", "LEADER_ELECTION_NAMESPACE", "", Refused("not a namespace name")),
    ("leader-election-namespace", "LEADER_ELECTION_NAMESPACE", "Kube-System", Refused("not a namespace name")),
    ("lease-duration-seconds", "LEASE_DURATION_SECONDS", "1", Refused("2..=3600")),
    ("lease-duration-seconds", "LEASE_DURATION_SECONDS", "3601", Refused("2..=3600")),
    ("shutdown-timeout-seconds", "SHUTDOWN_TIMEOUT_SECONDS", "0", Taken),
    ("shutdown-timeout-seconds", "SHUTDOWN_TIMEOUT_SECONDS", "3601", Refused("0..=3600")),
    ("shutdown-timeout-seconds", "SHUTDOWN_TIMEOUT_SECONDS", "-1", Refused("")),
    ("log-format", "LOG_FORMAT", "yaml", Refused("possible values")),
    ("log-level", "LOG_LEVEL", "podset_operator=debug,kube=warn", Taken),
    ("log-level", "LOG_LEVEL", "info,[", Refused("not a log filter")),
    ("log-level", "LOG_LEVEL", "warning", Taken),
    ("log-level", "LOG_LEVEL", "WARN", Taken),
    ("log-level", "LOG_LEVEL", "warnings", Refused("is not a log level")),
    ("instance", "POD_NAME", "", Refused("needs a name")),
    ("instance", "POD_NAME", " pod", Refused("no surrounding spaces")),
];

/// Runs `podset-operator run` with `args` and `env`, no cluster: its exit code and stderr.
fn run(args: &[String], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_podset-operator"));
    // It looks for credentials before it binds its ports: none is bound here.
    cmd.arg("run")
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST");
    for var in TABLE.iter().map(|row| row.1) {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("the operator binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether `(code, stderr)` is what `expect` says for `--flag`; why not if not.
fn judge(flag: &str, expect: Expect, (code, stderr): &(Option<i32>, String)) -> Option<String> {
    let ok = match expect {
        Taken => *code == Some(1) && stderr.contains("finding Kubernetes credentials"),
        Refused(part) => {
            *code == Some(2) && stderr.contains(&format!("'--{flag}")) && stderr.contains(part)
        }
    };
    (!ok).then(|| {
        format!(
            "exit {code:?}: {}",
            stderr.lines().next().unwrap_or_default()
        )
    })
}

#[test]
fn every_flag_and_variable_refuses_bad_values_by_name_or_takes_its_documented_default() {
    let mut failures = Vec::new();
    for &(flag, var, value, expect) in TABLE {
        let by_flag = run(&[format!("--{flag}={value}")], &[]);
        let by_env = run(&[], &[(var, value)]);
        for (how, outcome) in [("flag", by_flag), ("env", by_env)] {
            let verdict = judge(flag, expect, &outcome);
            println!(
                "{how:<4} {flag:<26} {value:<22?} {:<28} {}",
                format!("{expect:?}"),
                verdict.as_deref().unwrap_or("ok")
            );
            if let Some(why) = verdict {
                failures.push(format!(
                    "{how} --{flag}={value:?} ({var}): expected {expect:?}, {why}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
