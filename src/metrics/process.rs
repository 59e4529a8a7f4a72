//! client_golang's process metrics (`process_*`), read from `/proc/self` at scrape time:
//! kubebuilder's runtime dashboard and the usual alerts (memory, CPU, file descriptors
//! running out) read them, and controller-runtime exports them. Linux only: elsewhere, and
//! where `/proc` cannot be read, each metric is left out rather than made up.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The kernel's clock ticks a second as `/proc` counts CPU time (`USER_HZ`): 100 on every
/// Linux ABI, which Prometheus's own procfs assumes too.
const USER_HZ: f64 = 100.0;

#[derive(Debug, Default)]
pub(super) struct Process;

/// One reading of the process.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    threads: Option<i64>,
    start_time_seconds: Option<f64>,
    virtual_bytes: Option<i64>,
    resident_bytes: Option<i64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = read();
        if let Some(cpu) = s.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            let help = "Total user and system CPU time spent in seconds";
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                help,
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges: [(&str, &str, Option<f64>); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes.map(|b| b as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes.map(|b| b as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds.map(|n| n as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                s.threads.map(|n| n as f64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(metric)?;
            }
        }
        Ok(())
    }
}

fn read() -> Sample {
    let file = |path: &str| std::fs::read_to_string(path).ok();
    let mut sample = match (file("/proc/self/stat"), file("/proc/stat")) {
        (Some(stat), Some(system)) => parse_stat(&stat, boot_time(&system)),
        _ => Sample::default(),
    };
    sample.resident_bytes = file("/proc/self/status").and_then(|s| resident(&s));
    sample.max_fds = file("/proc/self/limits").and_then(|l| max_fds(&l));
    sample.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|fds| fds.count() as i64);
    sample
}

/// `/proc/self/stat`'s CPU time, threads, start time (its ticks since boot, after `btime`)
/// and virtual size. The fields after the command's name, which may hold spaces and
/// parentheses, are counted from its last `)`.
fn parse_stat(stat: &str, boot_time: Option<u64>) -> Sample {
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // Field n of proc(5) is fields[n - 3]: state is field 3.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let cpu = field(14)
        .zip(field(15))
        .map(|(u, s)| (u + s) as f64 / USER_HZ);
    let start = field(22)
        .zip(boot_time)
        .map(|(ticks, boot)| boot as f64 + ticks as f64 / USER_HZ);
    Sample {
        cpu_seconds: cpu,
        threads: field(20).map(|n| n as i64),
        start_time_seconds: start,
        virtual_bytes: field(23).map(|n| n as i64),
        ..Sample::default()
    }
}

/// `btime` of `/proc/stat`: when the host booted, in seconds since the epoch.
fn boot_time(system: &str) -> Option<u64> {
    system
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|t| t.trim().parse().ok())
}

/// `VmRSS` of `/proc/self/status`, in bytes (the file says kB).
fn resident(status: &str) -> Option<i64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of open files in `/proc/self/limits` (none if unlimited).
fn max_fds(limits: &str) -> Option<i64> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_as_client_golang_reads_them() {
        let stat = "10713 (my (odd) cmd) R 10709 10709 18579 0 -1 4194304 101 0 0 0 \
                    250 50 0 0 20 0 7 0 5177699 3133440 388 18446744073709551615 0";
        let s = parse_stat(stat, Some(1_795_847_276));
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.threads, Some(7));
        let started = s.start_time_seconds.unwrap_or_default();
        assert!(
            (started - (1_795_847_276.0 + 51_776.99)).abs() < 1e-3,
            "{started}"
        );
        assert_eq!(s.virtual_bytes, Some(3_133_440));
        assert_eq!(parse_stat("garbage", None), Sample::default());
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1795847276\n"),
            Some(1_795_847_276)
        );
        assert_eq!(
            resident("Name:\tx\nVmRSS:\t    2020 kB\n"),
            Some(2020 * 1024)
        );
        let limits = "Max cpu time  unlimited  unlimited  seconds\n\
                      Max open files            20000                40000                files\n";
        assert_eq!(max_fds(limits), Some(20_000));
        assert_eq!(max_fds("Max open files unlimited unlimited files"), None);
    }

    /// Read from this very process: what kubebuilder's runtime dashboard plots is there.
    #[test]
    fn this_process_is_measured() {
        let s = read();
        assert!(s.resident_bytes.is_some_and(|b| b > 1 << 20), "{s:?}");
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        assert!(
            s.max_fds.is_some_and(|n| n >= s.open_fds.unwrap_or(0)),
            "{s:?}"
        );
        assert!(s.threads.is_some_and(|n| n >= 1), "{s:?}");
        let now = jiff::Timestamp::now().as_second() as f64;
        let started = s.start_time_seconds.unwrap_or_default();
        assert!(started > now - 3600.0 && started <= now + 1.0, "{s:?}");
    }
}
