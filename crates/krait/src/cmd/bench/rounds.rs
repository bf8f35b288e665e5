//! Cobra Fig. 10: online verification capacity against round size.

use super::BenchArgs;

/// Cobra Fig. 10 (and `krait bench rounds`): capacity in transactions per second for several round sizes.
/// Returns whether every history was accepted.
pub(super) fn fig10(_args: &BenchArgs) -> anyhow::Result<bool> {
    anyhow::bail!("krait bench fig10 (rounds) is not implemented yet")
}
