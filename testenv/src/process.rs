//! Child processes that never outlive the process that started them.
//!
//! Every child gets `PR_SET_PDEATHSIG(SIGKILL)`, so a test binary killed with SIGKILL (or
//! a panicking test whose `Drop` never runs) still takes its etcd and apiserver with it.
//! The kernel ties that signal to the *thread* that forked, so all forks happen on one
//! thread that lives as long as the process: tokio's blocking threads come and go.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawn the testenv spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` so that it dies with this process, in its own process group.
pub fn spawn_tied(mut cmd: Command) -> io::Result<Child> {
    // SAFETY: prctl and setpgid are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() == 1 {
                return Err(io::Error::other("parent exited before the child started"));
            }
            libc::setpgid(0, 0);
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .expect("spawner lock")
        .send((cmd, tx))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("spawner thread is gone"))?
}

/// A long-running component with its output in a log file.
pub struct Process {
    pub name: String,
    pub log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Process {
    pub fn new(name: &str, program: impl Into<PathBuf>, args: Vec<String>, log_dir: &Path) -> Self {
        Self {
            name: name.to_string(),
            log: log_dir.join(format!("{name}.log")),
            program: program.into(),
            args,
            env: Vec::new(),
            child: None,
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn start(&mut self) -> io::Result<()> {
        let log = File::options().create(true).append(true).open(&self.log)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = spawn_tied(cmd).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("starting {} ({}): {e}", self.name, self.program.display()),
            )
        })?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A hook that SIGKILLs the process's group at once, for a fault injector to fire at its
    /// chosen moment. The process stays this `Process`'s to reap (`stop_with`), so its pid
    /// cannot be reused meanwhile.
    pub fn killer(&self) -> Option<impl FnOnce() + Send + 'static> {
        let pgid = self.pid()? as i32;
        // SAFETY: a plain syscall on a process group we created.
        Some(move || unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        })
    }

    /// Whether the process has exited (and so needs looking at).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends `signal` and waits up to `grace` for the exit, then SIGKILLs the group. Returns
    /// the exit status if the process exited within `grace` by itself.
    pub fn stop_with(&mut self, signal: i32, grace: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pgid = child.id() as i32;
        // SAFETY: plain syscalls on a process group we created.
        unsafe { libc::kill(-pgid, signal) };
        let deadline = Instant::now() + grace;
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Anything else in the group (and the child itself, if it ignored `signal`).
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if status.is_none() {
            let _ = child.wait();
        }
        status
    }

    pub fn stop(&mut self) {
        self.stop_with(libc::SIGTERM, Duration::from_secs(5));
    }

    /// Whether the process is running (started and not yet exited).
    pub fn running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// The last `lines` lines of the log, for failure reports; after a Go crash, its first
    /// lines instead, which say why (the tail is a goroutine dump).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let crash = all
            .iter()
            .position(|l| l.starts_with("panic: ") || l.starts_with("fatal error: "));
        let from = crash.unwrap_or(all.len().saturating_sub(lines));
        all[from..all.len().min(from + lines)].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop_with(libc::SIGKILL, Duration::from_secs(2));
    }
}

/// A process's resident memory (VmRSS), in bytes; 0 if it is gone.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs `program` to completion in `dir` with `env` added; its stdout, or an error with its
/// status and output. Killed if the future is dropped (a test timing out).
pub async fn run_command(
    dir: &Path,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let out = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{program} {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_log(text: &str) -> (tempfile::TempDir, Process) {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = Process::new("c", "/bin/true", vec![], dir.path());
        std::fs::write(&p.log, text).expect("log written");
        (dir, p)
    }

    #[test]
    fn log_tail_is_the_last_lines() {
        let (_dir, p) = with_log("a\nb\nc\nd\n");
        assert_eq!(p.log_tail(2), "c\nd");
        assert_eq!(p.log_tail(9), "a\nb\nc\nd");
    }

    #[test]
    fn log_tail_of_a_go_crash_starts_at_its_reason() {
        let (_dir, p) =
            with_log("I1 ok\nfatal error: concurrent map writes\n\ngoroutine 1\nframe\nmore\n");
        assert_eq!(
            p.log_tail(3),
            "fatal error: concurrent map writes\n\ngoroutine 1"
        );
    }
}
