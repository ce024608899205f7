//! The token cache: one JSON file per (issuer, client id, scopes) under the cache directory.
//!
//! Guarantees: the directory is created with mode 0700; every file is written whole (a temporary
//! file with mode 0600 in the same directory, synced, then renamed over the old one), so a
//! reader sees the old entry or the new one, never a torn one, and no other user can read it.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::issuer::Tokens;

/// Errors reading or writing the cache.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or the directory could not be read, created or written.
    #[error("token cache {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A cache file is not an entry (it is ignored and rewritten on the next login).
    #[error("token cache {} is not valid JSON: {source}", path.display())]
    Decode {
        /// The path.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The entry cannot be encoded.
    #[error("cannot encode the token cache entry: {0}")]
    Encode(#[source] serde_json::Error),
    /// No cache directory was given and there is no home directory to put one in.
    #[error("no cache directory: pass --cache-dir (there is no home directory to default to)")]
    NoDirectory,
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an entry is for: one file each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The issuer URL, without a trailing slash.
    pub issuer: String,
    /// The client id.
    pub client_id: String,
    /// The scopes, sorted and without duplicates.
    pub scopes: Vec<String>,
}

impl Key {
    /// Builds a key; scope order and duplicates do not make a different key.
    pub fn new(issuer: &str, client_id: &str, scopes: &[String]) -> Key {
        let mut scopes: Vec<String> = scopes.to_vec();
        scopes.sort();
        scopes.dedup();
        Key {
            issuer: issuer.trim_end_matches('/').to_string(),
            client_id: client_id.to_string(),
            scopes,
        }
    }

    /// The file name: a SHA-256 of the key's parts, so any issuer URL makes a safe name.
    pub fn file_name(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.issuer.as_bytes());
        h.update([0]);
        h.update(self.client_id.as_bytes());
        h.update([0]);
        h.update(self.scopes.join(" ").as_bytes());
        let digest = h.finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}.json")
    }
}

/// One cache file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Entry {
    /// The issuer (for people reading the file; the file name is the key).
    pub issuer: String,
    /// The client id.
    pub client_id: String,
    /// The scopes.
    pub scopes: Vec<String>,
    /// The last verified ID token.
    pub id_token: String,
    /// Its expiry.
    pub expiry: DateTime<Utc>,
    /// The refresh token, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// The nonce of the original login, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

impl Entry {
    /// An entry for `key` holding `tokens`.
    pub fn new(key: &Key, tokens: &Tokens) -> Entry {
        Entry {
            issuer: key.issuer.clone(),
            client_id: key.client_id.clone(),
            scopes: key.scopes.clone(),
            id_token: tokens.id_token.clone(),
            expiry: tokens.expiry,
            refresh_token: tokens.refresh_token.clone(),
            nonce: tokens.nonce.clone(),
        }
    }

    /// Whether the ID token is still good for at least `margin` after `now`.
    pub fn fresh_at(&self, now: DateTime<Utc>, margin: chrono::Duration) -> bool {
        self.expiry - margin > now
    }

    /// The tokens this entry holds.
    pub fn tokens(&self) -> Tokens {
        Tokens {
            id_token: self.id_token.clone(),
            expiry: self.expiry,
            refresh_token: self.refresh_token.clone(),
            nonce: self.nonce.clone(),
        }
    }
}

/// The cache directory.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// `dir`, or `~/.cache/fabrik/oidc`.
    pub fn new(dir: Option<&Path>) -> Result<Cache> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => dirs::home_dir()
                .ok_or(Error::NoDirectory)?
                .join(".cache")
                .join("fabrik")
                .join("oidc"),
        };
        Ok(Cache { dir })
    }

    /// Where `key`'s entry lives.
    pub fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// Reads `key`'s entry; `None` if there is none.
    pub fn load(&self, key: &Key) -> Result<Option<Entry>> {
        let path = self.path(key);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| Error::Decode { path, source })
    }

    /// Writes `entry` for `key`, atomically, readable by the owner only.
    pub fn store(&self, key: &Key, entry: &Entry) -> Result<PathBuf> {
        self.ensure_dir()?;
        let path = self.path(key);
        let bytes = serde_json::to_vec_pretty(entry).map_err(Error::Encode)?;
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", key.file_name(), std::process::id()));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        write_private(&tmp, &bytes).map_err(io(&tmp))?;
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&path)(e));
        }
        Ok(path)
    }

    fn ensure_dir(&self) -> Result<()> {
        if self.dir.is_dir() {
            return Ok(());
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(&self.dir).map_err(|source| Error::Io {
            path: self.dir.clone(),
            source,
        })
    }
}

/// Creates `path` anew with mode 0600 and writes `bytes` to disk.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    // The mode above only applies to new files; a leftover temporary file may be older.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(expiry: DateTime<Utc>) -> Tokens {
        Tokens {
            id_token: "a.b.c".into(),
            expiry,
            refresh_token: Some("r1".into()),
            nonce: None,
        }
    }

    #[test]
    fn key_ignores_scope_order_and_trailing_slash() {
        let a = Key::new(
            "https://idp/",
            "c",
            &["openid".into(), "email".into(), "email".into()],
        );
        let b = Key::new("https://idp", "c", &["email".into(), "openid".into()]);
        assert_eq!(a.file_name(), b.file_name());
        let c = Key::new("https://idp", "other", &["email".into(), "openid".into()]);
        assert_ne!(a.file_name(), c.file_name());
        let d = Key::new("https://idp", "c", &["openid".into()]);
        assert_ne!(a.file_name(), d.file_name());
    }

    #[test]
    fn freshness_has_a_margin() {
        let now = Utc::now();
        let e = Entry::new(
            &Key::new("https://idp", "c", &[]),
            &tokens(now + chrono::Duration::seconds(90)),
        );
        assert!(e.fresh_at(now, chrono::Duration::seconds(60)));
        assert!(!e.fresh_at(now, chrono::Duration::seconds(120)));
        assert!(!e.fresh_at(
            now + chrono::Duration::seconds(31),
            chrono::Duration::seconds(60)
        ));
    }

    #[test]
    fn store_then_load_round_trips_with_private_modes() -> Result<()> {
        let tmp = tempfile::tempdir().map_err(|source| Error::Io {
            path: "tempdir".into(),
            source,
        })?;
        let base = tmp.path();
        let cache = Cache::new(Some(&base.join("oidc")))?;
        let key = Key::new("https://idp", "c", &["openid".into()]);
        assert_eq!(cache.load(&key)?, None);
        let entry = Entry::new(&key, &tokens(Utc::now()));
        let path = cache.store(&key, &entry)?;
        assert_eq!(cache.load(&key)?, Some(entry.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| {
                std::fs::metadata(p)
                    .map(|m| m.permissions().mode() & 0o777)
                    .unwrap_or(0)
            };
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(&base.join("oidc")), 0o700);
        }
        // Overwriting keeps one file and no temporary leftovers.
        cache.store(&key, &entry)?;
        let names: Vec<_> = std::fs::read_dir(base.join("oidc"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(names.len(), 1);
        Ok(())
    }

    #[test]
    fn a_corrupt_file_is_a_decode_error() -> Result<()> {
        let tmp = tempfile::tempdir().map_err(|source| Error::Io {
            path: "tempdir".into(),
            source,
        })?;
        let cache = Cache::new(Some(tmp.path()))?;
        let key = Key::new("https://idp", "c", &[]);
        cache.ensure_dir()?;
        std::fs::write(cache.path(&key), b"{not json").map_err(|source| Error::Io {
            path: tmp.path().to_path_buf(),
            source,
        })?;
        assert!(matches!(cache.load(&key), Err(Error::Decode { .. })));
        Ok(())
    }
}
