//! Heap profiles of the operator with heaptrack (Debian's `heaptrack` package): the operator
//! runs with heaptrack's preload library, and is killed at the moment to look at, so that
//! what heaptrack reports as "leaked" is exactly what was live then.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

const PRELOAD: &str = "/usr/lib/heaptrack/libheaptrack_preload.so";
const INTERPRET: &str = "/usr/lib/heaptrack/libexec/heaptrack_interpret";

/// Where a profile of `name` is recorded, under target/bench/heap.
pub fn raw_path(name: &str) -> Result<PathBuf> {
    if !Path::new(PRELOAD).exists() {
        bail!("--heap-profile needs heaptrack (apt-get install heaptrack)");
    }
    let dir = PathBuf::from("target/bench/heap");
    std::fs::create_dir_all(&dir)?;
    Ok(std::path::absolute(dir.join(format!("{name}.raw")))?)
}

/// The environment that makes a process record its allocations to `raw`.
pub fn recording(raw: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", PRELOAD.into()),
        ("DUMP_HEAPTRACK_OUTPUT", raw.to_string_lossy().into_owned()),
    ]
}

/// Turns a raw recording into heaptrack's own format (read with `heaptrack_print` or
/// `heaptrack_gui`) and prints its totals: the peak heap, and what was live at the kill.
pub fn finish(raw: &Path) -> Result<PathBuf> {
    let out = raw.with_extension("gz");
    let script = format!(
        "{INTERPRET} < '{}' | gzip > '{}'",
        raw.display(),
        out.display()
    );
    let status = std::process::Command::new("sh")
        .args(["-c", &script])
        .status()?;
    if !status.success() {
        bail!("heaptrack_interpret failed on {}", raw.display());
    }
    std::fs::remove_file(raw)?;
    let summary = std::process::Command::new("heaptrack_print")
        .args(["--print-leaks", "--print-peaks=false"])
        .args(["--print-allocators=false", "--print-temporary=false"])
        .arg(&out)
        .output()
        .context("heaptrack_print")?;
    let text = String::from_utf8_lossy(&summary.stdout);
    for line in text.lines().filter(|l| totals(l)) {
        eprintln!("[bench]   heap: {line}");
    }
    eprintln!("[bench]   heap profile: {}", out.display());
    Ok(out)
}

fn totals(line: &str) -> bool {
    [
        "peak heap memory consumption",
        "peak RSS",
        "total memory leaked",
    ]
    .iter()
    .any(|t| line.starts_with(t))
}
