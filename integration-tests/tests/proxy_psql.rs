//! psql through the proxy, with TLS off and on (a self-signed certificate made in the test with rcgen).

mod proxy_support;

use history::Outcome;
use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_runs_a_script_through_the_proxy_without_tls() {
    let p = start_proxy().await;
    let t = unique_table("psql_plain");
    let script = format!(
        "drop table if exists {t}; create table {t} (id int primary key, v text); \
         insert into {t} values (1, 'one'), (2, 'two'); \
         begin; update {t} set v = 'uno' where id = 1; commit; \
         select v from {t} order by id;"
    );
    let (ok, out, err) = psql(&format!("{} sslmode=disable", p.conn_str()), &["-c", &script]).await;
    assert!(ok, "psql failed: {err}");
    assert!(out.ends_with("COMMIT\nuno\ntwo\n"), "{out}");
    // psql sends the whole -c string as one simple Query. Its COMMIT ends the first transaction (which the
    // BEGIN turned from implicit into explicit); the SELECT after it runs in a second, implicit one.
    let txns = p.wait_for(&t, 2).await;
    assert_eq!(outcomes(&txns), vec![Some(Outcome::Committed); 2], "{txns:#?}");
    assert!(txns[0].commit_ns.is_some());
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_connects_with_tls_and_verifies_the_proxy_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(certs.path(), "server");
    let p = start_proxy_with(Opts { tls: Some((cert.clone(), key, "prefer")), ..Opts::default() }).await;
    let a = p.handle.listen_addr();
    let verify_full = format!(
        "host=localhost port={} user={PG_USER} dbname={PG_DB} sslmode=verify-full sslrootcert={}",
        a.port(),
        cert.display()
    );
    let (ok, out, err) = psql(&verify_full, &["-c", "\\conninfo", "-c", "select 40 + 2"]).await;
    assert!(ok, "psql over TLS failed: {err}");
    assert!(out.contains("SSL connection"), "not encrypted: {out}");
    assert!(out.contains("42"), "{out}");
    // Under prefer, plaintext clients are still served.
    let (ok, out, err) = psql(&format!("{} sslmode=disable", p.conn_str()), &["-c", "select 7"]).await;
    assert!(ok && out.trim() == "7", "{out} {err}");
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_require_refuses_plaintext_clients_with_a_clear_error() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(certs.path(), "server");
    let p = start_proxy_with(Opts { tls: Some((cert, key, "require")), ..Opts::default() }).await;
    let (ok, _, err) = psql(&format!("{} sslmode=disable", p.conn_str()), &["-c", "select 1"]).await;
    assert!(!ok);
    assert!(err.contains("requires TLS"), "{err}");
    let (ok, out, err) = psql(&format!("{} sslmode=require", p.conn_str()), &["-c", "select 1"]).await;
    assert!(ok && out.trim() == "1", "{out} {err}");
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaded_certificate_is_used_for_new_connections() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(certs.path(), "server");
    let first_pem = std::fs::read(&cert).unwrap();
    let p =
        start_proxy_with(Opts { tls: Some((cert.clone(), key.clone(), "require")), ..Opts::default() }).await;
    let port = p.handle.listen_addr().port();
    let verify = |root: &std::path::Path| {
        format!(
            "host=localhost port={port} user={PG_USER} dbname={PG_DB} sslmode=verify-full sslrootcert={}",
            root.display()
        )
    };
    let old_root = certs.path().join("old-root.crt");
    std::fs::write(&old_root, &first_pem).unwrap();
    // Renew: new files in place, then what SIGHUP does.
    let fresh = tempfile::tempdir().unwrap();
    let (new_cert, new_key) = self_signed(fresh.path(), "renewed");
    std::fs::copy(&new_cert, &cert).unwrap();
    std::fs::copy(&new_key, &key).unwrap();
    p.handle.reload_tls().unwrap();
    let (ok, _, err) = psql(&verify(&new_cert), &["-c", "select 1"]).await;
    assert!(ok, "the renewed certificate is not served: {err}");
    let (ok, _, _) = psql(&verify(&old_root), &["-c", "select 1"]).await;
    assert!(!ok, "the old certificate is still served");
    // A broken renewal keeps the working certificate.
    std::fs::write(&key, "not a key").unwrap();
    assert!(p.handle.reload_tls().is_err());
    let (ok, _, err) = psql(&verify(&new_cert), &["-c", "select 1"]).await;
    assert!(ok, "a failed reload broke TLS: {err}");
    p.handle.shutdown().await.unwrap();
}

/// PostgreSQL 17 "direct TLS" (`sslnegotiation=direct`): the client starts the TLS handshake at once, with
/// ALPN `postgresql`, instead of sending SSLRequest. psql here is older, so a rustls client plays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_with_alpn_postgresql_is_accepted_and_without_alpn_refused() {
    use bytes::{Bytes, BytesMut};
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wire::pg::backend::BackendMessage;
    use wire::pg::split_frame;

    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(certs.path(), "server");
    let p = start_proxy_with(Opts { tls: Some((cert.clone(), key, "require")), ..Opts::default() }).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from_pem_file(&cert).unwrap()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client_config = |alpn: bool| {
        let mut c = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        if alpn {
            c.alpn_protocols = vec![b"postgresql".to_vec()];
        }
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(c))
    };
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();

    let tcp = tokio::net::TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    let mut tls = client_config(true).connect(name.clone(), tcp).await.unwrap();
    // Startup and a query in one write, over direct TLS.
    let mut buf = proxy_support::startup_packet();
    wire::pg::FrontendMessage::Query { sql: Bytes::from("select 'direct'") }.encode(&mut buf);
    tls.write_all(&buf).await.unwrap();
    let mut rbuf = BytesMut::new();
    let mut got_row = false;
    let mut ready = 0;
    while ready < 2 {
        if let Some(f) = split_frame(&mut rbuf, 1 << 20).unwrap() {
            match BackendMessage::decode(&f).unwrap() {
                BackendMessage::DataRow { values } => got_row = values[0].as_deref() == Some(&b"direct"[..]),
                BackendMessage::ReadyForQuery(_) => ready += 1,
                BackendMessage::ErrorResponse(e) => panic!("{e:?}"),
                _ => {}
            }
            continue;
        }
        let n =
            tokio::time::timeout(std::time::Duration::from_secs(10), tls.read_buf(&mut rbuf)).await.unwrap();
        assert!(n.unwrap() > 0, "closed early");
    }
    assert!(got_row);

    // Without ALPN, direct TLS is refused (PostgreSQL 17 does the same, against cross-protocol attacks).
    let tcp = tokio::net::TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    let refused = match client_config(false).connect(name, tcp).await {
        Err(_) => true,
        Ok(mut tls) => {
            let mut rest = Vec::new();
            let r = tokio::time::timeout(std::time::Duration::from_secs(10), tls.read_to_end(&mut rest))
                .await
                .unwrap();
            r.is_err() || rest.is_empty()
        }
    };
    assert!(refused);
    p.handle.shutdown().await.unwrap();
}
