//! Object UIDs in 16 bytes instead of a 36-character string.
//!
//! The API server makes every UID with `uuid.New()`: a canonical lowercase UUID, which is
//! kept as its 16 bytes. Any other string (a test's, another server's) is kept as it is, so
//! that a UID always reads back exactly as it was given: it goes back to the API server in
//! delete preconditions.

use std::fmt;
use std::sync::Arc;

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Uid {
    Uuid([u8; 16]),
    Other(Arc<str>),
}

impl Uid {
    /// The 16 bytes of `s` if it is a canonical (lowercase, hyphenated) UUID.
    fn uuid(s: &str) -> Option<[u8; 16]> {
        let s = s.as_bytes();
        if s.len() != 36 || [8, 13, 18, 23].iter().any(|&i| s[i] != b'-') {
            return None;
        }
        let mut hex = s.iter().filter(|&&c| c != b'-').map(|&c| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        });
        let mut out = [0u8; 16];
        for byte in &mut out {
            *byte = (hex.next()?? << 4) | hex.next()??;
        }
        Some(out)
    }
}

impl From<&str> for Uid {
    fn from(s: &str) -> Self {
        match Self::uuid(s) {
            Some(bytes) => Uid::Uuid(bytes),
            None => Uid::Other(s.into()),
        }
    }
}

impl From<&Uid> for Uid {
    fn from(uid: &Uid) -> Self {
        uid.clone()
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uid::Uuid(b) => {
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Uid::Other(s) => f.write_str(s),
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        match (self, Self::uuid(other)) {
            (Uid::Uuid(a), Some(b)) => *a == b,
            (Uid::Other(a), None) => **a == *other,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_exactly_as_given() {
        for s in [
            "0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a88",
            "ps-uid",
            "0F3C6A2E-8D4B-4C1E-9A7F-5B2D1E0C9A88",
            "0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a8",
            "0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a8g",
            "0f3c6a2e+8d4b-4c1e-9a7f-5b2d1e0c9a88",
            "",
        ] {
            let uid = Uid::from(s);
            assert_eq!(uid.to_string(), s);
            assert!(uid == *s, "{s}");
        }
        assert!(matches!(
            Uid::from("0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a88"),
            Uid::Uuid(_)
        ));
        assert!(matches!(
            Uid::from("0F3C6A2E-8D4B-4C1E-9A7F-5B2D1E0C9A88"),
            Uid::Other(_)
        ));
    }

    #[test]
    fn equal_only_to_the_same_uid() {
        let a = Uid::from("0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a88");
        assert_eq!(a, Uid::from("0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a88"));
        assert_ne!(a, Uid::from("0f3c6a2e-8d4b-4c1e-9a7f-5b2d1e0c9a89"));
        assert!(a != *"ps-uid");
        assert_eq!(std::mem::size_of::<Uid>(), 24);
    }
}
