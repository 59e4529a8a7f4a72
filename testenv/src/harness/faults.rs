//! The fault tests' random source, repeatable from its printed seed.

/// The random source of a fault test: seeded from `PODSET_FAULT_SEED` when set, else at
/// random; the seed is printed, and the test's output is shown when it fails, so a failing
/// run can be repeated.
pub fn seeded_rng(test: &str) -> fastrand::Rng {
    let seed = std::env::var("PODSET_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("{test}: random choices from seed {seed} (repeat with PODSET_FAULT_SEED={seed})");
    fastrand::Rng::with_seed(seed)
}
