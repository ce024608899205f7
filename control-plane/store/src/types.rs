//! Plain data carried across the [`Store`](crate::Store) trait: key-value records, change
//! events, watch items and list options/results.
//!
//! These types hold no backend state; they are cheap to clone (values are [`Bytes`]).

use bytes::Bytes;

use crate::error::StoreError;

/// A keyspace revision. Every successful write takes the next one; revisions are never reused.
pub type Revision = u64;

/// One key with its value and revision metadata (etcd's `mvccpb.KeyValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, as given to the store.
    pub key: String,
    /// The stored bytes.
    pub value: Bytes,
    /// Revision of the write that created this key (its latest incarnation).
    pub create_revision: Revision,
    /// Revision of the last change to this key. For the KeyValue carried by a Delete event or
    /// returned by `delete`, this is the revision of the deletion.
    pub mod_revision: Revision,
}

/// What kind of change an [`Event`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key did not exist before this revision.
    Create,
    /// The key existed and got a new value.
    Update,
    /// The key was removed.
    Delete,
}

/// One change to one key.
#[derive(Clone, Debug)]
pub struct Event {
    /// Whether the key was created, updated or deleted.
    pub kind: EventKind,
    /// The key's value after the change; for Delete, the last value with mod_revision = deletion
    /// revision.
    pub kv: KeyValue,
    /// The value before the change (None for Create).
    pub prev: Option<KeyValue>,
}

impl Event {
    /// The revision at which this change happened.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// What a watch stream yields.
#[derive(Clone, Debug)]
pub enum WatchItem {
    /// A change under the watched prefix.
    Event(Event),
    /// Every event under the watched prefix with revision <= this has already been yielded on
    /// this stream (like etcd progress notifications). Emitted roughly every
    /// `progress_interval`.
    Progress(Revision),
}

/// The stream returned by [`Store::watch`](crate::Store::watch).
pub type WatchStream = futures::stream::BoxStream<'static, Result<WatchItem, StoreError>>;

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Only keys starting with this string ("" = every key).
    pub prefix: String,
    /// Start strictly after this key (pagination).
    pub start_after: Option<String>,
    /// At most this many items (None = no limit).
    pub limit: Option<usize>,
    /// List the state as of this revision; None = current. Older than the compacted revision ->
    /// StoreError::Compacted.
    pub revision: Option<Revision>,
}

/// The answer to a list.
#[derive(Clone, Debug)]
pub struct ListResult {
    /// The items, sorted by key (byte order).
    pub items: Vec<KeyValue>,
    /// The revision this list is consistent at (the current revision when opts.revision was
    /// None).
    pub revision: Revision,
    /// How many keys under the prefix come after the last returned item (at that revision).
    pub remaining: u64,
}
