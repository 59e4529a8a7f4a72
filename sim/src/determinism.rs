//! Every run of a seed takes the same path, so that a failing seed replays from one command.
//!
//! A run is one thread with one current-thread tokio runtime on paused time: tasks run in a
//! fixed order, and time moves only when every task waits. What is left is randomness the
//! code draws for itself, each source seeded from the run's seed:
//! - `fastrand`'s thread-local generator (the operator's pod names and jitter, backoffs);
//! - the keys of std's `HashMap`s (the order kube's controller polls its reconciles in) and
//!   tokio's own generator (`select!`'s branch order), both drawn from the `getrandom` system
//!   call: this crate defines `getrandom` (which the linker prefers over libc's), and answers
//!   a seeded thread from its seed, any other from the kernel.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Makes this thread's randomness follow `seed`; call first on a fresh thread, before any
/// `HashMap` or runtime exists on it.
pub fn enter(seed: u64) {
    STATE.with(|s| s.set(Some(splitmix(seed))));
    fastrand::seed(seed);
    // Keep the definition below in the binary.
    std::hint::black_box(getrandom as unsafe extern "C" fn(*mut u8, usize, u32) -> isize);
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// glibc's `getrandom(3)`, seeded on a simulation's thread.
///
/// # Safety
/// As `getrandom(3)`: `buf` must be valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getrandom(buf: *mut u8, len: usize, flags: u32) -> isize {
    let Some(mut state) = STATE.try_with(Cell::get).ok().flatten() else {
        // SAFETY: the caller's buffer, as the system call takes it.
        return unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) as isize };
    };
    for i in 0..len {
        state = splitmix(state);
        // SAFETY: `i < len`, within the caller's buffer.
        unsafe { *buf.add(i) = state as u8 };
    }
    STATE.with(|s| s.set(Some(state)));
    len as isize
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    fn order(seed: u64) -> Vec<u32> {
        std::thread::spawn(move || {
            super::enter(seed);
            let map: HashMap<u32, ()> = (0..32).map(|i| (i, ())).collect();
            map.into_keys().collect()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_seed_fixes_the_order_of_hash_maps() {
        assert_eq!(order(7), order(7));
        assert_ne!(
            order(7),
            order(8),
            "the seed does not reach std's hash keys"
        );
    }
}
