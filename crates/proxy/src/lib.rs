//! The Krait middlebox: listener, TLS, auth relay, session state machine and recorder. Not implemented yet: see the proxy core issue.
