//! Password authentication through the proxy (SCRAM-SHA-256, MD5, cleartext), wrong passwords, the removal of
//! channel binding (SCRAM-SHA-256-PLUS), and TLS from the proxy to the database.
//!
//! The shared PostgreSQL on 127.0.0.1:5432 trusts every loopback connection, and the tests must not change
//! its configuration, so this file starts a throwaway cluster of its own (initdb into a temporary directory,
//! run as the `postgres` OS user, on a free port, with TLS on and password rules in its pg_hba.conf) and
//! stops it at the end.

mod proxy_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proxy::Config;
use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::pg::backend::{Authentication, BackendMessage};
use wire::pg::{StartupPacket, split_frame};

/// The newest Debian-packaged server binaries (`/usr/lib/postgresql/<major>/bin`).
fn pg_bin() -> PathBuf {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    versions.sort_unstable();
    let bin = PathBuf::from(format!("/usr/lib/postgresql/{}/bin", versions.last().copied().unwrap_or(15)));
    assert!(
        bin.join("initdb").exists(),
        "{}/initdb is missing: install the postgresql package (scripts/services says how)",
        bin.display()
    );
    bin
}

/// A throwaway PostgreSQL cluster, stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    ca: PathBuf,
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn as_postgres(program: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--", program]);
    c
}

impl Cluster {
    fn start() -> Cluster {
        let bin = pg_bin();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::write(dir.path().join("pw"), "superpw\n").unwrap();
        sh(Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()));
        sh(as_postgres(&bin.join("initdb").display().to_string())
            .args(["-A", "scram-sha-256", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .arg(format!("--pwfile={}", dir.path().join("pw").display())));
        let (cert, key) = self_signed(&data, "server");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nssl = on\n\
             ssl_cert_file = '{}'\nssl_key_file = '{}'\nfsync = off\nshared_buffers = 16MB\nmax_connections = 20\n",
            dir.path().display(),
            cert.display(),
            key.display()
        );
        let mut pgconf = std::fs::OpenOptions::new().append(true).open(data.join("postgresql.conf")).unwrap();
        std::io::Write::write_all(&mut pgconf, conf.as_bytes()).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "host all md5_user 127.0.0.1/32 md5\nhost all clear_user 127.0.0.1/32 password\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::copy(&cert, &ca).unwrap();
        sh(Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()));
        sh(Command::new("chmod").arg("600").arg(&key));
        sh(as_postgres(&bin.join("pg_ctl").display().to_string())
            .args(["-w", "-t", "30", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(dir.path().join("server.log"))
            .arg("start"));
        let cluster = Cluster { dir, port, ca };
        let setup = "set password_encryption = 'md5'; create role md5_user login password 'md5pw'; \
                     set password_encryption = 'scram-sha-256'; create role clear_user login password 'clearpw'; \
                     create role scram_user login password 'scrampw';";
        sh(Command::new("psql")
            .arg(format!(
                "host=127.0.0.1 port={port} user=postgres dbname=postgres password=superpw sslmode=require"
            ))
            .args(["-X", "-v", "ON_ERROR_STOP=1", "-c", setup]));
        cluster
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&pg_bin().join("pg_ctl").display().to_string())
            .args(["-m", "immediate", "-D"])
            .arg(self.dir.path().join("data"))
            .arg("stop")
            .output();
    }
}

async fn proxy_for(cluster: &Cluster, upstream_tls: &str) -> TestProxy {
    proxy_with(cluster, upstream_tls, "").await
}

/// A proxy in front of `cluster`, with more `[upstream]` settings.
async fn proxy_with(cluster: &Cluster, upstream_tls: &str, upstream_extra: &str) -> TestProxy {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:{}\"\ntls = \"{upstream_tls}\"\n\
         ca = \"{}\"\nserver_name = \"localhost\"\n{upstream_extra}[log]\npath = \"{}\"\n[admin]\nenabled = false\n",
        cluster.port,
        cluster.ca.display(),
        dir.path().join("log").display()
    );
    let config = Config::parse(&toml, Path::new("<test>")).unwrap();
    TestProxy { handle: proxy::start(config).await.unwrap(), dir }
}

fn conn(p: &TestProxy, user: &str, password: &str) -> String {
    let a = p.handle.listen_addr();
    format!(
        "host=127.0.0.1 port={} user={user} password={password} dbname=postgres connect_timeout=10",
        a.port()
    )
}

/// Connects to the proxy and sends a startup packet for `user` (no database: it defaults to the user's).
async fn send_startup(p: &TestProxy, user: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    let mut buf = BytesMut::new();
    StartupPacket::Startup {
        major: 3,
        minor: 0,
        params: vec![(Bytes::from("user"), Bytes::copy_from_slice(user.as_bytes()))],
    }
    .encode(&mut buf);
    s.write_all(&buf).await.unwrap();
    s
}

/// The SASL mechanisms the proxy offers a client for `user`.
async fn offered_mechanisms(p: &TestProxy, user: &str) -> Vec<String> {
    let mut s = send_startup(p, user).await;
    let mut rbuf = BytesMut::new();
    loop {
        if let Some(f) = split_frame(&mut rbuf, 1 << 16).unwrap() {
            return match BackendMessage::decode(&f).unwrap() {
                BackendMessage::Authentication(Authentication::Sasl { mechanisms }) => {
                    mechanisms.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect()
                }
                other => panic!("expected AuthenticationSASL, got {other:?}"),
            };
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut rbuf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before the SASL request");
    }
}

/// Answers the SASL request for `user` with a message that declares `len` bytes, sends its first KiB only,
/// and returns the first message the proxy sends back (within 10 s), if any.
async fn declare_oversized_auth_reply(p: &TestProxy, user: &str, len: i32) -> Option<BackendMessage> {
    let mut s = send_startup(p, user).await;
    let mut rbuf = BytesMut::new();
    let mut answered = false;
    loop {
        if let Some(f) = split_frame(&mut rbuf, 1 << 16).unwrap() {
            let m = BackendMessage::decode(&f).unwrap();
            if answered {
                return Some(m);
            }
            assert!(matches!(m, BackendMessage::Authentication(Authentication::Sasl { .. })), "{m:?}");
            let mut reply = vec![b'p'];
            reply.extend_from_slice(&(len + 4).to_be_bytes());
            reply.extend_from_slice(&[b'x'; 1024]);
            s.write_all(&reply).await.unwrap();
            answered = true;
            continue;
        }
        match tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut rbuf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}

/// Before login the proxy holds no more of a client's message than PostgreSQL would (65,535 bytes of an
/// authentication message): a client that declares more is refused at once, by the proxy, without the
/// proxy waiting for (and buffering) the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_authentication_message_is_refused_before_it_is_buffered() {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let p = proxy_for(&cluster, "require").await;
    let reply = declare_oversized_auth_reply(&p, "scram_user", 60 << 20).await;
    match reply {
        Some(BackendMessage::ErrorResponse(e)) => {
            let text = format!("{e:?}");
            assert!(text.contains("krait: invalid authentication message"), "{text}");
        }
        other => panic!("expected the proxy's error, got {other:?}"),
    }
    // A client that does log in is not affected.
    let c = connect(&conn(&p, "scram_user", "scrampw")).await;
    let one: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    p.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_methods_relay_through_the_proxy_over_upstream_tls() {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    for upstream_tls in ["verify-full", "require"] {
        let p = proxy_for(&cluster, upstream_tls).await;
        for (user, password) in [("scram_user", "scrampw"), ("md5_user", "md5pw"), ("clear_user", "clearpw")]
        {
            let c = connect(&conn(&p, user, password)).await;
            let who: String = c.query_one("select current_user::text", &[]).await.unwrap().get(0);
            assert_eq!(who, user, "{upstream_tls}");
            // The database sees an encrypted connection from the proxy.
            let ssl: bool = c
                .query_one("select ssl from pg_stat_ssl where pid = pg_backend_pid()", &[])
                .await
                .unwrap()
                .get(0);
            assert!(ssl, "{upstream_tls}: the proxy's upstream connection is not TLS");
        }
        for (user, wrong) in [("scram_user", "nope"), ("md5_user", "nope"), ("clear_user", "nope")] {
            let err =
                tokio_postgres::connect(&conn(&p, user, wrong), tokio_postgres::NoTls).await.err().unwrap();
            let text = format!("{err:?}");
            assert!(text.contains("password authentication failed"), "{user}: {text}");
        }
        // Over TLS the database offers SCRAM-SHA-256-PLUS too; channel binding cannot cross the proxy.
        assert_eq!(offered_mechanisms(&p, "scram_user").await, vec!["SCRAM-SHA-256"]);
        // psql with a password, through the proxy.
        let (ok, out, err) =
            psql(&format!("{} sslmode=disable", conn(&p, "scram_user", "scrampw")), &["-c", "select 5"])
                .await;
        assert!(ok && out.trim() == "5", "{out} {err}");
        p.handle.shutdown().await.unwrap();
    }
}

/// A database that asks for a cleartext password over the proxy's unencrypted upstream connection gets none
/// (the client hears why), unless `allow_cleartext_password = true`; SCRAM is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleartext_password_crosses_plain_tcp_only_when_the_config_says_so() {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let p = proxy_for(&cluster, "disable").await;
    let err = tokio_postgres::connect(&conn(&p, "clear_user", "clearpw"), tokio_postgres::NoTls).await.err();
    let text = format!("{:?}", err.expect("the login is refused"));
    assert!(text.contains("in clear text") && text.contains("allow_cleartext_password"), "{text}");
    let c = connect(&conn(&p, "scram_user", "scrampw")).await;
    let who: String = c.query_one("select current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(who, "scram_user");
    p.handle.shutdown().await.unwrap();

    let p = proxy_with(&cluster, "disable", "allow_cleartext_password = true\n").await;
    let c = connect(&conn(&p, "clear_user", "clearpw")).await;
    let who: String = c.query_one("select current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(who, "clear_user");
    p.handle.shutdown().await.unwrap();
}
