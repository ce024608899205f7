//! Replays every seed of `fuzz/corpus/<target>/` (and crash reproducers kept in
//! `fuzz/regressions/<target>/`) through its target: the CI smoke run of the fuzz targets, which
//! needs neither nightly Rust nor cargo-fuzz. A panic fails the test with the file's name.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn every_target_replays_its_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut total = 0;
    for (name, target) in fabrik_fuzz_targets::TARGETS {
        let seeds = files(&root.join("corpus").join(name));
        assert!(
            seeds.len() >= 5,
            "fuzz/corpus/{name} holds {} seeds; every target keeps a corpus",
            seeds.len()
        );
        let regressions = files(&root.join("regressions").join(name));
        for file in seeds.iter().chain(&regressions) {
            let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} panicked", file.display());
            total += 1;
        }
    }
    assert!(total > 0);
}

#[test]
fn every_target_has_a_libfuzzer_entry_point() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, _) in fabrik_fuzz_targets::TARGETS {
        let entry = root.join("fuzz_targets").join(format!("{name}.rs"));
        let text =
            std::fs::read_to_string(&entry).unwrap_or_else(|e| panic!("{}: {e}", entry.display()));
        assert!(
            text.contains(&format!("fabrik_fuzz_targets::{name}(")),
            "{} does not call fabrik_fuzz_targets::{name}",
            entry.display()
        );
    }
}
