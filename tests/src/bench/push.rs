//! `flowmesh-bench push [--flows N] [--reps R]`: how fast flowmesh's session loads flows into
//! a real Open vSwitch, against the two peers of DESIGN.md §8, in one run on one bridge:
//!
//! * **flowmesh**: `SwitchHandle::send_bundle` of N FLOW_MODs (one ONF bundle: open, adds,
//!   prepare barrier, commit, barrier), timed until the barrier reply;
//! * **ofctl**: `ovs-ofctl -O OpenFlow13 --bundle add-flows` of the same flows (text file);
//! * **raw**: the same bundle pre-encoded (OPEN, N BUNDLE_ADD, COMMIT) written in one burst
//!   on a plain socket, timed until COMMIT_REPLY: Open vSwitch's own ceiling.
//!
//! The bridge has two controller connections (flowmesh's listener and the raw socket); each
//! run starts from an empty table (`del-flows`) and is checked to end with N flows. After one
//! untimed warm-up load, each mode runs `--reps` times, interleaved; medians are reported,
//! then one `key=value` line.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use ofproto::message::{BundleControl, BundleCtrlType, BundleFlags, Message};
use ofproto::session::encode::{encode_bundle_add, encode_message};
use ofproto::session::{Listener, SessionConfig, SessionEvent, SwitchHandle};
use ofproto::FlowMod;

use super::flows::{ofctl_text, overlay_flows};
use super::{arg_value, median, peak_rss_mib};
use crate::sandbox::{BridgeSpec, OvsSandbox};

const BRIDGE: &str = "br0";

/// Runs the benchmark; prints figures and the closing `key=value` line.
pub fn main(args: &[String]) -> Result<(), String> {
    let n: u32 = arg_value(args, "--flows", 100_000)?;
    let reps: usize = arg_value(args, "--reps", 3)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;

    let flows = overlay_flows(n);
    let messages: Vec<Message> = flows
        .iter()
        .map(|f| Message::FlowMod(FlowMod::add(f.clone())))
        .collect();
    let t = Instant::now();
    let raw = raw_bundle(&messages, 0x5000);
    let encode_s = t.elapsed().as_secs_f64();
    println!(
        "{n} flows; bundle encoded in {:.1} ms ({:.1} MB, {:.0} flows/s encode only)",
        encode_s * 1e3,
        raw.len() as f64 / 1e6,
        f64::from(n) / encode_s
    );

    let (listener, mut events) = rt
        .block_on(Listener::bind(
            "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
            None,
            SessionConfig::default(),
        ))
        .map_err(|e| format!("bind: {e}"))?;
    let raw_listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind raw: {e}"))?;
    let raw_target = format!(
        "tcp:127.0.0.1:{}",
        raw_listener
            .local_addr()
            .map_err(|e| format!("{e}"))?
            .port()
    );

    let sbx = OvsSandbox::builder()
        .bridge(BridgeSpec::new(BRIDGE, 1))
        .start()
        .map_err(|e| format!("sandbox: {e}"))?;
    // Two controllers: flowmesh's listener and the raw socket.
    sbx.vsctl(&[
        "--",
        "--id=@a",
        "create",
        "Controller",
        &format!("target=\"{}\"", listener.target()),
        "max_backoff=1000",
        "--",
        "--id=@b",
        "create",
        "Controller",
        &format!("target=\"{raw_target}\""),
        "max_backoff=1000",
        "--",
        "set",
        "bridge",
        BRIDGE,
        "controller=@a,@b",
    ])
    .map_err(|e| format!("set controllers: {e}"))?;

    let handle = rt.block_on(first_ready(&mut events))?;
    let mut raw_conn = RawConn::accept(&raw_listener, Duration::from_secs(15))?;
    raw_conn.handshake()?;

    let text_file = sbx.run_dir().join("bench-flows.txt");
    std::fs::write(&text_file, ofctl_text(&flows)).map_err(|e| format!("write flows: {e}"))?;
    let text_path = text_file.display().to_string();

    // One untimed load first: Open vSwitch's first 100k-flow table costs more (allocation)
    // and would penalize whichever mode ran first.
    clear(&sbx)?;
    raw_conn.replay(&raw, 0x5000 + n + 1)?;
    check_count(&sbx, n)?;
    // The text file and the encoded messages are the same flows.
    let diff = sbx
        .ofctl(&["diff-flows", BRIDGE, &text_path])
        .map_err(|e| format!("diff-flows: {e}"))?;
    if !diff.trim().is_empty() {
        return Err(format!(
            "ovs-ofctl text and encoded flows differ:\n{}",
            diff.lines().take(6).collect::<Vec<_>>().join("\n")
        ));
    }

    let (mut ours, mut ofctl, mut rawt) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        clear(&sbx)?;
        let msgs = messages.clone();
        tracing::info!("rep {rep}: flowmesh push");
        let dt = rt.block_on(push(&handle, msgs))?;
        check_count(&sbx, n)?;
        ours.push(dt);

        clear(&sbx)?;
        tracing::info!("rep {rep}: ovs-ofctl");
        let t = Instant::now();
        sbx.ofctl(&["--bundle", "add-flows", BRIDGE, &text_path])
            .map_err(|e| format!("ovs-ofctl --bundle add-flows: {e}"))?;
        let dt_ofctl = t.elapsed().as_secs_f64();
        check_count(&sbx, n)?;
        ofctl.push(dt_ofctl);

        clear(&sbx)?;
        tracing::info!("rep {rep}: raw");
        let dt_raw = raw_conn.replay(&raw, 0x5000 + n + 1)?;
        check_count(&sbx, n)?;
        rawt.push(dt_raw);
        println!(
            "rep {}: flowmesh {:.3}s ({:.0}/s)  ofctl --bundle {:.3}s ({:.0}/s)  raw {:.3}s ({:.0}/s)",
            rep + 1,
            dt,
            f64::from(n) / dt,
            dt_ofctl,
            f64::from(n) / dt_ofctl,
            dt_raw,
            f64::from(n) / dt_raw
        );
    }
    let rate = |v: &[f64]| f64::from(n) / median(v);
    let (fm, oc, rw) = (rate(&ours), rate(&ofctl), rate(&rawt));
    println!(
        "medians over {reps} runs: flowmesh {fm:.0} flows/s, ovs-ofctl --bundle {oc:.0} flows/s, raw {rw:.0} flows/s"
    );
    println!(
        "flows={n} reps={reps} flows_per_s={fm:.0} ofctl_bundle_flows_per_s={oc:.0} \
         raw_flows_per_s={rw:.0} ratio_vs_raw={:.3} ratio_vs_ofctl={:.2} push_s={:.3} \
         ofctl_s={:.3} raw_s={:.3} encode_only_flows_per_s={:.0} peak_rss_mib={:.0}",
        fm / rw,
        fm / oc,
        median(&ours),
        median(&ofctl),
        median(&rawt),
        f64::from(n) / encode_s,
        peak_rss_mib().unwrap_or(0.0)
    );
    drop(listener);
    Ok(())
}

async fn push(handle: &SwitchHandle, msgs: Vec<Message>) -> Result<f64, String> {
    let t = Instant::now();
    handle
        .send_bundle(msgs)
        .await
        .map_err(|e| format!("flowmesh push: {e}"))?;
    Ok(t.elapsed().as_secs_f64())
}

fn clear(sbx: &OvsSandbox) -> Result<(), String> {
    sbx.ofctl(&["del-flows", BRIDGE])
        .map(|_| ())
        .map_err(|e| format!("del-flows: {e}"))
}

fn check_count(sbx: &OvsSandbox, n: u32) -> Result<(), String> {
    let out = sbx
        .ofctl(&["dump-aggregate", BRIDGE])
        .map_err(|e| format!("dump-aggregate: {e}"))?;
    let count = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("flow_count="))
        .and_then(|c| c.parse::<u32>().ok());
    if count == Some(n) {
        Ok(())
    } else {
        Err(format!(
            "expected {n} flows on {BRIDGE}, dump-aggregate says: {out}"
        ))
    }
}

/// OPEN, N BUNDLE_ADD and COMMIT (atomic, ordered) of bundle `base`, as one byte string:
/// the add of message i has xid base+1+i, the commit base+n+1.
fn raw_bundle(messages: &[Message], base: u32) -> Vec<u8> {
    let flags = BundleFlags::ATOMIC | BundleFlags::ORDERED;
    let mut out = Vec::with_capacity(messages.len() * 200);
    let ctrl = |t| Message::BundleControl(BundleControl::new(base, t, flags));
    let _ = encode_message(&ctrl(BundleCtrlType::OpenRequest), base, &mut out);
    let mut xid = base;
    for m in messages {
        xid += 1;
        let _ = encode_bundle_add(base, flags, m, xid, &mut out);
    }
    let _ = encode_message(&ctrl(BundleCtrlType::CommitRequest), xid + 1, &mut out);
    out
}

/// A plain blocking OpenFlow connection: only framing, no decoding beyond headers. After the
/// handshake a reader thread answers echo requests (Open vSwitch probes idle controllers)
/// and passes every other message on.
struct RawConn {
    writer: Arc<Mutex<TcpStream>>,
    rx: Option<mpsc::Receiver<Vec<u8>>>,
    reader: Option<RawReader>,
}

struct RawReader {
    s: TcpStream,
    buf: Vec<u8>,
}

impl RawReader {
    fn recv(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if self.buf.len() >= 8 {
                let len = usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]]));
                if len < 8 {
                    return Err("raw socket: bad length".into());
                }
                if self.buf.len() >= len {
                    let rest = self.buf.split_off(len);
                    return Ok(std::mem::replace(&mut self.buf, rest));
                }
            }
            let mut chunk = [0u8; 65536];
            let n = self
                .s
                .read(&mut chunk)
                .map_err(|e| format!("raw read: {e}"))?;
            if n == 0 {
                return Err("raw socket closed by the switch".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn echo_reply(m: &[u8]) -> Vec<u8> {
    let mut reply = m.to_vec();
    reply[1] = 3;
    reply
}

impl RawConn {
    fn accept(l: &TcpListener, timeout: Duration) -> Result<Self, String> {
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + timeout;
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).map_err(|e| e.to_string())?;
                    s.set_nodelay(true).map_err(|e| e.to_string())?;
                    let r = s.try_clone().map_err(|e| e.to_string())?;
                    return Ok(RawConn {
                        writer: Arc::new(Mutex::new(s)),
                        rx: None,
                        reader: Some(RawReader {
                            s: r,
                            buf: Vec::new(),
                        }),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err("raw socket: switch never connected".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("raw accept: {e}")),
            }
        }
    }

    fn write(&self, data: &[u8]) -> Result<(), String> {
        let mut w = self
            .writer
            .lock()
            .map_err(|_| "raw writer poisoned".to_owned())?;
        w.write_all(data).map_err(|e| format!("raw write: {e}"))
    }

    /// HELLO and FEATURES, then the echo-answering reader thread.
    fn handshake(&mut self) -> Result<(), String> {
        let mut rd = self.reader.take().ok_or("handshake twice")?;
        self.write(&Message::Hello(ofproto::message::Hello::of13()).encode(1))?;
        self.write(&Message::FeaturesRequest.encode(2))?;
        loop {
            let m = rd.recv()?;
            match m[1] {
                2 => self.write(&echo_reply(&m))?,
                6 => break,
                _ => {}
            }
        }
        let (tx, rx) = mpsc::channel();
        let writer = self.writer.clone();
        std::thread::spawn(move || {
            while let Ok(m) = rd.recv() {
                if m[1] == 2 {
                    if let Ok(mut w) = writer.lock() {
                        let _ = w.write_all(&echo_reply(&m));
                    }
                } else if tx.send(m).is_err() {
                    break;
                }
            }
        });
        self.rx = Some(rx);
        Ok(())
    }

    /// Writes `data` in one burst; returns the seconds until the COMMIT_REPLY with `xid`.
    fn replay(&mut self, data: &[u8], commit_xid: u32) -> Result<f64, String> {
        let rx = self.rx.as_ref().ok_or("no handshake")?;
        let t = Instant::now();
        self.write(data)?;
        let want = commit_xid.to_be_bytes();
        loop {
            let m = rx
                .recv_timeout(Duration::from_secs(60))
                .map_err(|e| format!("raw socket: no commit reply: {e}"))?;
            if m[1] == 1 {
                return Err(format!(
                    "raw socket: switch sent an error {:02x?}",
                    &m[..m.len().min(16)]
                ));
            }
            if m.len() >= 22 && m[1] == 4 && m[4..8] == want && m[20..22] == [0, 5] {
                return Ok(t.elapsed().as_secs_f64());
            }
        }
    }
}

/// The handle of the first session that becomes ready on `events` (15 s at most).
pub(super) async fn first_ready(
    events: &mut ofproto::session::EventStream,
) -> Result<SwitchHandle, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(SessionEvent::Ready { handle, .. })) => return Ok(handle),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Err("flowmesh session never became ready".to_owned()),
        }
    }
}
