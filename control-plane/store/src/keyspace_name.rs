//! Keyspace names, shared by every backend: 1 to 200 characters from `[A-Za-z0-9._-]`, so a
//! name is safe as a sled tree name and as an etcd key segment (no `/`).

use crate::error::{Result, StoreError};

/// Longest accepted keyspace name.
const MAX_KEYSPACE_NAME: usize = 200;

/// Check a keyspace name: 1 to 200 characters from `[A-Za-z0-9._-]`.
pub(crate) fn validate(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= MAX_KEYSPACE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(StoreError::InvalidKeyspace {
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_names_are_validated() {
        assert!(validate("host").is_ok());
        assert!(validate("tenant-a.b_c9").is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(201)] {
            assert!(
                matches!(validate(bad), Err(StoreError::InvalidKeyspace { .. })),
                "{bad:?} must be rejected"
            );
        }
    }
}
