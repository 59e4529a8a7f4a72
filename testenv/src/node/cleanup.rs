//! Tearing a real node down so that it leaves nothing: no process, no mount, no interface.
//!
//! Stopping the kubelet and containerd is not enough (each trap seen on these machines):
//! containerd's shims outlive it, pod processes outlive their shim, network namespaces
//! and the kubelet's tmpfs mounts outlive the processes. So, once both have stopped: kill
//! every process in the node's container cgroups (found through its containerd state dir,
//! so another node's containers are never touched), then its shims (found by the node's
//! socket in their arguments), unmount everything under the node's dir, delete the bridge
//! (the veths went with their namespaces), and remove the emptied cgroups. The same path
//! cleans up after a test that was killed half-way (see [`sweep`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a node leaves on the machine, recorded when it starts so that a later run can
/// clean up after a test process that died without its `Drop`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Footprint {
    /// The process that owns the node (its test binary or local-cluster).
    pub owner: u32,
    pub dir: PathBuf,
    pub bridge: String,
}

/// Where footprints are recorded: one file per node, removed after its teardown.
fn footprints_dir() -> PathBuf {
    PathBuf::from("/run/podset-testenv/nodes")
}

impl Footprint {
    fn file(&self) -> PathBuf {
        footprints_dir().join(format!("{}.json", self.bridge))
    }

    pub fn record(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(footprints_dir())?;
        std::fs::write(self.file(), serde_json::to_vec(self)?)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// Removes what the node left; call once its kubelet and containerd have stopped.
    pub fn tear_down(&self) {
        let containers = container_ids(&self.dir.join("containerd/state"));
        // A dying parent can fork: kill until none is left.
        kill_until_gone(Duration::from_secs(10), || {
            containers
                .iter()
                .flat_map(|id| cgroup_dirs(id))
                .flat_map(|cg| pids_in(&cg))
                .collect()
        });
        let socket = self.socket().to_string_lossy().into_owned();
        kill_until_gone(Duration::from_secs(5), || processes_with_arg(&socket));
        unmount_under(&self.dir);
        super::network::Bridge::delete(&self.bridge);
        for id in &containers {
            for cg in cgroup_dirs(id) {
                let _ = std::fs::remove_dir(cg);
            }
        }
        let _ = std::fs::remove_file(self.file());
    }
}

/// Tears down the nodes of owners that are gone (a test binary killed with SIGKILL).
pub fn sweep() {
    let Ok(entries) = std::fs::read_dir(footprints_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(fp) = std::fs::read(entry.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<Footprint>(&b).ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{}", fp.owner)).exists() {
            eprintln!(
                "testenv: cleaning up node {} left by process {}",
                fp.dir.display(),
                fp.owner
            );
            fp.tear_down();
            let _ = std::fs::remove_dir_all(&fp.dir);
        }
    }
}

/// The containers (pod sandboxes included) containerd ran from this state dir.
fn container_ids(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("io.containerd.runtime.v2.task/k8s.io"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A container's cgroup in every v1 hierarchy (containerd puts it at `/k8s.io/<id>`).
fn cgroup_dirs(id: &str) -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.flatten()
                .map(|e| e.path().join("k8s.io").join(id))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn pids_in(cgroup: &Path) -> Vec<i32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILLs the processes of one container (`containerd://<id>` or `<id>`), as the
/// kernel's OOM killer or a crash would end them; how many there were.
pub fn kill_container(container_id: &str) -> usize {
    let id = container_id.trim_start_matches("containerd://");
    let pids: Vec<i32> = cgroup_dirs(id).iter().flat_map(|cg| pids_in(cg)).collect();
    for pid in &pids {
        // SAFETY: a plain syscall; the pid is in the container's own cgroup.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    pids.len()
}

/// SIGKILLs what `find` returns (processes of this node's containers, or its shims, by
/// how they were found) until it returns nothing or `within` has passed.
fn kill_until_gone(within: Duration, find: impl Fn() -> Vec<i32>) {
    let deadline = Instant::now() + within;
    loop {
        let pids = find();
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            // SAFETY: a plain syscall on a process `find` attributed to this node.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes whose command line contains `needle` as one argument.
pub fn processes_with_arg(needle: &str) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == needle.as_bytes()))
        })
        .collect()
}

/// Unmounts (lazily, deepest first) every mount point under `dir`.
fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let Ok(c) = std::ffi::CString::new(p) else {
            continue;
        };
        // SAFETY: umount2 with a valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}
