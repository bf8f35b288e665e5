//! Wire-protocol codecs (PostgreSQL first), pure and without I/O. Not implemented yet: see the proxy core issue.
