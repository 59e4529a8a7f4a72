//! A user who already has a cluster builds nothing they do not need (issue 46): `make install`
//! and `make uninstall` run kubectl alone, with neither cargo nor Go on the PATH and none of
//! our builds cached; `make run` checks the Rust toolchain alone before it builds the operator
//! (`make rust-deps`), where the local cluster's `make deps` asks for Go.

use super::*;

/// `make TARGET` from the repository with `path` as the whole PATH, an empty cache directory
/// (none of our builds) and `kubeconfig`: its status, and what it printed. The Rust
/// toolchain's own settings (HOME, RUSTUP_HOME, CARGO_HOME) pass through.
async fn make(target: &str, path: &str, kubeconfig: &Path, cache: &Path) -> Result<(bool, String)> {
    let mut command = tokio::process::Command::new("/usr/bin/make");
    command.arg(target).current_dir(repo()).env_clear();
    for kept in ["HOME", "RUSTUP_HOME", "CARGO_HOME"] {
        if let Ok(value) = std::env::var(kept) {
            command.env(kept, value);
        }
    }
    let out = command
        .env("PATH", path)
        .env("XDG_CACHE_HOME", cache)
        .env("KUBECONFIG", kubeconfig)
        .kill_on_drop(true)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

#[tokio::test]
async fn make_install_and_run_need_no_go_and_install_no_cargo() -> Result<()> {
    // make install/uninstall write the CRDs every other test here reads.
    let _crds = CRDS.write().await;
    let cluster = cluster().await?;
    let kc = cluster.kubeconfig();
    let dir = tempfile::tempdir()?;
    let (bin, cache) = (dir.path().join("bin"), dir.path().join("cache"));
    std::fs::create_dir_all(&bin)?;
    std::fs::create_dir_all(&cache)?;
    std::os::unix::fs::symlink(testenv::versions::kubectl(), bin.join("kubectl"))?;
    let kubectl_only = format!("{}:/usr/bin:/bin", bin.display());
    for absent in ["cargo", "go"] {
        ensure!(
            which(absent, &kubectl_only).is_none(),
            "{absent} is on the PATH {kubectl_only}: the test proves nothing"
        );
    }

    let began = std::time::Instant::now();
    let (ok, out) = make("install", &kubectl_only, kc, &cache).await?;
    ensure!(ok, "make install failed:\n{out}");
    println!("make install with kubectl alone: {:?}", began.elapsed());
    wait_crds_established(kc).await?;
    let (ok, out) = make("uninstall", &kubectl_only, kc, &cache).await?;
    ensure!(ok, "make uninstall failed:\n{out}");
    let crds = [
        "crd/podsets.app.example.com",
        "crd/ats.cnat.programming-kubernetes.info",
    ];
    let left = kubectl(kc, &[&["get", "--ignore-not-found"][..], &crds].concat()).await?;
    ensure!(left.trim().is_empty(), "make uninstall left {left}");

    let cargo = which("cargo", &std::env::var("PATH")?).context("cargo is not on the PATH")?;
    let rust_only = format!(
        "{}:{kubectl_only}",
        cargo.parent().context("cargo's dir")?.display()
    );
    let (ok, out) = make("rust-deps", &rust_only, kc, &cache).await?;
    ensure!(ok, "make rust-deps wants more than Rust:\n{out}");
    let (ok, out) = make("deps", &rust_only, kc, &cache).await?;
    ensure!(
        !ok && out.contains("go not found"),
        "make deps without Go:\n{out}"
    );
    let makefile = std::fs::read_to_string(repo().join("Makefile"))?;
    ensure!(
        makefile.lines().any(|l| l.starts_with("run: rust-deps ##")),
        "make run must ask for the Rust toolchain alone"
    );
    Ok(())
}

/// Where `program` is on `path`, if anywhere.
fn which(program: &str, path: &str) -> Option<PathBuf> {
    path.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}
