//! What the verifier's benches share: where the corpus is, and which folders hold Cobra histories.

use std::path::{Path, PathBuf};

/// The labelled corpus: `$KRAIT_CORPUS`, or `<workspace>/../shared/corpus`.
pub fn corpus() -> PathBuf {
    if let Ok(dir) = std::env::var("KRAIT_CORPUS") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
}

/// Every folder under `dir` that holds `T<n>.log` files, in path order.
pub fn cobra_histories(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    if entries.iter().any(|p| p.extension().is_some_and(|e| e == "log")) {
        out.push(dir.to_path_buf());
        return;
    }
    for p in entries {
        if p.is_dir() {
            cobra_histories(&p, out);
        }
    }
}
