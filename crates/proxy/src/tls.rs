//! TLS on both sides of the proxy, with rustls.
//!
//! Towards clients the proxy terminates TLS with the certificate and key named in `[tls]`, read as PEM with
//! `rustls-pki-types`. The loaded config sits behind a lock so that SIGHUP can swap in a renewed certificate
//! without dropping connections; a reload that fails keeps the old certificate and says why. ALPN offers
//! `postgresql`, which PostgreSQL 17 clients need for direct TLS (`sslnegotiation=direct`).
//!
//! Towards the database, `upstream.tls` is `disable`, `require` (encrypt, verify nothing, like libpq's
//! `sslmode=require`) or `verify-full` (verify the chain against `upstream.ca` and the host name).
//!
//! Channel binding (`SCRAM-SHA-256-PLUS`) cannot cross a terminating proxy: the client would bind to the
//! proxy's certificate and the server to its own. The auth relay therefore removes `-PLUS` mechanisms from
//! what the server offers; clients that insist on `channel_binding=require` are not supported yet.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{Config, TlsConfig, UpstreamTlsMode};

/// The ALPN protocol name PostgreSQL registered for direct TLS connections.
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {reason}")]
    Pem {
        /// "certificate file", "key file" or "CA file".
        what: &'static str,
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the material (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// A setting is missing.
    #[error("TLS configuration: {0}")]
    Missing(&'static str),
    /// The upstream server name is not a valid DNS name or IP address.
    #[error("upstream server name {0:?} is not a valid DNS name or IP address")]
    ServerName(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_err(what: &'static str, path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::Pem { what, path: path.display().to_string(), reason: e.to_string() }
}

fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_err(what, path, "no PEM certificate found"));
    }
    Ok(certs)
}

/// Builds the client-facing TLS config from the cert and key files.
pub fn load_server_config(tls: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_path = tls.cert.as_deref().ok_or(TlsError::Missing("tls.cert is not set"))?;
    let key_path = tls.key.as_deref().ok_or(TlsError::Missing("tls.key is not set"))?;
    let certs = load_certs("certificate file", cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| pem_err("key file", key_path, e))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(Arc::new(config))
}

/// The client-facing TLS config, swappable at run time (SIGHUP).
pub struct ReloadableTls {
    settings: TlsConfig,
    current: RwLock<Arc<ServerConfig>>,
}

impl ReloadableTls {
    /// Loads the certificate and key named in `settings`.
    pub fn load(settings: &TlsConfig) -> Result<Self, TlsError> {
        Ok(ReloadableTls { settings: settings.clone(), current: RwLock::new(load_server_config(settings)?) })
    }

    /// Re-reads the files. On failure the previous certificate stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = load_server_config(&self.settings)?;
        match self.current.write() {
            Ok(mut guard) => *guard = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(())
    }

    /// An acceptor with the current certificate.
    pub fn acceptor(&self) -> TlsAcceptor {
        let config = match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        TlsAcceptor::from(config)
    }
}

/// How to open TLS to the database, if at all.
#[derive(Clone)]
pub enum UpstreamTls {
    /// Plain TCP.
    Disable,
    /// TLS with this connector and server name.
    Tls(TlsConnector, ServerName<'static>),
}

/// Builds the upstream TLS connector from `[upstream]`.
pub fn upstream_connector(config: &Config) -> Result<UpstreamTls, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let client = match config.upstream.tls_mode() {
        UpstreamTlsMode::Disable => return Ok(UpstreamTls::Disable),
        UpstreamTlsMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCertificateCheck(provider())))
            .with_no_client_auth(),
        UpstreamTlsMode::VerifyFull => {
            let ca = config.upstream.ca.as_deref().ok_or(TlsError::Missing("upstream.ca is not set"))?;
            let mut roots = RootCertStore::empty();
            for cert in load_certs("CA file", ca)? {
                roots.add(cert)?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    let name = config.upstream_server_name();
    let server_name = ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName(name))?;
    Ok(UpstreamTls::Tls(TlsConnector::from(Arc::new(client)), server_name))
}

/// `upstream.tls = "require"`: encrypt, but accept any certificate (signatures on the handshake are still
/// checked, so the session key belongs to whoever holds the certificate's key).
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
