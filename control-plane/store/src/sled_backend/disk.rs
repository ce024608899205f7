//! How much disk a store directory takes: what the sled engine's growth is measured by.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Allocated bytes of every file under `dir` (blocks, not lengths: sparse and preallocated
/// files count as the disk they hold). A file removed meanwhile by sled's threads is not
/// counted.
pub fn disk_use(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            other => other?,
        };
        total += if meta.is_dir() {
            disk_use(&entry.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}
