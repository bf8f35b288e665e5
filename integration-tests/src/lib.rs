//! End-to-end tests against a real PostgreSQL with real drivers; the tests live in `tests/`.
