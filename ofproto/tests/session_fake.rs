//! The session task against a scripted in-memory switch (no Open vSwitch): the bundle
//! fallback for switches without bundles, bounded memory towards a slow switch, and that a
//! stalled switch does not delay another one.

use std::time::{Duration, Instant};

use ofproto::message::{
    msg_type, BadRequestCode, ErrorKind, ErrorMsg, Framer, Hello, Message, MultipartReply,
    MultipartReplyBody, SwitchFeatures,
};
use ofproto::session::{run_session, SessionConfig, SessionEvent, SwitchHandle};
use ofproto::{Action, Flow, FlowMod, Match};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

/// How the fake switch behaves.
#[derive(Clone, Copy)]
struct Script {
    dpid: u64,
    /// Answer ONF bundle messages with OFPBRC_BAD_EXPERIMENTER.
    refuse_bundles: bool,
    /// Pause this long after each read (a slow switch).
    read_delay: Duration,
    /// Bytes per read.
    read_chunk: usize,
}

/// Runs the fake switch on its end of the pipe; returns how many FLOW_MODs it saw.
async fn fake_switch(mut io: DuplexStream, script: Script) -> usize {
    let mut framer = Framer::new();
    let mut buf = vec![0u8; script.read_chunk];
    let mut flow_mods = 0;
    let _ = io.write_all(&Message::Hello(Hello::of13()).encode(1)).await;
    loop {
        let n = match io.read(&mut buf).await {
            Ok(0) | Err(_) => return flow_mods,
            Ok(n) => n,
        };
        framer.push(&buf[..n]);
        let mut out = Vec::new();
        while let Ok(Some(frame)) = framer.next_frame() {
            let (t, xid) = (
                frame[1],
                u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
            );
            let reply = match t {
                msg_type::FEATURES_REQUEST => Some(Message::FeaturesReply(SwitchFeatures {
                    datapath_id: script.dpid,
                    n_buffers: 0,
                    n_tables: 254,
                    auxiliary_id: 0,
                    capabilities: 0,
                    reserved: 0,
                })),
                msg_type::MULTIPART_REQUEST => Some(Message::MultipartReply(MultipartReply::new(
                    MultipartReplyBody::PortDesc(Vec::new()),
                ))),
                msg_type::BARRIER_REQUEST => Some(Message::BarrierReply),
                msg_type::ECHO_REQUEST => Some(Message::EchoReply(Vec::new())),
                msg_type::FLOW_MOD => {
                    flow_mods += 1;
                    None
                }
                msg_type::EXPERIMENTER if script.refuse_bundles => Some(Message::Error(ErrorMsg {
                    kind: ErrorKind::BadRequest(BadRequestCode::BadExperimenter),
                    data: frame[..frame.len().min(64)].to_vec(),
                })),
                _ => None,
            };
            if let Some(r) = reply {
                r.encode_into(xid, &mut out);
            }
        }
        if !out.is_empty() && io.write_all(&out).await.is_err() {
            return flow_mods;
        }
        if !script.read_delay.is_zero() {
            tokio::time::sleep(script.read_delay).await;
        }
    }
}

/// Starts a session to a fake switch; returns its handle once ready.
async fn connect(
    script: Script,
    cfg: SessionConfig,
    pipe: usize,
) -> (SwitchHandle, tokio::task::JoinHandle<usize>) {
    let (ours, theirs) = tokio::io::duplex(pipe);
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(run_session(ours, 1, "fake".into(), cfg, tx));
    let switch = tokio::spawn(fake_switch(theirs, script));
    loop {
        match rx.recv().await {
            Some(SessionEvent::Ready { handle, info, .. }) => {
                assert_eq!(info.dpid, script.dpid);
                return (handle, switch);
            }
            Some(SessionEvent::Disconnected { cause, .. }) => panic!("disconnected: {cause}"),
            Some(_) => {}
            None => panic!("session ended"),
        }
    }
}

fn flow_mods(n: u32) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let f = Flow::new(10, 100, Match::new().reg(1, i)).apply(vec![Action::output(3)]);
            Message::FlowMod(FlowMod::add(f))
        })
        .collect()
}

const FAST: Script = Script {
    dpid: 7,
    refuse_bundles: false,
    read_delay: Duration::ZERO,
    read_chunk: 64 * 1024,
};

#[tokio::test]
async fn a_switch_without_bundles_gets_an_ordered_batch() {
    let script = Script {
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
    let script = Script {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_switch_does_not_delay_another() {
    // This one reads 1 KiB every 50 ms: a large batch to it takes minutes.
    let stalled = Script {
        dpid: 1,
        read_delay: Duration::from_millis(50),
        read_chunk: 1024,
        ..FAST
    };
    let (slow, _slow_switch) = connect(stalled, SessionConfig::default(), 4096).await;
    let (fast, _fast_switch) = connect(
        Script { dpid: 2, ..FAST },
        SessionConfig::default(),
        1 << 16,
    )
    .await;
    let pending = tokio::spawn(async move { slow.send_batch(flow_mods(20_000)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = Instant::now();
    for _ in 0..100 {
        fast.barrier().await.expect("barrier");
    }
    fast.send_batch(flow_mods(1000)).await.expect("batch");
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "fast switch delayed: {took:?}"
    );
    assert!(!pending.is_finished(), "the stalled switch is still busy");
    pending.abort();
}
