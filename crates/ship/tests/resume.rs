//! A restarted shipper fills the hole a killed one left in the stream (through a real `nats-server`, which
//! `scripts/test` installs).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use history::log::merge::Heartbeat;
use history::{
    CollectorId, DiskLog, Durability, HistoryLog, LogRecord, LoggedTxn, Outcome, SessionId, TxnId,
};
use ship::local::LocalNats;
use ship::{Counters, Incoming, ShipConfig, Shipper, Source, StreamStart, message};

const COLLECTOR: CollectorId = CollectorId(1);

/// A shipper killed mid-batch across a NATS restart can leave records 5 and 6 missing while 7 and 8 reached
/// the new server. Its successor must resume from what the last heartbeat covered (5), not after the last
/// record (9): the verifier would wait for record 5 forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_shipper_fills_the_hole_a_killed_one_left() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let nats = LocalNats::start(&dir.path().join("nats")).unwrap_or_else(|e| panic!("{e}"));
    let log = DiskLog::open(dir.path().join("log"), Durability::None).expect("opens a log");
    for id in 1..=10 {
        let txn = LoggedTxn::new(TxnId(id), SessionId(1), id - 1);
        let _ticket = log.append_finished(txn, Outcome::Committed, Some(id)).expect("appends");
    }
    log.sync().expect("syncs");
    let total = log.next_seq();
    let records: Vec<_> = log.tail(0).map(|r| r.expect("reads the log")).collect();
    assert_eq!(records.len() as u64, total);

    // What the killed shipper left: records 0–4 and a heartbeat covering them, then 7 and 8 of its next batch.
    let record = |(seq, record): &(u64, LogRecord)| {
        let (headers, payload) = message::record_message(COLLECTOR, *seq, record).expect("encodes");
        (message::subject(COLLECTOR), headers, payload)
    };
    let beat = Heartbeat { below: 5, appended_before_ns: 1, read_at_ns: 1 };
    let (headers, payload) = message::heartbeat_message(&beat).expect("encodes");
    let mut left = records[..5].iter().map(record).collect::<Vec<_>>();
    left.push((message::beat_subject(COLLECTOR), headers, payload));
    left.extend(records[7..9].iter().map(record));
    nats.publish(ship::DEFAULT_STREAM, left).await.unwrap_or_else(|e| panic!("{e}"));

    let config = ShipConfig { nats: nats.url(), stream: ship::DEFAULT_STREAM.to_owned() };
    let shipper = Shipper::spawn(Arc::new(log) as Arc<dyn HistoryLog>, COLLECTOR, config);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Counters::get(&shipper.counters().shipped_below) < total {
        assert!(Instant::now() < deadline, "the shipper did not catch up in 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shipper.finish(Duration::from_secs(5)).await;

    let (source, mut deliveries) =
        Source::spawn(nats.url(), ship::DEFAULT_STREAM.to_owned(), &[], StreamStart::default());
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen = BTreeSet::new();
        while let Ok(Some(delivery)) = deliveries.recv_timeout(Duration::from_secs(1)) {
            if let Incoming::Record { seq, .. } = delivery.expect("a readable message").incoming {
                seen.insert(seq);
            }
        }
        seen
    })
    .await
    .expect("the reader thread");
    source.stop();
    assert_eq!(seen, (0..total).collect::<BTreeSet<_>>(), "every record of the log is in the stream");
}

/// The server loses messages the reader had delivered (here the stream is deleted and made again) and
/// gives their sequence numbers to what shippers send next: the reader must not skip those as read. It
/// reads the stream again from its start, and the merger drops what it already has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_reads_again_what_a_stream_that_lost_messages_stores_under_their_numbers() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let nats = LocalNats::start(&dir.path().join("nats")).unwrap_or_else(|e| panic!("{e}"));
    let record = |seq: u64| {
        let txn = LoggedTxn::new(TxnId(seq + 1), SessionId(1), seq);
        let record = LogRecord::Finished { txn, outcome: Outcome::Committed, commit_ns: Some(seq) };
        let (headers, payload) = message::record_message(COLLECTOR, seq, &record).expect("encodes");
        (message::subject(COLLECTOR), headers, payload)
    };
    nats.publish(ship::DEFAULT_STREAM, (0..5).map(record).collect()).await.unwrap_or_else(|e| panic!("{e}"));
    let (source, deliveries) =
        Source::spawn(nats.url(), ship::DEFAULT_STREAM.to_owned(), &[], StreamStart::default());
    let (deliveries, seen) = read_records(deliveries, 5, Duration::from_secs(10)).await;
    assert_eq!(seen, (0..5).collect::<BTreeSet<_>>());

    // The stream as a server that lost it would have it: records 3 and 4 sent again, and 5, under stream
    // sequence numbers 1 to 3, which the reader has already read past.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("connects"));
    js.delete_stream(ship::DEFAULT_STREAM).await.expect("deletes the stream");
    nats.publish(ship::DEFAULT_STREAM, (3..6).map(record).collect()).await.unwrap_or_else(|e| panic!("{e}"));
    let (_, seen) = read_records(deliveries, 3, Duration::from_secs(30)).await;
    source.stop();
    assert!(seen.contains(&5), "record 5, stored under a sequence number already read, is read: {seen:?}");
}

/// Reads deliveries until `want` distinct records came or `within` passed; returns the records' sequence
/// numbers.
async fn read_records(
    mut deliveries: ship::source::Deliveries,
    want: usize,
    within: Duration,
) -> (ship::source::Deliveries, BTreeSet<u64>) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        let mut seen = BTreeSet::new();
        while seen.len() < want && Instant::now() < deadline {
            if let Ok(Some(delivery)) = deliveries.recv_timeout(Duration::from_millis(200))
                && let Incoming::Record { seq, .. } = delivery.expect("a readable message").incoming
            {
                seen.insert(seq);
            }
        }
        (deliveries, seen)
    })
    .await
    .expect("the reader thread")
}

/// NATS restarts without the messages it acknowledged last (here its store is put back as it was before
/// them, as a machine crash within its sync interval would leave it). The shipper's client reconnects on
/// its own and its publishes succeed again, so only the reconnection says that the stream may have lost
/// something: the shipper must send again from what the stream still holds, not go on from what it saw
/// acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipper_sends_again_what_a_restarted_server_lost() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = dir.path().join("nats");
    let nats = LocalNats::start(&store).unwrap_or_else(|e| panic!("{e}"));
    let port = nats.port();
    let log = Arc::new(DiskLog::open(dir.path().join("log"), Durability::None).expect("opens a log"));
    let append = |ids: std::ops::Range<u64>| {
        for id in ids {
            let txn = LoggedTxn::new(TxnId(id), SessionId(1), id);
            let _ticket = log.append_finished(txn, Outcome::Committed, Some(id)).expect("appends");
        }
        log.sync().expect("syncs");
    };
    let shipped_below = |shipper: &Shipper, n: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Counters::get(&shipper.counters().shipped_below) < n {
            assert!(Instant::now() < deadline, "the shipper did not ship {n} records in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    append(0..5);
    let config = ShipConfig { nats: nats.url(), stream: ship::DEFAULT_STREAM.to_owned() };
    let shipper = Shipper::spawn(log.clone() as Arc<dyn HistoryLog>, COLLECTOR, config);
    shipped_below(&shipper, 5);
    let store = nats.kill();
    let before = dir.path().join("nats-before");
    copy_dir(&store, &before);
    let nats = LocalNats::start_on(&store, port).unwrap_or_else(|e| panic!("{e}"));
    append(5..10);
    shipped_below(&shipper, 10);
    // A crash that takes records 5–9 back: the store as it was before them.
    let store = nats.kill();
    std::fs::remove_dir_all(&store).expect("removes the store");
    copy_dir(&before, &store);
    let nats = LocalNats::start_on(&store, port).unwrap_or_else(|e| panic!("{e}"));

    let (source, deliveries) =
        Source::spawn(nats.url(), ship::DEFAULT_STREAM.to_owned(), &[], StreamStart::default());
    let (_, seen) = read_records(deliveries, 10, Duration::from_secs(30)).await;
    source.stop();
    shipper.finish(Duration::from_secs(5)).await;
    assert_eq!(seen, (0..10).collect::<BTreeSet<_>>(), "every record is in the stream again");
}

/// Copies directory `from` to `to`, recursively.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("creates a directory");
    for entry in std::fs::read_dir(from).expect("reads a directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copies a file");
        }
    }
}

/// The messages `deliveries` gives until a second passes with none: their stream sequence numbers and the
/// stream's generation.
async fn delivered(mut deliveries: ship::source::Deliveries) -> (Vec<u64>, BTreeSet<String>) {
    tokio::task::spawn_blocking(move || {
        let (mut messages, mut generations) = (Vec::new(), BTreeSet::new());
        while let Ok(Some(delivery)) = deliveries.recv_timeout(Duration::from_secs(1)) {
            let delivered = delivery.expect("a readable message");
            messages.push(delivered.message);
            generations.insert(delivered.generation);
        }
        (messages, generations)
    })
    .await
    .expect("the reading thread")
}

/// A verifier that resumes from its checkpoint reads the stream from the message after it, in the stream
/// it was made in; in a stream deleted and made again since (another generation, whose numbers name other
/// messages), it reads from the first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_resumes_after_its_checkpoint_only_in_the_stream_it_was_made_in() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let nats = LocalNats::start(&dir.path().join("nats")).unwrap_or_else(|e| panic!("{e}"));
    let messages = (0..10u64)
        .map(|seq| {
            let txn = LoggedTxn::new(TxnId(seq + 1), SessionId(1), seq);
            let record = LogRecord::Finished { txn, outcome: Outcome::Committed, commit_ns: Some(seq) };
            let (headers, payload) = message::record_message(COLLECTOR, seq, &record).expect("encodes");
            (message::subject(COLLECTOR), headers, payload)
        })
        .collect();
    nats.publish(ship::DEFAULT_STREAM, messages).await.unwrap_or_else(|e| panic!("{e}"));
    let read = |start| {
        let (source, deliveries) = Source::spawn(nats.url(), ship::DEFAULT_STREAM.to_owned(), &[], start);
        async move {
            let seen = delivered(deliveries).await;
            source.stop();
            seen
        }
    };

    let (all, generations) = read(StreamStart::default()).await;
    assert_eq!(all, (1..=10).collect::<Vec<_>>());
    let generation = generations.into_iter().next().expect("a generation");
    let (after, _) = read(StreamStart { generation: Some(generation.clone()), next: 7 }).await;
    assert_eq!(after, [7, 8, 9, 10], "resumes after message 6 of generation {generation}");
    let (again, _) = read(StreamStart { generation: Some("a stream made earlier".into()), next: 7 }).await;
    assert_eq!(again, (1..=10).collect::<Vec<_>>(), "another generation is read from its start");
}
