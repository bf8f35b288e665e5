//! Cobra Fig. 12 and Fig. 13: what the proxy costs, measured against a real PostgreSQL.

use super::BenchArgs;

/// Cobra Fig. 12: throughput and latency, direct vs. through Krait. Returns whether every recorded history
/// was accepted.
pub(super) fn fig12(_args: &BenchArgs) -> anyhow::Result<bool> {
    anyhow::bail!("krait bench fig12 (proxy) is not implemented yet")
}

/// Cobra Fig. 13: network and history bytes per 1k transactions. Returns whether every recorded history
/// was accepted.
pub(super) fn fig13(_args: &BenchArgs) -> anyhow::Result<bool> {
    anyhow::bail!("krait bench fig13 (bytes) is not implemented yet")
}
