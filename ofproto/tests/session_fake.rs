//! The session task against a scripted in-memory switch (no Open vSwitch): the bundle
//! fallback for switches without bundles, bounded memory towards a slow switch, and that a
//! stalled switch does not delay another one.

use std::time::{Duration, Instant};

use ofproto::message::Message;
use ofproto::session::{SessionConfig, SwitchHandle};
use ofproto::testing::FakeSwitch;
use ofproto::{Action, Flow, FlowMod, Match};

/// Starts a session to a fake switch; returns its handle once ready.
async fn connect(
    script: FakeSwitch,
    cfg: SessionConfig,
    pipe: usize,
) -> (SwitchHandle, tokio::task::JoinHandle<usize>) {
    let (handle, _events, switch) = script.connect(cfg, pipe).await;
    (handle, switch)
}

fn flow_mods(n: u32) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let f = Flow::new(10, 100, Match::new().reg(1, i)).apply(vec![Action::output(3)]);
            Message::FlowMod(FlowMod::add(f))
        })
        .collect()
}

const FAST: FakeSwitch = FakeSwitch {
    dpid: 7,
    refuse_bundles: false,
    silent_on_flow_stats: false,
    read_delay: Duration::ZERO,
    read_chunk: 64 * 1024,
    flows: 0,
    flows_per_part: 100,
};

#[tokio::test]
async fn a_switch_without_bundles_gets_an_ordered_batch() {
    let script = FakeSwitch {
        refuse_bundles: true,
        ..FAST
    };
    let (h, switch) = connect(script, SessionConfig::default(), 1 << 16).await;
    h.send_bundle(flow_mods(100))
        .await
        .expect("falls back to a batch");
    // Known now: the next bundle goes straight as a batch.
    h.send_bundle(flow_mods(50)).await.expect("batch again");
    h.close().await;
    assert_eq!(switch.await.expect("switch task"), 150);
}

#[tokio::test]
async fn memory_stays_bounded_towards_a_slow_switch() {
    let script = FakeSwitch {
        read_delay: Duration::from_millis(1),
        read_chunk: 256 * 1024,
        ..FAST
    };
    let cfg = SessionConfig {
        write_low_water: 64 * 1024,
        write_high_water: 256 * 1024,
        ..SessionConfig::default()
    };
    let (h, switch) = connect(script, cfg, 64 * 1024).await;
    let n = 50_000;
    h.send_batch(flow_mods(n)).await.expect("batch");
    let stats = h.stats().await.expect("stats");
    assert_eq!(stats.bulk_messages, u64::from(n));
    assert!(
        stats.bytes_written > 50_000 * 80,
        "wrote {}",
        stats.bytes_written
    );
    assert!(
        stats.max_buffered <= 256 * 1024 + 1024,
        "buffer grew to {} bytes",
        stats.max_buffered
    );
    h.close().await;
    assert_eq!(switch.await.expect("switch task"), n as usize);
}

/// A session keeps a small write buffer once a large batch is written: a thousand idle
/// sessions after a connect storm do not each hold a bundle's worth of buffer.
#[tokio::test]
async fn the_write_buffer_shrinks_back_after_a_large_batch() {
    let (h, switch) = connect(FAST, SessionConfig::default(), 1 << 16).await;
    h.send_batch(flow_mods(20_000)).await.expect("batch");
    let grown = h.stats().await.expect("stats");
    assert!(
        grown.max_buffered > 1 << 20,
        "the batch was buffered in bulk ({} bytes)",
        grown.max_buffered
    );
    // Written out (its barrier answered): the buffer is back to its idle size.
    assert!(
        grown.buffer_capacity <= 256 * 1024,
        "an idle session keeps {} bytes of write buffer",
        grown.buffer_capacity
    );
    h.close().await;
    assert_eq!(switch.await.expect("switch task"), 20_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_switch_does_not_delay_another() {
    // This one reads 1 KiB every 50 ms: a large batch to it takes minutes.
    let stalled = FakeSwitch {
        dpid: 1,
        read_delay: Duration::from_millis(50),
        read_chunk: 1024,
        ..FAST
    };
    let (slow, _slow_switch) = connect(stalled, SessionConfig::default(), 4096).await;
    let (fast, _fast_switch) = connect(
        FakeSwitch { dpid: 2, ..FAST },
        SessionConfig::default(),
        1 << 16,
    )
    .await;
    let pending = tokio::spawn(async move { slow.send_batch(flow_mods(20_000)).await });
    // Lets the slow batch start filling its pipe (nothing to wait on: the fake switch counts
    // nothing); had it not started yet, the test would prove less but could not fail.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = Instant::now();
    for _ in 0..100 {
        fast.barrier().await.expect("barrier");
    }
    fast.send_batch(flow_mods(1000)).await.expect("batch");
    let took = t.elapsed();
    // The stalled batch takes minutes: 5 s is far from that, and room for a busy machine.
    assert!(
        took < Duration::from_secs(5),
        "fast switch delayed: {took:?}"
    );
    assert!(!pending.is_finished(), "the stalled switch is still busy");
    pending.abort();
}

/// A flow-stats reply of 20,000 flows streamed to a consumer that folds slowly: the session
/// stops reading while the consumer's queue is full, so at most the queued parts and the one
/// being folded are decoded at once, never the table.
#[tokio::test]
async fn a_streamed_flow_read_holds_a_few_parts_not_the_table() {
    let (n, per) = (20_000u32, 100u32);
    let script = FakeSwitch {
        flows: n,
        flows_per_part: per,
        ..FAST
    };
    // A pipe that could take the whole reply at once (about 1.3 MB).
    let (h, switch) = connect(script, SessionConfig::default(), 4 << 20).await;
    let mut stream = h
        .flow_stats_stream(ofproto::message::FlowStatsRequest::all())
        .await
        .expect("stream");
    let (mut flows, mut parts) = (0u32, 0u32);
    let mut next_reg = 0u32;
    while let Some(part) = stream.next().await {
        let part = part.expect("part");
        for f in &part {
            // In order, none lost or repeated.
            assert_eq!(f.flow.matches, Match::new().reg(1, next_reg));
            next_reg += 1;
        }
        flows += part.len() as u32;
        parts += 1;
        // A slow consumer: the session task gets every chance to run ahead.
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!((flows, parts), (n, n / per));
    let g = stream.gauge();
    assert_eq!(g.parts(), (n / per) as usize);
    assert_eq!(g.largest_part(), per as usize);
    let bound = (ofproto::session::STREAM_QUEUE_PARTS + 1) * per as usize;
    assert!(
        g.peak() <= bound,
        "{} decoded flows held at once (bound {bound}, table {n})",
        g.peak()
    );
    // The session is intact after the stream: a reassembled read works.
    assert_eq!(
        h.flow_stats(ofproto::message::FlowStatsRequest::all())
            .await
            .expect("whole read")
            .len(),
        n as usize
    );
    h.close().await;
    switch.await.expect("switch task");
}
