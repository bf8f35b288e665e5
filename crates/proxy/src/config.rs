//! The proxy's TOML configuration (`configs/krait.toml` is the commented example). Every value is checked
//! when the file is loaded, and every error names the file, the setting and what is allowed, so a bad config
//! fails at start-up rather than at the first client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use history::log::Durability;
use serde::Deserialize;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a value has the wrong type or an unknown name.
    #[error("invalid config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value is well-formed but not allowed.
    #[error("invalid config {path}: {setting}: {reason}")]
    Invalid {
        /// The file (or `<inline>`).
        path: PathBuf,
        /// The setting, as `table.key`.
        setting: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where clients connect.
    pub listen: ListenConfig,
    /// TLS towards clients.
    #[serde(default)]
    pub tls: TlsConfig,
    /// The database behind the proxy.
    pub upstream: UpstreamConfig,
    /// The durable history log.
    pub log: LogConfig,
    /// The admin HTTP server.
    #[serde(default)]
    pub admin: AdminConfig,
    /// SQL interpretation and version tagging; `xmin` by default.
    #[serde(default)]
    pub tagging: crate::interpret::TaggingConfig,
    /// Fence injection (used when tagging is on).
    #[serde(default)]
    pub fence: crate::interpret::FenceConfig,
    /// What the operator asserts about recording.
    #[serde(default)]
    pub record: RecordConfig,
    /// The co-located verifier of `krait serve` (the proxy itself ignores it).
    #[serde(default)]
    pub verify: VerifyConfig,
    /// `[ship]`: publish the log to NATS JetStream for one verifier of many proxies (DESIGN.md §4, "many
    /// edges"); off when absent. Each proxy needs its own `[log] collector` id, below 256.
    #[serde(default)]
    pub ship: Option<ship::ShipConfig>,
}

/// `[verify]`: what `krait serve`'s verifier checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    /// The isolation level to check (`declared`, `serializable`, `strict-serializable`,
    /// `snapshot-isolation`, `causal`, `read-atomic`, `read-committed`); `declared` when absent. `krait serve`
    /// parses it, and refuses to start on a name it does not know.
    #[serde(default)]
    pub level: Option<String>,
}

/// `[record]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordConfig {
    /// Record each statement's parameters, the values of the rows each mapped read returned and the row each
    /// INSERT or UPDATE wrote (returned to the proxy only when the client asked for none), beside the ops in
    /// the log, for reports and replay (issue 18). On by default; needs tagging. The verifier never uses
    /// them.
    #[serde(default = "default_true")]
    pub values: bool,
    /// The byte budget of one row's values (and of one statement's parameters): a value past it keeps a
    /// prefix and its length.
    #[serde(default = "default_row_bytes")]
    pub row_bytes: usize,
    /// Column names whose values are secrets: recorded as a hash, and so is every parameter of a statement
    /// that names one. Statements about passwords (`ALTER ROLE … PASSWORD`, `pg_authid`) are hashed anyway.
    #[serde(default)]
    pub redact: Vec<String>,
    /// The operator asserts that every writer of the database goes through this proxy: a version written
    /// during this run that no recorded transaction wrote, and that nothing the proxy saw can explain, is
    /// then reported as an anomaly ("unowned version") instead of being unverifiable (DESIGN.md §3). Off by
    /// default. Suspended for the rest of the run (with a warning and on /metrics) once the proxy forwards
    /// a statement it cannot map that may write, or loses track of a session.
    #[serde(default)]
    pub exclusive: bool,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig { values: true, row_bytes: default_row_bytes(), redact: Vec::new(), exclusive: false }
    }
}

fn default_true() -> bool {
    true
}

fn default_row_bytes() -> usize {
    256
}

/// `[listen]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// The address clients connect to, e.g. `127.0.0.1:6432` (port 0 picks a free port).
    pub address: SocketAddr,
    /// The largest message a client may send, in bytes; a larger one closes that client's connection. Before
    /// login PostgreSQL's own, smaller limits apply instead (see `session::startup::negotiate`).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// How long a client may take to send its startup packet and finish authentication.
    #[serde(default = "default_startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    /// How many threads run client sessions; 0 (the default) is one per CPU core. A session's two sockets
    /// are served by one task, but with several threads its wake-ups can move it between them; where the
    /// database and its clients share the proxy's cores, one thread switched a third less and cost up to a
    /// tenth less CPU per transaction, with throughput higher or lower by about as much
    /// (`docs/proxy-cost.md`).
    #[serde(default)]
    pub workers: usize,
}

impl ListenConfig {
    /// Builds the runtime that serves clients with `workers` threads (see [`ListenConfig::workers`]).
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if self.workers > 0 {
            builder.worker_threads(self.workers);
        }
        builder.enable_all().build()
    }
}

/// Whether clients must, may or cannot use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClientTlsMode {
    /// No TLS: SSLRequest is answered `N`.
    #[default]
    Disable,
    /// TLS when the client asks for it.
    Prefer,
    /// Clients that do not use TLS are refused.
    Require,
}

/// `[tls]`: TLS towards clients.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// `disable`, `prefer` or `require`.
    #[serde(default)]
    pub mode: ClientTlsMode,
    /// The certificate chain, PEM. Reloaded on SIGHUP.
    pub cert: Option<PathBuf>,
    /// The private key, PEM. Reloaded on SIGHUP.
    pub key: Option<PathBuf>,
}

/// How the proxy talks TLS to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamTlsMode {
    /// Plain TCP.
    #[default]
    Disable,
    /// TLS without verifying the server's certificate (like libpq's `sslmode=require`).
    Require,
    /// TLS, verifying the certificate against `ca` and the host name against `server_name`.
    VerifyFull,
}

/// `[upstream]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The database's address, `host:port`.
    pub address: String,
    /// `disable`, `require` or `verify-full`, as written; unset, it is `verify-full` when `ca` is given and
    /// `disable` otherwise ([`UpstreamConfig::tls_mode`]).
    #[serde(default)]
    pub tls: Option<UpstreamTlsMode>,
    /// The CA certificate(s) that sign the database's certificate, PEM; needed for `verify-full`.
    pub ca: Option<PathBuf>,
    /// Whether to relay a password the database asks for in clear text (`password` authentication) over an
    /// unencrypted upstream connection. Off: such a login is refused with an error that says why, since the
    /// client may have sent the password to the proxy over TLS believing it protected.
    #[serde(default)]
    pub allow_cleartext_password: bool,
    /// The name to verify in the database's certificate; defaults to the host part of `address`.
    pub server_name: Option<String>,
    /// How long to wait for the database to accept a connection.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// The one database whose transactions are recorded. Rows of two databases are different rows under the
    /// same names, so one history holds one database; sessions to any other are relayed unrecorded. Unset,
    /// it is the database of the first session that sends a request (not merely logs in: a health check that
    /// only connects does not choose it). The log keeps the choice: a restart records the same database.
    pub database: Option<String>,
}

impl UpstreamConfig {
    /// The TLS mode in force: the one written, else `verify-full` when a CA is given (someone who names the
    /// CA wants it checked), else `disable`.
    pub fn tls_mode(&self) -> UpstreamTlsMode {
        self.tls.unwrap_or(if self.ca.is_some() {
            UpstreamTlsMode::VerifyFull
        } else {
            UpstreamTlsMode::Disable
        })
    }
}

/// `[log]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// The directory of the history log (created if missing).
    pub path: PathBuf,
    /// `strict`, `group` or `none` (DESIGN.md §3 "Durability").
    #[serde(default, deserialize_with = "durability")]
    pub durability: Durability,
    /// Under `group`, the longest delay before an fsync.
    #[serde(default = "default_group_interval_ms")]
    pub group_interval_ms: u64,
    /// The collector id stamped on every transaction, to tell proxies' clocks apart.
    #[serde(default)]
    pub collector: u32,
    /// The size at which a new segment file is begun, in bytes (64 MiB by default): retention deletes
    /// whole segments, so this is also how finely it deletes.
    #[serde(default = "default_segment_bytes")]
    pub segment_bytes: u64,
    /// `[log.retain]`.
    #[serde(default)]
    pub retain: RetainConfig,
}

/// `[log.retain]`: under `krait serve`, or a proxy that ships its log, how long the log keeps records that
/// nothing needs any more ([`crate::retention`]): covered by the verifier's and the version book's
/// checkpoints, and shipped. Records still needed are kept whatever their age or size.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetainConfig {
    /// Whether to delete anything; `false` keeps the whole log.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Records older than this many seconds go (3,600 by default)…
    #[serde(default = "default_retain_age_s")]
    pub max_age_s: u64,
    /// …and so do the oldest while the log's folder holds more than this many bytes (1 GiB by default).
    #[serde(default = "default_retain_bytes")]
    pub max_bytes: u64,
}

impl Default for RetainConfig {
    fn default() -> Self {
        RetainConfig { enabled: true, max_age_s: default_retain_age_s(), max_bytes: default_retain_bytes() }
    }
}

impl RetainConfig {
    /// The policy, or `None` when retention is off.
    pub fn policy(&self) -> Option<history::log::retention::Retain> {
        self.enabled.then(|| history::log::retention::Retain {
            max_age: Duration::from_secs(self.max_age_s),
            max_bytes: self.max_bytes,
        })
    }
}

fn default_segment_bytes() -> u64 {
    history::log::store::segments::SEGMENT_BYTES
}
fn default_retain_age_s() -> u64 {
    3_600
}
fn default_retain_bytes() -> u64 {
    1 << 30
}

/// `[admin]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Whether to serve /healthz, /metrics and /api/status.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Where; loopback by default, because the endpoints are unauthenticated.
    #[serde(default = "default_admin_address")]
    pub address: SocketAddr,
    /// How long a client may take to send a request's headers, and how long a connection may stay open
    /// in all (times 12), in milliseconds; 5,000 by default. A half-sent request must not hold a file
    /// descriptor the proxy's clients need.
    #[serde(default = "default_admin_timeout_ms")]
    pub timeout_ms: u64,
    /// The most admin connections served at once (64 by default); more wait in the kernel's backlog.
    #[serde(default = "default_admin_max_connections")]
    pub max_connections: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            address: default_admin_address(),
            timeout_ms: default_admin_timeout_ms(),
            max_connections: default_admin_max_connections(),
        }
    }
}

fn default_admin_timeout_ms() -> u64 {
    5_000
}
fn default_admin_max_connections() -> usize {
    64
}

fn yes() -> bool {
    true
}
/// The most session threads `[listen] workers` may ask for.
const MAX_WORKERS: usize = 1024;

fn default_max_message_bytes() -> usize {
    wire::pg::DEFAULT_MAX_MESSAGE_LEN
}
fn default_startup_timeout_ms() -> u64 {
    10_000
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_group_interval_ms() -> u64 {
    10
}
fn default_admin_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9187))
}

fn durability<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Durability, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and checks config text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks the rules a type cannot express.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |setting, reason: &str| ConfigError::Invalid {
            path: path.to_owned(),
            setting,
            reason: reason.to_owned(),
        };
        if self.listen.max_message_bytes < 1024 || self.listen.max_message_bytes > (1 << 30) {
            return Err(invalid("listen.max_message_bytes", "must be between 1024 and 1073741824 (1 GiB)"));
        }
        if let Some(ship) = &self.ship {
            if !ship.nats.starts_with("nats://") {
                return Err(invalid("ship.nats", "must be a nats://host:port URL"));
            }
            if self.log.collector > 255 {
                return Err(invalid(
                    "log.collector",
                    "must be below 256 when shipping: the verifier qualifies transaction ids with it",
                ));
            }
        }
        if self.listen.workers > MAX_WORKERS {
            return Err(invalid("listen.workers", "must be at most 1024 (0 is one per CPU core)"));
        }
        if self.listen.startup_timeout_ms == 0 {
            return Err(invalid("listen.startup_timeout_ms", "must be positive"));
        }
        if self.tls.mode != ClientTlsMode::Disable && (self.tls.cert.is_none() || self.tls.key.is_none()) {
            return Err(invalid("tls.mode", "prefer and require need both tls.cert and tls.key"));
        }
        if self.upstream.address.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
            return Err(invalid("upstream.address", "must be host:port, e.g. 127.0.0.1:5432"));
        }
        if self.upstream.tls_mode() == UpstreamTlsMode::VerifyFull && self.upstream.ca.is_none() {
            return Err(invalid(
                "upstream.ca",
                "verify-full needs the CA file that signs the database's certificate",
            ));
        }
        if self.tagging.strategy == crate::interpret::StrategyName::Column {
            return Err(invalid(
                "tagging.strategy",
                "not implemented yet: the column strategy (MySQL/MariaDB) is designed but not built; use xmin or off",
            ));
        }
        if self.upstream.connect_timeout_ms == 0 {
            return Err(invalid("upstream.connect_timeout_ms", "must be positive"));
        }
        if self.log.group_interval_ms == 0 || self.log.group_interval_ms > 10_000 {
            return Err(invalid("log.group_interval_ms", "must be between 1 and 10000"));
        }
        if self.log.segment_bytes < 64 << 10 {
            return Err(invalid("log.segment_bytes", "must be at least 65536"));
        }
        if self.log.path.as_os_str().is_empty() {
            return Err(invalid("log.path", "must name a directory"));
        }
        Ok(())
    }

    /// The upstream host name, for TLS verification.
    pub fn upstream_server_name(&self) -> String {
        match &self.upstream.server_name {
            Some(n) => n.clone(),
            None => {
                let host = self.upstream.address.rsplit_once(':').map_or("", |(h, _)| h);
                host.trim_start_matches('[').trim_end_matches(']').to_owned()
            }
        }
    }

    /// The startup timeout as a duration.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.listen.startup_timeout_ms)
    }
}

/// Loads and checks a config file, and also the files it names (TLS certificates and keys), as
/// `krait config check` does. Returns the config on success.
pub fn check_config(path: impl AsRef<Path>) -> Result<Config, crate::ProxyError> {
    let config = Config::load(path)?;
    if config.tls.mode != ClientTlsMode::Disable {
        crate::tls::load_server_config(&config.tls)?;
    }
    crate::tls::upstream_connector(&config)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipping_needs_a_nats_url_and_a_collector_id_below_256() {
        let ok =
            parse(&format!("{MINIMAL}collector = 7\n[ship]\nnats = \"nats://127.0.0.1:4222\"\n")).unwrap();
        let ship = ok.ship.expect("a [ship] section");
        assert_eq!((ship.nats.as_str(), ship.stream.as_str()), ("nats://127.0.0.1:4222", "KRAIT"));
        let err = parse(&format!("{MINIMAL}collector = 300\n[ship]\nnats = \"nats://h:1\"\n")).unwrap_err();
        assert!(err.to_string().contains("log.collector"), "{err}");
        let err = parse(&format!("{MINIMAL}[ship]\nnats = \"h:1\"\n")).unwrap_err();
        assert!(err.to_string().contains("ship.nats"), "{err}");
    }

    const MINIMAL: &str = r#"
        [listen]
        address = "127.0.0.1:0"
        [upstream]
        address = "127.0.0.1:5432"
        [log]
        path = "/tmp/krait-log"
    "#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn minimal_config_gets_safe_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.tls.mode, ClientTlsMode::Disable);
        assert_eq!(c.upstream.tls_mode(), UpstreamTlsMode::Disable);
        assert!(!c.upstream.allow_cleartext_password);
        // Naming a CA without a mode means checking the database's certificate against it.
        let with_ca =
            parse(&MINIMAL.replace("address = \"127.0.0.1:5432\"", "address = \"db:5432\"\nca = \"/c.pem\""))
                .unwrap();
        assert_eq!(with_ca.upstream.tls_mode(), UpstreamTlsMode::VerifyFull);
        assert_eq!(c.log.durability, Durability::Strict);
        assert!(c.admin.enabled);
        assert!(c.admin.address.ip().is_loopback(), "the admin server is loopback-only by default");
        assert_eq!(c.upstream_server_name(), "127.0.0.1");
        assert_eq!(c.listen.workers, 0, "one session thread per core unless asked");
    }

    #[test]
    fn the_session_runtime_has_the_threads_asked_for() {
        let two = parse(&MINIMAL.replace("[upstream]", "workers = 2\n[upstream]")).unwrap();
        let runtime = two.listen.runtime().unwrap();
        assert_eq!(runtime.metrics().num_workers(), 2);
        let one = parse(&MINIMAL.replace("[upstream]", "workers = 1\n[upstream]")).unwrap();
        assert_eq!(one.listen.runtime().unwrap().metrics().num_workers(), 1);
    }

    #[test]
    fn bad_values_are_named_in_the_error() {
        let cases = [
            (MINIMAL.replace("/tmp/krait-log\"", "/tmp/x\"\ndurability = \"fast\""), "strict, group or none"),
            (MINIMAL.replace("127.0.0.1:0", "localhost"), "invalid socket address"),
            (MINIMAL.replace("127.0.0.1:5432", "db"), "upstream.address"),
            (format!("{MINIMAL}\n[tls]\nmode = \"require\""), "tls.mode"),
            (format!("{MINIMAL}\n[tls]\nmode = \"always\""), "disable"),
            (MINIMAL.replace("[log]", "[log]\ncolour = 1"), "unknown field"),
            (MINIMAL.replace("[upstream]", "workers = 5000\n[upstream]"), "listen.workers"),
            (
                MINIMAL.replace("address = \"127.0.0.1:5432\"", "address = \"h:1\"\ntls = \"verify-full\""),
                "upstream.ca",
            ),
        ];
        for (text, needle) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(needle), "{err:?} does not mention {needle:?}");
            assert!(err.contains("test.toml"), "{err:?} does not name the file");
        }
    }

    #[test]
    fn check_config_reads_the_tls_files_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("krait.toml");
        let text = format!(
            "{MINIMAL}\n[tls]\nmode = \"prefer\"\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"\n"
        );
        std::fs::write(&path, text).unwrap();
        let err = check_config(&path).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/c.pem"), "{err}");

        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let text = format!(
            "{MINIMAL}\n[tls]\nmode = \"require\"\ncert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        );
        std::fs::write(&path, text).unwrap();
        assert_eq!(check_config(&path).unwrap().tls.mode, ClientTlsMode::Require);
        // A key that does not belong to the certificate is caught too.
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&key, other.signing_key.serialize_pem()).unwrap();
        assert!(check_config(&path).is_err());
    }

    #[test]
    fn the_shipped_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/krait.toml");
        let c = Config::load(&path).unwrap();
        assert_eq!(c.log.durability, Durability::Strict);
    }
}
