//! Storage quota of a keyspace: how many bytes its objects may take and how many objects it
//! may hold, and the one check every backend applies to a write.
//!
//! What counts: an object takes `key length + value length` bytes (what the client controls;
//! the backend's own record overhead and history are not charged, history is bounded
//! separately). Rules, the same on every backend:
//! * a delete is always allowed (a full keyspace must be able to clean up);
//! * a write that does not grow the usage is always allowed (also when a lowered limit is
//!   already exceeded), like upstream's ResourceQuota;
//! * a create must fit: `objects + 1 <= objects limit` and `bytes + size <= bytes limit`;
//! * an update that grows its object may also use a small grace above the bytes limit
//!   ([`update_grace`]), so that a full keyspace can still mark objects for deletion (setting
//!   `deletionTimestamp`, removing finalizers) — the grace is shared, so the keyspace can never
//!   hold more than `limit + grace` bytes.

use crate::error::StoreError;

/// Limits of one keyspace; `None` = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageLimits {
    /// Bytes of keys and values the keyspace may hold.
    pub bytes: Option<u64>,
    /// Objects (keys) the keyspace may hold.
    pub objects: Option<u64>,
}

impl StorageLimits {
    /// No limit (the control plane's own keyspace).
    pub const UNLIMITED: StorageLimits = StorageLimits {
        bytes: None,
        objects: None,
    };
}

/// What a keyspace holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageUsage {
    /// Bytes of keys and values (see the module docs).
    pub bytes: u64,
    /// Number of objects.
    pub objects: u64,
}

/// The grace above the bytes limit that growing updates (not creates) may use: 1/64 of the
/// limit, at least 64 KiB (16 MiB for a 1 GiB limit).
pub fn update_grace(limit: u64) -> u64 {
    (limit / 64).max(64 * 1024)
}

/// The kind of write being checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteKind {
    Create,
    Update,
    Delete,
}

/// The bytes an object takes.
pub(crate) fn object_bytes(key: &str, value_len: usize) -> u64 {
    (key.len() as u64).saturating_add(value_len as u64)
}

/// Check a write against `limits`: `usage` is the keyspace's usage before the write, `old` and
/// `new` the bytes of the key before and after the write (0 when absent). On refusal, the
/// error names the limit.
pub(crate) fn check(
    keyspace: &str,
    limits: StorageLimits,
    usage: StorageUsage,
    kind: WriteKind,
    old: u64,
    new: u64,
) -> Result<(), StoreError> {
    if kind == WriteKind::Delete {
        return Ok(());
    }
    if kind == WriteKind::Create {
        if let Some(limit) = limits.objects {
            if usage.objects.saturating_add(1) > limit {
                return Err(StoreError::QuotaExceeded {
                    keyspace: keyspace.to_owned(),
                    resource: "objects",
                    requested: 1,
                    used: usage.objects,
                    limit,
                });
            }
        }
    }
    if new <= old {
        return Ok(());
    }
    if let Some(limit) = limits.bytes {
        let allowed = match kind {
            WriteKind::Update => limit.saturating_add(update_grace(limit)),
            _ => limit,
        };
        let after = usage.bytes.saturating_sub(old).saturating_add(new);
        if after > allowed {
            return Err(StoreError::QuotaExceeded {
                keyspace: keyspace.to_owned(),
                resource: "storage",
                requested: new - old,
                used: usage.bytes,
                limit,
            });
        }
    }
    Ok(())
}

/// `usage` after a write that replaced `old` bytes by `new` bytes and changed the object count
/// by `objects` (+1 create, -1 delete, 0 update).
pub(crate) fn apply(usage: StorageUsage, old: u64, new: u64, objects: i64) -> StorageUsage {
    StorageUsage {
        bytes: usage.bytes.saturating_sub(old).saturating_add(new),
        objects: usage.objects.saturating_add_signed(objects),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: StorageLimits = StorageLimits {
        bytes: Some(1 << 20),
        objects: Some(10),
    };

    fn usage(bytes: u64, objects: u64) -> StorageUsage {
        StorageUsage { bytes, objects }
    }

    #[test]
    fn creates_must_fit_both_limits() {
        assert!(check("t", LIMITS, usage(0, 9), WriteKind::Create, 0, 100).is_ok());
        match check("t", LIMITS, usage(0, 10), WriteKind::Create, 0, 100) {
            Err(StoreError::QuotaExceeded {
                resource, limit, ..
            }) => assert_eq!((resource, limit), ("objects", 10)),
            other => panic!("expected objects quota, got {other:?}"),
        }
        assert!(check(
            "t",
            LIMITS,
            usage((1 << 20) - 100, 1),
            WriteKind::Create,
            0,
            100
        )
        .is_ok());
        match check(
            "t",
            LIMITS,
            usage((1 << 20) - 99, 1),
            WriteKind::Create,
            0,
            100,
        ) {
            Err(StoreError::QuotaExceeded {
                resource,
                requested,
                used,
                ..
            }) => assert_eq!(
                (resource, requested, used),
                ("storage", 100, (1 << 20) - 99)
            ),
            other => panic!("expected storage quota, got {other:?}"),
        }
    }

    #[test]
    fn deletes_and_shrinking_writes_always_pass() {
        let over = usage(5 << 20, 50);
        assert!(check("t", LIMITS, over, WriteKind::Delete, 100, 0).is_ok());
        assert!(check("t", LIMITS, over, WriteKind::Update, 100, 100).is_ok());
        assert!(check("t", LIMITS, over, WriteKind::Update, 100, 10).is_ok());
        assert!(check("t", LIMITS, over, WriteKind::Update, 100, 101).is_err());
        assert!(check(
            "t",
            StorageLimits::UNLIMITED,
            over,
            WriteKind::Create,
            0,
            1 << 30
        )
        .is_ok());
    }

    #[test]
    fn updates_may_use_the_bounded_grace() {
        let full = usage(1 << 20, 1);
        let grace = update_grace(1 << 20);
        assert_eq!(grace, 64 * 1024);
        assert!(check("t", LIMITS, full, WriteKind::Update, 10, 10 + grace).is_ok());
        assert!(check("t", LIMITS, full, WriteKind::Update, 10, 11 + grace).is_err());
        assert!(check("t", LIMITS, full, WriteKind::Create, 0, 1).is_err());
        assert_eq!(update_grace(1 << 30), 16 << 20);
    }

    #[test]
    fn usage_follows_writes() {
        let u = apply(usage(100, 2), 0, 50, 1);
        assert_eq!(u, usage(150, 3));
        assert_eq!(apply(u, 50, 0, -1), usage(100, 2));
        assert_eq!(apply(u, 50, 70, 0), usage(170, 3));
    }
}
