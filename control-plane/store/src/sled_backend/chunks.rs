//! Large values split into chunks, so sled never stores a value above its blob threshold.
//!
//! Why: sled 0.34 writes a page larger than a quarter of its segment (about 128 KiB) to a
//! separate blob file and does not reliably reclaim the old file when the page is replaced, so
//! rewriting one large object in a loop grew the disk without bound (5.6 MiB per rewrite of a
//! 1 MiB object). A page is a whole B-tree leaf when sled consolidates it, and a leaf holds up
//! to 17 records before it splits, so a record must stay under about 7.5 KiB for its leaf to
//! stay under the threshold: [`CHUNK_BYTES`] is 8 KiB, measured to leave next to no blob files
//! (64 KiB chunks still let consolidated leaves of the chunks tree spill into blob files, and
//! the disk kept growing slowly; `docs/benchmarks.md` has the figures).
//!
//! Layout: the value written at revision R (by a create or an update) that is longer than
//! [`CHUNK_BYTES`] is stored once, in the keyspace's chunks tree, as `ceil(len / CHUNK_BYTES)`
//! chunks under the keys `R (u64 BE) | index (u32 BE)`; every chunk but the last is exactly
//! [`CHUNK_BYTES`] long. The object record and the log entries that hold this value refer to it
//! by its revision and length (see [`codec`](super::codec)).
//!
//! Lifetime: the value written at R is referred to by the object while its mod revision is R,
//! by the log entry at R (its new value) and by the log entry of the key's next change S (its
//! previous value). The object stops referring to it at S, and log entries are compacted in
//! revision order, so the chunks are removed when the log entry at S is compacted, in the same
//! transaction ([`write`](super::write)). Chunks are written and removed in the transaction of
//! the write that creates or frees them, so a crash never leaves a value half written.
//!
//! Guarantees: reading checks every chunk's presence and length and the total; a missing or
//! malformed chunk is a [`ChunkError`], never a panic.

use bytes::{Bytes, BytesMut};
use sled::transaction::{TransactionalTree, UnabortableTransactionError};
use sled::IVec;

use crate::types::Revision;

/// The largest chunk, and the largest value stored inline in its record: 8 KiB, so that a
/// leaf of 17 chunks with their keys and sled's framing stays about at sled's 128 KiB blob
/// threshold (see the module docs). Most Kubernetes objects are smaller and stay inline.
pub(crate) const CHUNK_BYTES: usize = 8 * 1024;

/// A chunked value that cannot be read back as written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// A chunk of the value is not in the chunks tree.
    #[error("chunk {index} of the value written at revision {revision} is missing")]
    Missing {
        /// The revision that wrote the value.
        revision: Revision,
        /// The chunk's position in the value.
        index: u32,
    },
    /// A chunk's length is not what the value's length implies.
    #[error(
        "chunk {index} of the value written at revision {revision} holds {found} bytes, \
         expected {expected}"
    )]
    Length {
        /// The revision that wrote the value.
        revision: Revision,
        /// The chunk's position in the value.
        index: u32,
        /// The length the value's length implies.
        expected: usize,
        /// The length stored.
        found: usize,
    },
    /// The recorded length needs more chunks than a value can have (or more memory than this
    /// machine can address).
    #[error("the value written at revision {revision} claims an impossible length of {len} bytes")]
    TooLong {
        /// The revision that wrote the value.
        revision: Revision,
        /// The recorded length.
        len: u64,
    },
}

/// Whether a value of `len` bytes is stored in chunks rather than inline in its record.
pub(crate) fn is_chunked(len: usize) -> bool {
    len > CHUNK_BYTES
}

/// The key of chunk `index` of the value written at `revision`.
pub(crate) fn key(revision: Revision, index: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&revision.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The number of chunks of a value of `len` bytes; None if it does not fit a u32 or usize.
fn count(len: u64) -> Option<u32> {
    usize::try_from(len).ok()?;
    u32::try_from(len.div_ceil(CHUNK_BYTES as u64)).ok()
}

/// Write `value` (written at `revision`) as chunks, inside the write's transaction.
pub(crate) fn insert(
    tree: &TransactionalTree,
    revision: Revision,
    value: &[u8],
) -> Result<(), UnabortableTransactionError> {
    for (index, chunk) in (0u32..).zip(value.chunks(CHUNK_BYTES)) {
        tree.insert(&key(revision, index), chunk)?;
    }
    Ok(())
}

/// Remove the chunks of the value of `len` bytes written at `revision`, inside the
/// transaction that frees it. Absent chunks are skipped; a length no value can have removes
/// nothing (the caller reports it).
pub(crate) fn remove(
    tree: &TransactionalTree,
    revision: Revision,
    len: u64,
) -> Result<(), UnabortableTransactionError> {
    for index in 0..count(len).unwrap_or(0) {
        tree.remove(&key(revision, index))?;
    }
    Ok(())
}

/// Reassemble the value of `len` bytes written at `revision`, reading each chunk with `get`
/// (a sled tree or a transactional one). The outer error is the storage's, the inner one says
/// the chunks are not what was written.
pub(crate) fn read<E>(
    revision: Revision,
    len: u64,
    mut get: impl FnMut(&[u8]) -> Result<Option<IVec>, E>,
) -> Result<Result<Bytes, ChunkError>, E> {
    let (Some(chunks), Ok(total)) = (count(len), usize::try_from(len)) else {
        return Ok(Err(ChunkError::TooLong { revision, len }));
    };
    let mut value = BytesMut::with_capacity(total);
    for index in 0..chunks {
        let Some(chunk) = get(&key(revision, index))? else {
            return Ok(Err(ChunkError::Missing { revision, index }));
        };
        let expected = (total - value.len()).min(CHUNK_BYTES);
        if chunk.len() != expected {
            return Ok(Err(ChunkError::Length {
                revision,
                index,
                expected,
                found: chunk.len(),
            }));
        }
        value.extend_from_slice(&chunk);
    }
    Ok(Ok(value.freeze()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::convert::Infallible;

    use super::*;

    /// Split `value` the way [`insert`] does, into a map.
    fn split(revision: Revision, value: &[u8]) -> BTreeMap<[u8; 12], IVec> {
        (0u32..)
            .zip(value.chunks(CHUNK_BYTES))
            .map(|(index, chunk)| (key(revision, index), IVec::from(chunk)))
            .collect()
    }

    fn read_from(
        map: &BTreeMap<[u8; 12], IVec>,
        revision: Revision,
        len: u64,
    ) -> Result<Bytes, ChunkError> {
        let get = |k: &[u8]| -> Result<Option<IVec>, Infallible> {
            Ok(<[u8; 12]>::try_from(k)
                .ok()
                .and_then(|k| map.get(&k).cloned()))
        };
        match read(revision, len, get) {
            Ok(inner) => inner,
            Err(never) => match never {},
        }
    }

    #[test]
    fn roundtrip_at_every_boundary() -> Result<(), ChunkError> {
        for len in [
            0,
            1,
            CHUNK_BYTES - 1,
            CHUNK_BYTES,
            CHUNK_BYTES + 1,
            3 * CHUNK_BYTES,
            3 * CHUNK_BYTES + 7,
        ] {
            let value: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let map = split(9, &value);
            assert_eq!(map.len(), len.div_ceil(CHUNK_BYTES));
            assert_eq!(read_from(&map, 9, len as u64)?, value);
        }
        Ok(())
    }

    #[test]
    fn missing_short_and_impossible_chunks_are_errors() {
        let value = vec![7u8; 3 * CHUNK_BYTES];
        let mut map = split(4, &value);
        let len = value.len() as u64;
        assert!(matches!(
            read_from(&map, 4, len + 1),
            Err(ChunkError::Missing { index: 3, .. })
        ));
        assert!(matches!(
            read_from(&map, 4, len - 1),
            Err(ChunkError::Length { index: 2, expected, found, .. })
                if expected == CHUNK_BYTES - 1 && found == CHUNK_BYTES
        ));
        map.remove(&key(4, 1));
        assert!(matches!(
            read_from(&map, 4, len),
            Err(ChunkError::Missing {
                revision: 4,
                index: 1
            })
        ));
        assert!(matches!(
            read_from(&map, 4, u64::MAX),
            Err(ChunkError::TooLong { .. })
        ));
    }

    #[test]
    fn chunk_keys_sort_by_revision_then_index() {
        assert!(key(1, u32::MAX) < key(2, 0));
        assert!(key(2, 0) < key(2, 1));
    }
}
