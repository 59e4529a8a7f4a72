//! Randomised delays: clients and objects that failed together must not retry together.

use std::time::Duration;

/// A delay between half of `delay` and all of it ("equal jitter"): never more than asked, and
/// never so short that a backoff loses its meaning.
pub fn jittered(delay: Duration) -> Duration {
    let half = delay / 2;
    half + half.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_half_and_all_of_the_delay() {
        let d = Duration::from_secs(8);
        for _ in 0..100 {
            let j = jittered(d);
            assert!(j >= d / 2 && j <= d, "{j:?}");
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
