//! Reports inside a compact binary encoding (the online verifier's checkpoint, which is postcard): each as
//! its JSON text. A [`Report`] leaves out empty fields when serialized, which only a self-describing format
//! can read back, and its JSON is the schema the report store already keeps stable.

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Report;

/// Serializes `reports` as a sequence of JSON texts.
pub(crate) fn serialize<S: Serializer>(reports: &[Report], serializer: S) -> Result<S::Ok, S::Error> {
    let texts =
        reports.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>().map_err(S::Error::custom)?;
    texts.serialize(serializer)
}

/// Reads what [`serialize`] wrote.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Report>, D::Error> {
    let texts = Vec::<String>::deserialize(deserializer)?;
    texts.iter().map(|t| serde_json::from_str(t).map_err(D::Error::custom)).collect()
}
