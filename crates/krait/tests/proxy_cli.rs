//! `krait proxy` and `krait config check` through the binary, against the machine's real PostgreSQL: psql
//! runs transactions through the proxy, SIGTERM stops it cleanly, and the log it leaves is a history that
//! `krait history stats` and `krait verify` read.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::krait;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds an ephemeral port");
    listener.local_addr().expect("has an address").port()
}

fn write_config(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let config = dir.join("krait.toml");
    let text = format!(
        "[listen]\naddress = \"127.0.0.1:{port}\"\n[tls]\nmode = \"disable\"\n[upstream]\naddress = \
         \"127.0.0.1:5432\"\n[log]\npath = \"{}\"\n[admin]\nenabled = false\n",
        dir.join("log").display()
    );
    std::fs::write(&config, text).expect("writes the config");
    config
}

#[test]
fn config_check_accepts_the_shipped_example_and_names_the_bad_setting_otherwise() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/krait.toml");
    let dir = tempfile::tempdir().expect("a temp dir");
    // The example requires client TLS with a pair under /etc/krait, which `config init-tls` writes.
    let tls_dir = dir.path().join("tls");
    let out = krait(&["config", "init-tls", tls_dir.to_str().expect("utf-8 path")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("SHA-256 fingerprint: ") && stdout.contains("mode = \"require\""), "{stdout}");
    let text = std::fs::read_to_string(example).expect("reads the example");
    assert!(text.contains("mode = \"require\"\n"), "the example requires client TLS");
    let local = dir.path().join("example.toml");
    std::fs::write(&local, text.replace("/etc/krait", tls_dir.to_str().expect("utf-8 path")))
        .expect("writes");
    let out = krait(&["config", "check", local.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Without the pair, the check names the missing file.
    let out = krait(&["config", "check", example]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/etc/krait/server.crt"));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, text.replace("durability = \"strict\"", "durability = \"fast\"")).expect("writes");
    let out = krait(&["config", "check", bad.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("durability"), "{stderr}");
}

/// `config init-tls` keeps the key to its owner, never overwrites a pair unless told to, and the pair works:
/// the proxy serves TLS with it.
#[test]
fn init_tls_writes_a_private_key_and_refuses_to_overwrite() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temp dir");
    let tls = dir.path().join("tls");
    let tls_s = tls.to_str().expect("utf-8 path");
    let out = krait(&["config", "init-tls", tls_s, "--name", "proxy.example", "--name", "10.0.0.7"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&tls.join("server.key")), 0o600);
    assert_eq!(mode(&tls), 0o700);
    let key_before = std::fs::read(tls.join("server.key")).expect("the key");
    let again = krait(&["config", "init-tls", tls_s]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(std::fs::read(tls.join("server.key")).expect("the key"), key_before, "the key is kept");
    let forced = krait(&["config", "init-tls", tls_s, "--force"]);
    assert!(forced.status.success());
    assert_ne!(std::fs::read(tls.join("server.key")).expect("the key"), key_before);
    let config = dir.path().join("tls.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddress = \"127.0.0.1:0\"\n[tls]\nmode = \"require\"\ncert = \"{tls_s}/server.crt\"\n\
             key = \"{tls_s}/server.key\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n[log]\npath = \"{}/log\"\n",
            dir.path().display()
        ),
    )
    .expect("writes the config");
    let out = krait(&["config", "check", config.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn proxy_records_psql_transactions_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let config = write_config(dir.path(), port);
    let mut child = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["proxy", "--config", config.to_str().expect("utf-8 path")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts krait proxy");

    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "krait proxy did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = format!("krait_cli_{}", std::process::id());
    let sql = format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);\n\
         BEGIN; INSERT INTO {table} VALUES (1, 1); COMMIT;\n\
         BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; COMMIT;\n\
         SELECT v FROM {table} WHERE k = 1;\nDROP TABLE {table};\n"
    );
    let psql = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "test", "-X", "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-t", "-A", "-c", &sql])
        .output()
        .expect("runs psql");
    assert!(psql.status.success(), "psql through krait: {}", String::from_utf8_lossy(&psql.stderr));
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "2");

    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("runs kill");
    assert!(killed.success());
    let status = child.wait().expect("krait proxy exits");
    assert!(status.success(), "krait proxy exited with {status}");

    let log = dir.path().join("log");
    let out = krait(&["history", "stats", "--json", log.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats are JSON");
    assert!(stats["committed"].as_u64().expect("a count") >= 2, "{stats}");
    assert_eq!(stats["indeterminate"], 0, "{stats}");
}

/// At the most verbose KRAIT_LOG, no SQL text reaches the proxy's output (sqlparser logs every text it parses
/// at debug), and a password set through the proxy reaches neither its output nor its log's files.
#[test]
fn proxy_output_at_trace_and_its_log_hold_no_sql_text_or_password() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let config = write_config(dir.path(), port);
    let mut child = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["proxy", "--config", config.to_str().expect("utf-8 path")])
        .env("KRAIT_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts krait proxy");
    // Trace output is far larger than a pipe holds: read both pipes while the proxy runs, or it blocks on a
    // write and stops answering.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "krait proxy did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = std::process::id();
    let role = format!("krait_cli_role_{pid}");
    let password = format!("krait_cli_pw_{pid}");
    let marker = format!("krait_cli_marker_{pid}");
    let table = format!("krait_cli_trace_{pid}");
    let sql = format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD '{password}';\n\
         ALTER ROLE {role} PASSWORD '{password}'; DROP ROLE {role};\n\
         DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v text);\n\
         BEGIN; INSERT INTO {table} VALUES (1, '{marker}'); COMMIT;\n\
         SELECT v FROM {table} WHERE v = '{marker}';\nDROP TABLE {table};\n"
    );
    let psql = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "test", "-X", "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-t", "-A", "-c", &sql])
        .output()
        .expect("runs psql");
    assert!(psql.status.success(), "psql through krait: {}", String::from_utf8_lossy(&psql.stderr));
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("runs kill");
    assert!(killed.success());
    let status = child.wait().expect("krait proxy exits");
    assert!(status.success(), "krait proxy exited with {status}");

    let output = [stdout.join().expect("stdout reader"), stderr.join().expect("stderr reader")].concat();
    let text = String::from_utf8_lossy(&output);
    assert!(text.contains("TRACE") || text.contains("DEBUG"), "KRAIT_LOG=trace was in force: {text}");
    for secret in [&password, &marker, &table] {
        assert!(!text.contains(secret.as_str()), "the proxy's output holds {secret}: {text}");
        // Also as the list of decimal bytes a storage engine's trace prints a record's value as.
        let bytes: Vec<String> = secret.bytes().map(|b| b.to_string()).collect();
        assert!(!text.contains(&bytes.join(", ")), "the proxy's output holds {secret}'s bytes: {text}");
    }
    let log = dir.path().join("log");
    let mut stack = vec![log];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).expect("lists").map(|e| e.expect("an entry").path()));
        } else {
            let bytes = std::fs::read(&path).expect("reads a log file");
            let found = bytes.windows(password.len()).any(|w| w == password.as_bytes());
            assert!(!found, "{} holds the password", path.display());
        }
    }
}
