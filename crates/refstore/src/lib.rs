//! The reference store of the operational semantics of consistency models. Not implemented yet: see the reference store issue.
