//! Secrets at rest: a password a client sets through the proxy never reaches the history log's files, and
//! those files are their owner's alone.

mod proxy_support;

use proxy_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_set_through_the_proxy_never_reach_the_log_and_the_log_is_private() {
    let p = start_proxy().await;
    let role = unique("secret_role");
    let password = unique("pw_not_for_the_log");
    let scram = unique("SCRAM-SHA-256$4096:c2FsdA==$not_for_the_log");
    let c = p.connect().await;
    c.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await.unwrap();
    c.batch_execute(&format!("CREATE ROLE {role} WITH LOGIN ENCRYPTED PASSWORD '{password}'")).await.unwrap();
    c.batch_execute(&format!("ALTER ROLE {role} PASSWORD '{password}'")).await.unwrap();
    // The form psql's \password sends, inside a transaction block and through the extended protocol.
    c.batch_execute(&format!("BEGIN; ALTER USER \"{role}\" PASSWORD '{scram}'; COMMIT")).await.unwrap();
    c.execute(&format!("ALTER USER {role} PASSWORD '{password}'"), &[]).await.unwrap();
    c.batch_execute(&format!("DROP ROLE {role}")).await.unwrap();
    drop(c);
    let recorded = p.wait_for(&role, 6).await;
    let texts: Vec<&String> = recorded.iter().flat_map(|r| &r.txn.statements).collect();
    assert!(
        texts.iter().any(|s| s.contains(&role) && s.contains("PASSWORD '<redacted>'")),
        "the statements are recorded, redacted: {texts:?}"
    );
    let dir = p.dir.path().join("log");
    p.handle.shutdown().await.unwrap();

    let files = files_under(&dir);
    assert!(!files.is_empty());
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        for secret in [&password, &scram] {
            let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
            assert!(!found, "{} holds the password {secret}", file.display());
        }
    }
    let records = records_under(&dir);
    for secret in [&password, &scram] {
        assert!(!records.contains(secret.as_str()), "the log's records hold the password {secret}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for file in &files {
            assert_eq!(mode(file), 0o600, "{}", file.display());
        }
    }
}
