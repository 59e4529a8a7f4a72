//! The README's two walkthroughs, run as a user types them: every command of their `sh`
//! blocks, read from the README itself, through bash and kubectl, against the operator and a
//! real node. Each command has its check here, from the comment the README gives it; a
//! command the README gains or changes has none, and the test fails naming it, so the README
//! cannot drift from what the operator does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::namespace;
use testenv::harness::poll;

/// What a README command must show.
enum Check {
    /// Not run: the test's kubeconfig stands in for the one it exports.
    Skip,
    /// It exits 0.
    Runs,
    /// It exits 0, and within the deadline its output passes.
    Shows(fn(&str, &mut Notes) -> bool),
    /// It exits 0, and then another command's output passes (what the comment promises).
    Then(&'static str, fn(&str, &mut Notes) -> bool),
    /// A watch (`-w`): its lines, as they come, pass before the deadline.
    Watches(fn(&str) -> bool),
}

/// What one check saw that a later one compares with.
type Notes = BTreeMap<&'static str, Vec<String>>;

const DEADLINE: Duration = Duration::from_secs(150);

/// Every command of the walkthroughs, as the README writes it (its comment left out).
fn checks() -> Vec<(&'static str, Check)> {
    vec![
        (
            "export KUBECONFIG=$PWD/.local/cluster/kubeconfig",
            Check::Skip,
        ),
        (
            "kubectl apply -f config/samples/app_v1alpha1_podset.yaml",
            Check::Runs,
        ),
        ("kubectl get podset", Check::Shows(three_of_three)),
        (
            "kubectl get pods -l app=podset-sample",
            Check::Shows(three_running),
        ),
        (
            "kubectl get podset podset-sample -o yaml",
            Check::Shows(names_those_pods),
        ),
        (
            r#"kubectl patch podset podset-sample --type='json' -p '[{"op": "replace", "path": "/spec/replicas", "value":5}]'"#,
            Check::Then("kubectl get pods -l app=podset-sample", five_running),
        ),
        (
            "kubectl scale podset/podset-sample --replicas=1",
            Check::Runs,
        ),
        (
            "kubectl get pods -o yaml | grep ownerReferences -A10",
            Check::Shows(controlled_by_the_podset),
        ),
        (
            "kubectl describe podset podset-sample",
            Check::Shows(creates_and_deletes),
        ),
        (
            "kubectl delete podset podset-sample",
            Check::Then("kubectl get pods -l app=podset-sample -o name", |out, _| {
                out.trim().is_empty()
            }),
        ),
        (
            "kubectl apply -f config/samples/cnat_v1alpha1_at.yaml",
            Check::Runs,
        ),
        (
            "kubectl get at,pods",
            Check::Shows(|out, _| out.contains("DONE") && out.contains("Completed")),
        ),
        (
            "kubectl logs example-at-pod",
            Check::Shows(|out, _| out == "YAY\n"),
        ),
        (
            "kubectl describe at example-at",
            Check::Shows(|out, _| {
                ["Scheduled", "Started", "Succeeded"]
                    .iter()
                    .all(|r| out.contains(r))
            }),
        ),
        (
            "kubectl get at example-at -o yaml",
            Check::Shows(full_at_status),
        ),
        ("cat <<EOF | kubectl apply -f -", Check::Runs),
        (
            "kubectl get at in-a-minute -w",
            Check::Watches(pending_running_done),
        ),
        (
            "kubectl apply -f config/samples/cnat_v1beta1_at.yaml",
            Check::Runs,
        ),
        (
            "kubectl wait --for=condition=Ready at/example-at-v1beta1",
            Check::Shows(|out, _| out.contains("condition met")),
        ),
        (
            "kubectl get ats -o wide",
            Check::Shows(|out, _| {
                out.lines().any(|l| {
                    let cells: Vec<&str> = l.split_whitespace().collect();
                    cells.first() == Some(&"example-at-v1beta1")
                        && cells.contains(&"Europe/Berlin")
                        && cells.contains(&"DONE")
                        && cells.contains(&"Succeeded")
                })
            }),
        ),
    ]
}

/// The row of podset-sample: DESIRED, READY and AVAILABLE all 3.
fn three_of_three(out: &str, _: &mut Notes) -> bool {
    out.lines().any(|l| {
        let cells: Vec<&str> = l.split_whitespace().collect();
        cells.len() >= 4 && cells[0] == "podset-sample" && cells[1..4] == ["3", "3", "3"]
    })
}

fn running_pods(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with("podset-sample-pod") && l.contains(" Running "))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

fn three_running(out: &str, notes: &mut Notes) -> bool {
    let pods = running_pods(out);
    let done = pods.len() == 3 && out.lines().count() == 4;
    notes.insert("pods", pods);
    done
}

fn five_running(out: &str, _: &mut Notes) -> bool {
    running_pods(out).len() == 5
}

/// status.podNames, read as YAML, are the three Running pods seen before.
fn names_those_pods(out: &str, notes: &mut Notes) -> bool {
    let Ok(podset) = serde_yaml::from_str::<serde_yaml::Value>(out) else {
        return false;
    };
    let names: Vec<String> = podset["status"]["podNames"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    let mut seen = notes.get("pods").cloned().unwrap_or_default();
    seen.sort();
    !names.is_empty() && names == seen
}

fn controlled_by_the_podset(out: &str, _: &mut Notes) -> bool {
    let refs = out.matches("ownerReferences").count();
    refs >= 1
        && out.matches("kind: PodSet").count() >= refs
        && out.matches("controller: true").count() == refs
        && out.contains("name: podset-sample")
}

fn creates_and_deletes(out: &str, _: &mut Notes) -> bool {
    out.contains("SuccessfulCreate") && out.contains("SuccessfulDelete")
}

fn full_at_status(out: &str, _: &mut Notes) -> bool {
    [
        "podName:",
        "startTime:",
        "completionTime:",
        "succeeded: true",
        "conditions:",
    ]
    .iter()
    .all(|field| out.contains(field))
}

/// PENDING, then RUNNING, then DONE, in that order.
fn pending_running_done(out: &str) -> bool {
    let at = |phase| out.find(phase);
    matches!((at("PENDING"), at("RUNNING"), at("DONE")), (Some(p), Some(r), Some(d)) if p < r && r < d)
}

/// The `sh` blocks of the README's section `heading`, one command each (a here-document
/// with its lines), each without its comment.
fn commands(readme: &str, heading: &str) -> Vec<String> {
    let readme = format!("\n{readme}");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_default();
    let mut commands = vec![];
    let mut in_block = false;
    let mut heredoc: Option<String> = None;
    for line in section.lines() {
        match (in_block, line.trim_end()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, l) if heredoc.is_some() => {
                let doc = heredoc.as_mut().expect("checked");
                doc.push('\n');
                doc.push_str(l);
                if l == "EOF" {
                    commands.extend(heredoc.take());
                }
            }
            (true, l) if l.contains("<<EOF") => heredoc = Some(l.to_string()),
            (true, l) if !l.trim().is_empty() && !l.starts_with('#') => {
                commands.push(without_comment(l).to_string());
            }
            _ => {}
        }
    }
    commands
}

fn without_comment(line: &str) -> &str {
    match line.find("  #").or_else(|| line.find(" # ")) {
        Some(at) => line[..at].trim_end(),
        None => line,
    }
}

/// Runs `command` with bash from the repository, kubectl on its PATH, `kubeconfig` its
/// KUBECONFIG; its stdout, or its stderr as the error.
async fn bash(command: &str, kubeconfig: &Path) -> Result<String> {
    let out = shell(command, kubeconfig).output().await?;
    ensure!(
        out.status.success(),
        "`{command}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn shell(command: &str, kubeconfig: &Path) -> tokio::process::Command {
    let kubectl: PathBuf = testenv::versions::kubectl();
    let bin = kubectl.parent().expect("kubectl is in a directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tokio::process::Command::new("bash");
    cmd.args(["-c", command])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .kill_on_drop(true);
    cmd
}

/// Polls `command` until `check` passes on its output.
async fn until(
    command: &str,
    kubeconfig: &Path,
    check: fn(&str, &mut Notes) -> bool,
    notes: &mut Notes,
) -> Result<()> {
    let notes = std::sync::Mutex::new(notes);
    let last = std::sync::Mutex::new(String::new());
    poll(DEADLINE, command, || async {
        let out = bash(command, kubeconfig).await?;
        let passed = check(&out, &mut notes.lock().expect("not poisoned"));
        *last.lock().expect("not poisoned") = out;
        Ok(passed)
    })
    .await
    .with_context(|| format!("it last printed:\n{}", last.lock().expect("not poisoned")))
}

/// Runs a watch until its lines pass `check`, then stops it.
async fn watch(command: &str, kubeconfig: &Path, check: fn(&str) -> bool) -> Result<()> {
    let mut child = shell(command, kubeconfig).stdout(Stdio::piped()).spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    let mut seen = String::new();
    let watched = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            seen.push_str(&line);
            seen.push('\n');
            if check(&seen) {
                return Ok(());
            }
        }
        bail!("the watch ended")
    })
    .await;
    child.kill().await?;
    match watched {
        Ok(result) => result.with_context(|| format!("`{command}` printed:\n{seen}")),
        Err(_) => bail!("`{command}` did not pass in {DEADLINE:?}; it printed:\n{seen}"),
    }
}

/// The README's PodSet and At walkthroughs, command by command, in a namespace of their own
/// (the kubeconfig's context names it, as a user's would) with the operator watching it.
#[tokio::test]
async fn the_readmes_walkthroughs_run_as_written() -> Result<()> {
    let ns = namespace("readme").await?;
    let _op = ns.start_operator(&[]).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(ns.cluster.kubeconfig(), &kubeconfig)?;
    bash(
        &format!(
            "kubectl config set-context --current --namespace={}",
            ns.name
        ),
        &kubeconfig,
    )
    .await?;

    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))?;
    let mut written: Vec<String> = commands(&readme, "The PodSet walkthrough");
    written.extend(commands(&readme, "The At walkthrough"));
    let checks: BTreeMap<&str, Check> = checks().into_iter().collect();
    let mut unrun: std::collections::BTreeSet<&str> = checks.keys().copied().collect();
    let mut notes = Notes::new();
    for command in &written {
        let first = command.lines().next().unwrap_or_default();
        let check = checks.get(first).with_context(|| {
            format!("the README's `{first}` has no check in tests/real_node/readme.rs")
        })?;
        unrun.remove(first);
        println!("$ {first}");
        match check {
            Check::Skip => {}
            Check::Runs => drop(bash(command, &kubeconfig).await?),
            Check::Shows(check) => until(command, &kubeconfig, *check, &mut notes).await?,
            Check::Then(then, check) => {
                bash(command, &kubeconfig).await?;
                until(then, &kubeconfig, *check, &mut notes).await?;
            }
            Check::Watches(check) => watch(command, &kubeconfig, *check).await?,
        }
    }
    ensure!(
        unrun.is_empty(),
        "commands no longer in the README: {unrun:?}"
    );
    Ok(())
}

#[test]
fn the_readme_is_read_as_commands() {
    let readme = "## The At walkthrough\n\ntext\n\n```sh\nkubectl get at   # says\n# a comment\n\ncat <<EOF | kubectl apply -f -\nkind: At\nEOF\nkubectl logs x\n```\n\n## Next\n```sh\nnot this\n```\n";
    assert_eq!(
        commands(readme, "The At walkthrough"),
        [
            "kubectl get at",
            "cat <<EOF | kubectl apply -f -\nkind: At\nEOF",
            "kubectl logs x"
        ]
    );
}
