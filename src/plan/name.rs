//! Pod names chosen by the operator, in the form the API server gives `generateName`
//! (`<prefix><5 characters>`). Choosing the name makes a create repeatable: when its reply is
//! lost, sending it again either makes the pod or finds it (409 AlreadyExists), never makes a
//! second one. With `generateName`, only waiting out the expectation could tell.

/// The API server's alphabet for generated names: no vowels, so no words, and no look-alikes.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX: usize = 5;
/// As the API server's `maxGeneratedNameLength`: the whole name fits a 63-character label.
const MAX_PREFIX: usize = 63 - SUFFIX;

/// `prefix` (cut as the API server cuts it) and five characters picked by `pick(n)`, which
/// returns an index below `n`.
pub fn generated(prefix: &str, mut pick: impl FnMut(usize) -> usize) -> String {
    let cut = prefix
        .char_indices()
        .nth(MAX_PREFIX)
        .map_or(prefix, |(i, _)| &prefix[..i]);
    let suffix = (0..SUFFIX).map(|_| char::from(ALPHABET[pick(ALPHABET.len())]));
    cut.chars().chain(suffix).collect()
}

/// [`generated`] with random characters.
pub fn random(prefix: &str) -> String {
    generated(prefix, |n| fastrand::usize(..n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_prefix_and_five_characters_of_the_alphabet() {
        let mut next = 0;
        let name = generated("web-pod", |n| {
            next = (next + 4) % n;
            next
        });
        assert_eq!(name, "web-podglqv2");
        let random = random("web-pod");
        assert!(random.starts_with("web-pod") && random.len() == 12);
        assert!(
            random[7..].bytes().all(|b| ALPHABET.contains(&b)),
            "{random}"
        );
    }

    #[test]
    fn a_long_prefix_is_cut_to_fit_a_label() {
        let name = generated(&"a".repeat(100), |_| 0);
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("abbbbb"));
    }
}
