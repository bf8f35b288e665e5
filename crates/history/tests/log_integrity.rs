//! Integrity of the durable log: corrupt or truncated record values, planted with sled directly, are
//! reported with their sequence number, never skipped and never a panic; and the record decoder survives
//! arbitrary bytes.

use history::log::record::{HEADER_LEN, frame};
use history::log::{FORMAT_VERSION, LZ4_FORMAT_VERSION, RecordError, ZSTD_FORMAT_VERSION};
use history::{
    Durability, HistoryLog, KeyName, LogError, LogRecord, LoggedOp, LoggedTxn, Observed, Outcome, SessionId,
    SledLog, TxnId, WriteId,
};
use proptest::prelude::*;

fn sample_txn(id: u64) -> LoggedTxn {
    let mut t = LoggedTxn::new(TxnId(id), SessionId(id % 3), id);
    t.statements = vec!["UPDATE t SET v = 1 WHERE k = 'x'".into()];
    t.ops = vec![
        LoggedOp::Read {
            key: KeyName { namespace: "t".into(), bytes: b"x".to_vec() },
            observed: Observed::PreHistory(0),
            stmt: Some(0),
        },
        LoggedOp::Write {
            key: KeyName { namespace: "t".into(), bytes: b"x".to_vec() },
            write: WriteId(id),
            stmt: None,
        },
    ];
    t
}

/// Opens the log's sled store directly, waiting while the just-closed log's directory lock is still held:
/// sled releases it only when its background flusher exits, after `Db::drop` returns (as `SledLog::open`
/// waits, see `open_waiting_for_lock`).
fn sled_open(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match sled::open(dir) {
            Ok(db) => return db,
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("cannot open the log's sled store: {e}"),
        }
    }
}

/// Writes five transactions (after the definitions of their statement and namespace, records 0 and 1),
/// closes the log, then lets `damage` rewrite record 2's value (the first transaction) through sled.
fn log_with_damaged_record(damage: impl FnOnce(Vec<u8>) -> Vec<u8>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SledLog::open(dir.path(), Durability::Strict).unwrap();
        for i in 0..5 {
            let _ = log.append_finished(sample_txn(i), Outcome::Committed, Some(i)).unwrap();
        }
        log.close().unwrap();
    }
    let db = sled_open(dir.path());
    let records = db.open_tree(SledLog::RECORDS_TREE).unwrap();
    let key = 2u64.to_be_bytes();
    let value = records.get(key).unwrap().expect("record 2 exists").to_vec();
    records.insert(key, damage(value)).unwrap();
    db.flush().unwrap();
    dir
}

fn expect_corrupt_at_2(dir: &tempfile::TempDir) -> RecordError {
    let log = SledLog::open(dir.path(), Durability::Strict).expect("a clean log opens without scanning");
    let items: Vec<_> = log.tail(0).collect();
    // Records 0 and 1 define the statement text and the namespace; 2 to 6 are the five transactions.
    assert_eq!(items.len(), 7, "the corrupt record is reported in place, not skipped");
    assert!(items.iter().enumerate().all(|(i, item)| i == 2 || item.is_ok()));
    let replay_err = log.replay().unwrap_err();
    assert!(matches!(replay_err, LogError::Corrupt { seq: 2, .. }), "{replay_err}");
    assert!(replay_err.to_string().contains("record 2"), "the message names the record: {replay_err}");
    match items.into_iter().nth(2).unwrap() {
        Err(LogError::Corrupt { seq: 2, source }) => source,
        other => panic!("record 2 should be corrupt, got {other:?}"),
    }
}

#[test]
fn a_flipped_payload_bit_is_a_checksum_error_naming_the_record() {
    let dir = log_with_damaged_record(|mut v| {
        let last = v.len() - 1;
        v[last] ^= 0x10;
        v
    });
    assert!(matches!(expect_corrupt_at_2(&dir), RecordError::Checksum { .. }));
}

#[test]
fn a_truncated_record_is_reported_not_skipped() {
    let dir = log_with_damaged_record(|mut v| {
        v.truncate(v.len() / 2);
        v
    });
    assert!(matches!(expect_corrupt_at_2(&dir), RecordError::Checksum { .. }));
    let dir = log_with_damaged_record(|mut v| {
        v.truncate(3);
        v
    });
    assert_eq!(expect_corrupt_at_2(&dir), RecordError::Truncated { len: 3 });
}

#[test]
fn a_record_from_a_newer_format_is_a_version_error() {
    let dir = log_with_damaged_record(|v| {
        // A well-formed header for the next version: the checksum covers the new version byte.
        frame(ZSTD_FORMAT_VERSION + 1, &v[5..])
    });
    assert_eq!(expect_corrupt_at_2(&dir), RecordError::Version { found: ZSTD_FORMAT_VERSION + 1 });
}

#[test]
fn a_corrupt_record_in_a_crashed_run_stops_recovery_with_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SledLog::open(dir.path(), Durability::Strict).unwrap();
        for i in 0..3 {
            let _ = log.append_intent(sample_txn(i)).unwrap();
        }
        log.drop_as_if_crashed();
    }
    {
        let db = sled_open(dir.path());
        let records = db.open_tree(SledLog::RECORDS_TREE).unwrap();
        records.insert(1u64.to_be_bytes(), &b"\x01garbage"[..]).unwrap();
        db.flush().unwrap();
    }
    let err = SledLog::open(dir.path(), Durability::Strict).unwrap_err();
    assert!(matches!(err, LogError::Corrupt { seq: 1, .. }), "{err}");
}

#[test]
fn a_foreign_key_in_the_records_tree_is_reported() {
    let dir = log_with_damaged_record(|v| v);
    {
        let db = sled_open(dir.path());
        db.open_tree(SledLog::RECORDS_TREE)
            .unwrap()
            .insert(b"\x00\x00\x00\x00\x00\x00\x00\x02x", &b""[..])
            .unwrap();
        db.flush().unwrap();
    }
    let log = SledLog::open(dir.path(), Durability::Strict).unwrap();
    let err = log.replay().unwrap_err();
    assert!(matches!(err, LogError::BadKey { after: Some(2), .. }), "{err}");
}

#[test]
fn session_ended_is_the_last_variant_so_older_logs_keep_their_tags() {
    // postcard writes the variant index first: Intent 0 .. Recovery 3 must not move.
    let bytes = LogRecord::SessionEnded { session: SessionId(1), last_seq: None }.encode().unwrap();
    assert_eq!(bytes[HEADER_LEN], 4);
    let bytes = LogRecord::Recovery { indeterminate: vec![], gap: false, previous: None }.encode().unwrap();
    assert_eq!(bytes[HEADER_LEN], 3);
}

#[test]
fn encode_then_decode_is_the_identity_for_every_record_kind() {
    let records = vec![
        LogRecord::Intent(sample_txn(1)),
        LogRecord::Outcome { txn: TxnId(1), outcome: Outcome::Committed, commit_ns: Some(u64::MAX) },
        LogRecord::Outcome { txn: TxnId(2), outcome: Outcome::Indeterminate, commit_ns: None },
        LogRecord::Finished { txn: sample_txn(3), outcome: Outcome::Aborted, commit_ns: None },
        LogRecord::Recovery {
            indeterminate: vec![TxnId(4), TxnId(5)],
            gap: true,
            previous: Some(Durability::None),
        },
        LogRecord::SessionEnded { session: SessionId(6), last_seq: Some(u64::MAX) },
        LogRecord::SessionEnded { session: SessionId(7), last_seq: None },
    ];
    for r in records {
        let bytes = r.encode().unwrap();
        assert_eq!(bytes[0], FORMAT_VERSION);
        assert_eq!(LogRecord::decode(&bytes).unwrap(), r);
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(LogRecord::decode(&longer).is_err(), "an extra byte breaks the checksum");
    }
}

/// A large record with text in it is stored compressed (zstd) and reads back the same; a compressed payload
/// that states a length it does not expand to, or an absurd one, is malformed, not a panic or a huge
/// allocation.
#[test]
fn a_large_record_is_stored_compressed_and_a_lying_length_is_malformed() {
    let mut txn = sample_txn(7);
    txn.statements =
        vec!["SELECT body FROM tweets WHERE id = $1 -- and again, and again, and again".repeat(4)];
    let text = txn.statements[0].len();
    let record = LogRecord::Intent(txn);
    let bytes = record.encode().unwrap();
    assert_eq!(bytes[0], ZSTD_FORMAT_VERSION);
    assert!(bytes.len() < text, "{} bytes stored for a record holding {text} bytes of text", bytes.len());
    assert_eq!(LogRecord::decode(&bytes).unwrap(), record);

    for delta in [1u8, 255] {
        // One byte more, or one fewer, than the frame holds.
        let mut lying = bytes[5..].to_vec();
        lying[0] = lying[0].wrapping_add(delta);
        let err = LogRecord::decode(&frame(ZSTD_FORMAT_VERSION, &lying)).unwrap_err();
        assert!(matches!(&err, RecordError::Malformed { reason } if reason.contains("expand")), "{err}");
    }
    let mut absurd = bytes[5..].to_vec();
    absurd[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = LogRecord::decode(&frame(ZSTD_FORMAT_VERSION, &absurd)).unwrap_err();
    assert!(matches!(&err, RecordError::Malformed { reason } if reason.contains("above")), "{err}");
}

/// Logs written before zstd hold LZ4 records (version 2): they still read, and their length is checked the
/// same way.
#[test]
fn an_lz4_record_of_an_older_log_still_reads() {
    let mut txn = sample_txn(9);
    txn.statements = vec!["UPDATE accounts SET balance = $2 WHERE id = $1 -- once more".repeat(4)];
    let record = LogRecord::Intent(txn);
    let payload = postcard::to_allocvec(&record).unwrap();
    let compressed = lz4_flex::block::compress_prepend_size(&payload);
    assert!(compressed.len() < payload.len());
    assert_eq!(LogRecord::decode(&frame(LZ4_FORMAT_VERSION, &compressed)).unwrap(), record);

    let mut lying = compressed.clone();
    lying[0] = lying[0].wrapping_add(1);
    let err = LogRecord::decode(&frame(LZ4_FORMAT_VERSION, &lying)).unwrap_err();
    assert!(matches!(&err, RecordError::Malformed { reason } if reason.contains("expand")), "{err}");
    let mut absurd = compressed;
    absurd[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = LogRecord::decode(&frame(LZ4_FORMAT_VERSION, &absurd)).unwrap_err();
    assert!(matches!(&err, RecordError::Malformed { reason } if reason.contains("above")), "{err}");
}

#[test]
fn trailing_payload_bytes_with_a_valid_checksum_are_rejected() {
    let bytes =
        LogRecord::Outcome { txn: TxnId(1), outcome: Outcome::Aborted, commit_ns: None }.encode().unwrap();
    let mut payload = bytes[5..].to_vec();
    payload.extend_from_slice(&[0, 0]);
    let forged = frame(FORMAT_VERSION, &payload);
    assert_eq!(LogRecord::decode(&forged), Err(RecordError::Trailing { count: 2 }));
}

proptest! {
    #[test]
    fn the_decoder_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = LogRecord::decode(&bytes);
        // Behind a valid header, so that the payload decoder sees the bytes instead of the checksum
        // rejecting them.
        if let Ok(record) = LogRecord::decode(&frame(FORMAT_VERSION, &bytes)) {
            // Whatever decodes must round-trip.
            prop_assert_eq!(LogRecord::decode(&record.encode().unwrap()), Ok(record));
        }
        // And behind a compressed record's header (zstd, or LZ4 as older logs hold), where the decompressor
        // sees them first.
        for version in [ZSTD_FORMAT_VERSION, LZ4_FORMAT_VERSION] {
            if let Ok(record) = LogRecord::decode(&frame(version, &bytes)) {
                prop_assert_eq!(LogRecord::decode(&record.encode().unwrap()), Ok(record));
            }
        }
    }

    #[test]
    fn any_single_byte_change_to_a_record_is_detected(at in 0usize..1_000, xor in 1u8..=255) {
        let bytes = LogRecord::Intent(sample_txn(42)).encode().unwrap();
        let mut damaged = bytes.clone();
        let i = at % damaged.len();
        damaged[i] ^= xor;
        prop_assert!(LogRecord::decode(&damaged).is_err());
    }
}
