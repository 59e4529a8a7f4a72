//! What the benchmarks read off the system: a process's memory and CPU from /proc, and the
//! API server's own count of mutating requests.

use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;

#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStats {
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    pub cpu_seconds: f64,
}

pub fn proc_stats(pid: u32) -> Result<ProcStats> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ProcStats {
        rss_kib: field("VmRSS:"),
        peak_rss_kib: field("VmHWM:"),
        cpu_seconds: (ticks(11) + ticks(12)) as f64 / hz,
    })
}

/// Least-squares slope of RSS over time, in KiB per minute.
pub fn slope_kib_per_minute(samples: &[(Duration, u64)]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let xs: Vec<f64> = samples
        .iter()
        .map(|(t, _)| t.as_secs_f64() / 60.0)
        .collect();
    let ys: Vec<f64> = samples.iter().map(|(_, r)| *r as f64).collect();
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let cov: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}

const MUTATING: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// The API server's count of mutating requests served so far (all clients).
pub async fn apiserver_mutations(client: &Client) -> Result<f64> {
    let text = apiserver_metrics(client).await?;
    Ok(metric_sum(&text, "apiserver_request_total", |labels| {
        MUTATING
            .iter()
            .any(|v| labels.contains(&format!("verb=\"{v}\"")))
    }))
}

/// The API server's `/metrics` (Prometheus text), read as the admin.
pub async fn apiserver_metrics(client: &Client) -> Result<String> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(req).await?)
}

/// The pod watches open on the API server (its `apiserver_longrunning_requests`), all clients'.
pub async fn pod_watches(client: &Client) -> Result<f64> {
    let text = apiserver_metrics(client).await?;
    Ok(metric_sum(&text, "apiserver_longrunning_requests", |l| {
        l.contains("verb=\"WATCH\"") && l.contains("resource=\"pods\"")
    }))
}

/// The sum over the series of metric `name` in Prometheus `text` whose labels (`{...}`, as
/// written) `keep` accepts; 0 if none (a counter's series appears at its first count).
pub fn metric_sum(text: &str, name: &str, keep: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(labels, _)| keep(labels))
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        // Not `sum()`, whose empty sum is -0, printed "-0".
        .fold(0.0, |total, v| total + v)
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// The `q` quantile (0..=1) of `values`, nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
        let flat: Vec<_> = (0..10)
            .map(|i| (Duration::from_secs(i * 60), 100))
            .collect();
        assert_eq!(slope_kib_per_minute(&flat), 0.0);
        let rising: Vec<_> = (0..10)
            .map(|i| (Duration::from_secs(i * 60), 100 + 5 * i))
            .collect();
        assert!((slope_kib_per_minute(&rising) - 5.0).abs() < 1e-9);
    }

    #[test]
    fn metric_sums() {
        let text = "\
# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code=\"201\",verb=\"POST\"} 1000
apiserver_request_total{code=\"200\",verb=\"GET\"} 7
apiserver_request_total{code=\"429\",verb=\"POST\"} 2.5e+01
apiserver_request_total_extra{verb=\"POST\"} 99
apiserver_request_total 3
";
        let posts = |labels: &str| labels.contains("verb=\"POST\"");
        assert_eq!(metric_sum(text, "apiserver_request_total", posts), 1025.0);
        assert_eq!(
            metric_sum(text, "apiserver_request_total", |_| true),
            1032.0
        );
        let none = metric_sum(text, "absent_total", |_| true);
        assert_eq!(format!("{none}"), "0");
    }
}
