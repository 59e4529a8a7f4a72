//! What the command line's values may be, checked as they are parsed: a value the operator
//! could only fail on later (a namespace no request can name, an empty identity, a filter
//! that does not parse) is refused at start, and clap's error names the flag.

use std::net::SocketAddr;

use tracing_subscriber::EnvFilter;

/// A namespace name: an RFC 1123 label.
pub fn namespace(value: &str) -> Result<String, String> {
    dns_label(value).map_err(|why| format!("not a namespace name: {why}"))?;
    Ok(value.to_string())
}

/// A Lease name: an RFC 1123 subdomain.
pub fn lease_name(value: &str) -> Result<String, String> {
    if value.len() > 253 {
        return Err(format!(
            "a Lease name has at most 253 characters, not {}",
            value.len()
        ));
    }
    for label in value.split('.') {
        dns_label(label).map_err(|why| format!("not a Lease name: {why}"))?;
    }
    Ok(value.to_string())
}

/// This instance's name: it is the Lease's holder and the events' reporting instance, which
/// the API server takes up to 128 characters; client-go refuses an empty one too.
pub fn instance(value: &str) -> Result<String, String> {
    match value.chars().count() {
        0 => Err("an instance needs a name (the Lease holder and the events' reporter)".into()),
        n if n > 128 => Err(format!("at most 128 characters, not {n}")),
        _ if value.trim() != value || value.chars().any(char::is_control) => {
            Err("no surrounding spaces or control characters".into())
        }
        _ => Ok(value.to_string()),
    }
}

/// A log filter: a level as people write it (`info`, `WARN`, `warning`), or `RUST_LOG`'s
/// directives (`warn,podset_operator=debug`) with levels so written; as `RUST_LOG` takes it.
/// A bare word that is no level is refused: `RUST_LOG` would read `warning` as a target and
/// drop every line.
pub fn log_filter(value: &str) -> Result<String, String> {
    let directives = value
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(directive)
        .collect::<Result<Vec<_>, _>>()?;
    let filter = directives.join(",");
    EnvFilter::try_new(&filter).map_err(|e| {
        format!("not a log filter ({e}); for example `info` or `podset_operator=debug,kube=warn`")
    })?;
    Ok(filter)
}

/// One directive of a log filter, its level spelled as `EnvFilter` takes it.
fn directive(d: &str) -> Result<String, String> {
    const LEVELS: &str = "trace, debug, info, warn (or warning), error or off";
    if d.contains('[') {
        // A span filter (`target[span{field=value}]=level`): as written.
        return Ok(d.to_string());
    }
    match d.rsplit_once('=') {
        Some((target, level)) => match level_of(level) {
            Some(level) => Ok(format!("{target}={level}")),
            None => Err(format!(
                "{level:?} (for {target}) is not a log level: {LEVELS}"
            )),
        },
        None => level_of(d).map(String::from).ok_or_else(|| {
            format!("{d:?} is not a log level: {LEVELS}; or TARGET=LEVEL, as `kube=debug`")
        }),
    }
}

fn level_of(word: &str) -> Option<&'static str> {
    Some(match word.trim().to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" => "error",
        "off" => "off",
        _ => return None,
    })
}

/// An address to listen on: `IP:PORT`, or `:PORT` for every interface of both families (as
/// controller-runtime's flags take it; `[::]`, which the listener makes dual-stack).
pub fn bind_address(value: &str) -> Result<SocketAddr, String> {
    let spelled = match value.strip_prefix(':') {
        Some(port) => format!("[::]:{port}"),
        None => value.to_string(),
    };
    spelled
        .parse()
        .map_err(|_| format!("{value:?} is not IP:PORT (0.0.0.0:8443, [::]:8443) or :PORT"))
}

fn dns_label(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    ok.then_some(()).ok_or_else(|| {
        format!("{value:?} must be 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_api_servers() {
        for good in ["default", "team-a", "a", &"x".repeat(63)] {
            assert!(namespace(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Team-A",
            "team_a",
            "-a",
            "a-",
            "a.b",
            &"x".repeat(64),
            " a",
        ] {
            assert!(namespace(bad).is_err(), "{bad:?}");
        }
        assert!(lease_name("podset-operator-leader").is_ok());
        assert!(lease_name("leader.example.com").is_ok());
        for bad in ["", "a..b", "Leader", ".a", &"a.".repeat(130)] {
            assert!(lease_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_instance_is_named_within_what_events_take() {
        assert!(instance("podset-operator-7d9f-abc12").is_ok());
        for bad in ["", " pod", "pod\n", &"x".repeat(129)] {
            assert!(instance(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_address_is_ip_and_port_or_a_port_alone() {
        assert_eq!(
            bind_address(":8443"),
            Ok(SocketAddr::from(([0u16; 8], 8443)))
        );
        assert_eq!(
            bind_address("127.0.0.1:1"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 1)))
        );
        assert!(bind_address("[::]:8081").is_ok());
        for bad in ["", "8443", ":", ":http", "localhost:8443", "0.0.0.0:70000"] {
            assert!(bind_address(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_log_filter_must_parse() {
        assert!(log_filter("info,[").is_err());
    }

    /// Issue 46: `--log-level=warning` was read as a log target, and every line dropped.
    #[test]
    fn log_levels_are_read_as_people_write_them() {
        for (written, read) in [
            ("info", "info"),
            ("warning", "warn"),
            ("WARN", "warn"),
            (" Error ", "error"),
            (
                "warning,podset_operator=DEBUG",
                "warn,podset_operator=debug",
            ),
            ("podset_operator::start=info", "podset_operator::start=info"),
            (
                "info,kube[list{name=x}]=debug",
                "info,kube[list{name=x}]=debug",
            ),
        ] {
            assert_eq!(log_filter(written).as_deref(), Ok(read), "{written}");
        }
        for (bad, says) in [
            ("warnings", "\"warnings\" is not a log level"),
            ("kube", "TARGET=LEVEL"),
            ("kube=loud", "\"loud\" (for kube) is not a log level"),
        ] {
            let error = log_filter(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
