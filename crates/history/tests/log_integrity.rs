//! Integrity of the durable log: corrupt or truncated record values, planted in the segment files directly,
//! are reported with their sequence number, never skipped and never a panic; what a crash tears at the end
//! of the last segment is cut, and the same damage in a cleanly closed log is refused; and the record
//! decoder survives arbitrary bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use history::log::record::{HEADER_LEN, frame};
use history::log::store::segments::{SEGMENT_MAGIC, SEGMENTS_DIR};
use history::log::store::sled_store::{META_TREE, RECORDS_TREE};
use history::log::{FORMAT_VERSION, LZ4_FORMAT_VERSION, LogOptions, RecordError, ZSTD_FORMAT_VERSION};
use history::{
    DiskLog, Durability, HistoryLog, KeyName, LogError, LogRecord, LoggedOp, LoggedTxn, Observed, Outcome,
    SessionId, TxnId, WriteId,
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

/// Opens a sled store directly (a log written before the segment store), waiting while a just-closed one's
/// directory lock is still held: sled releases it only when its background flusher exits.
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

/// The log's only segment file.
fn only_segment(dir: &Path) -> PathBuf {
    let segments: Vec<PathBuf> =
        std::fs::read_dir(dir.join(SEGMENTS_DIR)).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    segments.into_iter().next().unwrap()
}

/// The record values in a segment file, read by its documented layout (independently of the store's code).
fn read_frames(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..SEGMENT_MAGIC.len()], SEGMENT_MAGIC);
    let mut rest = &bytes[SEGMENT_MAGIC.len()..];
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        frames.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    frames
}

fn write_frames(path: &Path, frames: &[Vec<u8>]) {
    let mut bytes = SEGMENT_MAGIC.to_vec();
    for frame in frames {
        bytes.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        bytes.extend_from_slice(frame);
    }
    std::fs::write(path, bytes).unwrap();
}

/// Writes five transactions (after the definitions of their statement and namespace, records 0 and 1),
/// closes the log, then lets `damage` rewrite record 2's value (the first transaction) in its segment file.
fn log_with_damaged_record(damage: impl FnOnce(Vec<u8>) -> Vec<u8>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        for i in 0..5 {
            let _ = log.append_finished(sample_txn(i), Outcome::Committed, Some(i)).unwrap();
        }
        log.close().unwrap();
    }
    let segment = only_segment(dir.path());
    let mut frames = read_frames(&segment);
    frames[2] = damage(std::mem::take(&mut frames[2]));
    write_frames(&segment, &frames);
    dir
}

fn expect_corrupt_at_2(dir: &tempfile::TempDir) -> RecordError {
    let log = DiskLog::open(dir.path(), Durability::Strict).expect("a clean log opens without scanning");
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
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap();
        for i in 0..3 {
            let _ = log.append_intent(sample_txn(i)).unwrap();
        }
        log.drop_as_if_crashed();
    }
    let segment = only_segment(dir.path());
    let mut frames = read_frames(&segment);
    frames[1] = b"\x01garbage".to_vec();
    write_frames(&segment, &frames);
    let err = DiskLog::open(dir.path(), Durability::Strict).unwrap_err();
    assert!(matches!(err, LogError::Corrupt { seq: 1, .. }), "{err}");
}

/// In a log written before the segment store (sled's), a key that is not a sequence number is reported.
#[test]
fn a_foreign_key_in_a_sled_log_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled_open(dir.path());
        db.open_tree(META_TREE).unwrap().insert("format", b"krait-history-log 1".as_slice()).unwrap();
        let records = db.open_tree(RECORDS_TREE).unwrap();
        let value = LogRecord::SessionEnded { session: SessionId(1), last_seq: None }.encode().unwrap();
        for seq in 0..5u64 {
            records.insert(seq.to_be_bytes(), value.as_slice()).unwrap();
        }
        records.insert(b"\x00\x00\x00\x00\x00\x00\x00\x02x", &b""[..]).unwrap();
        db.flush().unwrap();
    }
    // No transaction-id floor is stored, so opening scans the records, and meets the key.
    let err = DiskLog::open(dir.path(), Durability::Strict).unwrap_err();
    assert!(matches!(err, LogError::BadKey { after: Some(2), .. }), "{err}");
}

/// Appends five transactions, then leaves the log as a crash would (no clean close), or closes it.
fn five_transactions(dir: &Path, crash: bool) {
    let log = DiskLog::open(dir, Durability::Strict).unwrap();
    for i in 0..5 {
        log.append_finished(sample_txn(i), Outcome::Committed, Some(i)).unwrap().wait().unwrap();
    }
    match crash {
        true => log.drop_as_if_crashed(),
        false => log.close().unwrap(),
    }
}

/// The ways a crash tears the end of the last segment: part of a frame's length, a frame cut short, a
/// whole-length frame whose bytes did not all reach the disk.
fn torn_ends() -> Vec<(&'static str, Vec<u8>)> {
    let whole = LogRecord::SessionEnded { session: SessionId(9), last_seq: None }.encode().unwrap();
    let mut frame = (whole.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&whole);
    let mut garbled = frame.clone();
    *garbled.last_mut().unwrap() ^= 0xff;
    vec![
        ("half a length", frame[..2].to_vec()),
        ("a cut frame", frame[..frame.len() - 3].to_vec()),
        ("a frame whose checksum fails", garbled),
    ]
}

/// A log of five transactions, crashed or closed cleanly, with `tail` appended to its only segment; and
/// that segment.
fn log_ending_in(tail: &[u8], crash: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    five_transactions(dir.path(), crash);
    let segment = only_segment(dir.path());
    std::fs::OpenOptions::new().append(true).open(&segment).unwrap().write_all(tail).unwrap();
    (dir, segment)
}

/// After a crash, what was torn at the end of the last segment is cut, and everything before it reads.
#[test]
fn a_torn_end_after_a_crash_is_cut_and_the_rest_reads() {
    for (what, tail) in torn_ends() {
        let (dir, segment) = log_ending_in(&tail, true);
        let whole = std::fs::metadata(&segment).unwrap().len() - tail.len() as u64;
        let log = DiskLog::open(dir.path(), Durability::Strict).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(log.replay().unwrap().transactions.len(), 5, "{what}");
        // The recovery record went where the torn one was.
        let records: Vec<_> = log.tail(0).map(|r| r.unwrap().1).collect();
        assert!(matches!(records.last(), Some(LogRecord::Recovery { .. })), "{what}: {records:?}");
        log.close().unwrap();
        drop(log);
        assert!(std::fs::metadata(&segment).unwrap().len() > whole, "{what}: appends went on after the cut");
        assert_eq!(
            DiskLog::open(dir.path(), Durability::Strict).unwrap().replay().unwrap().transactions.len(),
            5
        );
    }
}

/// The same bytes at the end of a log that was closed cleanly are damage, not a crash: opening refuses,
/// naming the record and the segment, and cuts nothing.
#[test]
fn a_torn_end_in_a_cleanly_closed_log_is_refused() {
    for (what, tail) in torn_ends() {
        let (dir, segment) = log_ending_in(&tail, false);
        let size = std::fs::metadata(&segment).unwrap().len();
        let err = DiskLog::open(dir.path(), Durability::Strict).unwrap_err();
        assert!(matches!(err, LogError::Inconsistent { seq: 7, .. }), "{what}: {err}");
        assert!(err.to_string().contains("closed cleanly"), "{what}: {err}");
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), size, "{what}: nothing was cut");
    }
}

/// With small segments the log spans many files: a tail from any record reads the same records as a whole
/// replay does from there, across segment boundaries and after a reopen.
#[test]
fn records_span_segments_and_read_back_from_any_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = LogOptions::new(Durability::None);
    options.segment_bytes = 600;
    let all: Vec<(u64, LogRecord)> = {
        let log = DiskLog::open_with(dir.path(), options).unwrap();
        for i in 0..300 {
            let _ = log.append_finished(sample_txn(i), Outcome::Committed, Some(i)).unwrap();
        }
        let all = log.tail(0).map(Result::unwrap).collect();
        log.close().unwrap();
        all
    };
    assert_eq!(all.len(), 302);
    let segments = std::fs::read_dir(dir.path().join(SEGMENTS_DIR)).unwrap().count();
    assert!(segments > 10, "{segments} segments");
    let log = DiskLog::open_with(dir.path(), options).unwrap();
    for from in [0, 1, 2, 127, 128, 129, 150, 255, 256, 301, 302] {
        let tail: Vec<(u64, LogRecord)> = log.tail(from).map(Result::unwrap).collect();
        assert_eq!(tail, all[from as usize..], "tail from {from}");
    }
    assert_eq!(log.replay().unwrap().transactions.len(), 300);
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
