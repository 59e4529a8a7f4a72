//! A seed replays from one command only if every run of it takes the same path. Each run is
//! a process of its own, as the search runs it (`in_a_process`: tokio seeds each runtime from
//! a process-wide counter, so two runs in one process differ); run a few seeds twice as
//! `make sim SEED=S` does and compare their traces line by line (issue 47: nothing showed it).

use std::process::Command;

/// The trace and verdict `make sim SEED=seed` prints.
fn replay(seed: u64) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_podset-sim"))
        .args(["--seed", &seed.to_string()])
        .output()
        .expect("the simulation runs");
    String::from_utf8_lossy(&out.stdout)
        .split(['\n', '\r'])
        .map(String::from)
        .collect()
}

#[test]
fn a_seed_run_twice_takes_the_same_path() {
    // Seeds whose runs had faults of every kind, failovers and Ats among them.
    for seed in [1, 2, 1_007_716, 1_046_712] {
        let (first, second) = (replay(seed), replay(seed));
        assert!(
            first.len() > 100,
            "seed {seed}: a trace of {} lines",
            first.len()
        );
        let diverged = first.iter().zip(&second).position(|(a, b)| a != b);
        if let Some(i) = diverged.filter(|&i| !first[i].starts_with("seeds:")) {
            panic!(
                "seed {seed} diverged at line {i}:\n  first:  {}\n  second: {}",
                first[i], second[i]
            );
        }
        assert_eq!(first.len(), second.len(), "seed {seed}");
    }
}
