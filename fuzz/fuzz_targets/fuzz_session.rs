//! cargo-fuzz target for the switch session state machine (`ofproto::session::fsm`), driven
//! directly, without sockets: `cargo fuzz run fuzz_session`. The input is a script for a
//! peer and the controller side at once — raw bytes from the switch (framed and decoded as
//! the session task does), PORT_STATUS floods, multipart replies (with and without MORE) to
//! the xids of outstanding requests, replies and errors to any xid of a request's range,
//! requests, batches, bundles and echo probes from the controller, time passing, a close.
//!
//! No input may panic, and the state machine keeps its promises: every responder is
//! completed at most once, and once the session closed every one has been; the port table
//! never holds more than its limit; a closed session has no deadline and nothing outstanding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ofproto::message::{
    BundleControl, BundleCtrlType, ErrorKind, ErrorMsg, FlowStats, FlowStatsRequest, Hello,
    MultipartReply, MultipartReplyBody, MultipartRequest, MultipartRequestBody, Port, PortStatus,
    Role, RoleRequest, SwitchFeatures,
};
use ofproto::session::fsm::{FsmConfig, Output, SessionFsm};
use ofproto::{Flow, Framer, Match, Message, MessageHeader};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Reads the script.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.byte().unwrap_or(0)) << 8 | u16::from(self.byte().unwrap_or(0))
    }
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) << 16 | u32::from(self.u16())
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

const MAX_PORTS: usize = 64;
const MAX_MULTIPART_BYTES: usize = 200_000;

fn port(no: u32) -> Port {
    Port {
        port_no: no,
        hw_addr: [2, 0, 0, 0, (no >> 8) as u8, no as u8],
        name: format!("p{no}").into_bytes(),
        config: 0,
        state: 0,
        curr: 0,
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 0,
        max_speed: 0,
    }
}

/// The harness: the state machine, what was asked of it, and what it promised.
struct Harness {
    fsm: SessionFsm<u32>,
    now: Instant,
    /// Responder id → its xid range (first xid, length).
    open: BTreeMap<u32, (u32, u32)>,
    completed: BTreeSet<u32>,
    next_id: u32,
    /// Xids of messages the session sent (requests of the handshake included).
    sent: Vec<u32>,
    closed: bool,
}

impl Harness {
    fn apply(&mut self, out: Vec<Output<u32>>) {
        for o in out {
            match o {
                Output::Send { xid, .. } => self.sent.push(xid),
                Output::Complete { responder, .. } => {
                    assert!(
                        self.open.remove(&responder).is_some(),
                        "responder {responder} completed but not outstanding"
                    );
                    assert!(self.completed.insert(responder), "completed twice");
                }
                Output::Close(_) => self.closed = true,
                Output::Ready(info) => assert!(info.ports.len() <= MAX_PORTS),
                Output::PortStatus(_) | Output::UnsolicitedError { .. } | Output::Async(_) => {}
                // Only a request begun as a stream has its parts handed out one by one; the
                // harness begins none.
                Output::Part { xid, .. } | Output::StreamEnd { xid } => {
                    panic!("stream output for xid {xid}, which no streamed request asked for")
                }
            }
        }
        assert!(self.fsm.ports().len() <= MAX_PORTS, "port table over its limit");
        if self.closed {
            assert!(self.fsm.is_closed());
            assert!(self.open.is_empty(), "closed with responders left: {:?}", self.open);
            assert_eq!(self.fsm.outstanding(), 0);
            assert_eq!(self.fsm.next_deadline(), None);
        }
    }

    fn feed(&mut self, msg: Message, xid: u32) {
        let length = msg.encode(xid).len().min(usize::from(u16::MAX)) as u16;
        let header = MessageHeader {
            version: msg.version(),
            msg_type: msg.msg_type(),
            length,
            xid,
        };
        let mut out = Vec::new();
        self.fsm.on_message(&header, msg, self.now, &mut out);
        self.apply(out);
    }

    /// An xid the script points at: one the session sent or one of a request's range.
    fn xid(&self, s: &mut Script<'_>) -> u32 {
        let pick = usize::from(s.byte().unwrap_or(0));
        let ranges: Vec<(u32, u32)> = self.open.values().copied().collect();
        match s.byte().unwrap_or(0) % 3 {
            0 if !self.sent.is_empty() => self.sent[pick % self.sent.len()],
            1 if !ranges.is_empty() => {
                let (base, len) = ranges[pick % ranges.len()];
                base.wrapping_add(u32::from(s.byte().unwrap_or(0)) % len.max(1))
            }
            _ => s.u32(),
        }
    }

    fn request(&mut self, s: &mut Script<'_>) {
        if self.closed {
            // The session task begins nothing on a closed session.
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        let range = match s.byte().unwrap_or(0) % 7 {
            0 => self.fsm.begin_request(&Message::BarrierRequest, id).ok().map(|x| (x, 1)),
            1 => self
                .fsm
                .begin_request(
                    &Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(
                        FlowStatsRequest::all(),
                    ))),
                    id,
                )
                .ok()
                .map(|x| (x, 1)),
            2 => self
                .fsm
                .begin_request(
                    &Message::RoleRequest(RoleRequest {
                        role: Role::Master,
                        generation_id: u64::from(s.u32()),
                    }),
                    id,
                )
                .ok()
                .map(|x| (x, 1)),
            3 => {
                let n = u32::from(s.byte().unwrap_or(0) % 8);
                Some((self.fsm.begin_batch(n, id), n + 1))
            }
            4 => {
                let n = u32::from(s.byte().unwrap_or(0) % 8);
                Some((self.fsm.begin_bundle(n, 3, id), n + 4))
            }
            5 => {
                self.fsm.begin_echo(id, &mut out);
                match out.first() {
                    Some(Output::Send { xid, .. }) => Some((*xid, 1)),
                    _ => None,
                }
            }
            _ => {
                // Not a request with one reply: refused, nothing registered.
                let refused = self
                    .fsm
                    .begin_request(&Message::EchoRequest(Vec::new()), id)
                    .is_err();
                assert!(refused);
                None
            }
        };
        if let Some(r) = range {
            self.open.insert(id, r);
        }
        self.apply(out);
    }

    fn reply(&mut self, s: &mut Script<'_>) {
        let xid = self.xid(s);
        let msg = match s.byte().unwrap_or(0) % 6 {
            0 => Message::BarrierReply,
            1 => Message::EchoReply(Vec::new()),
            2 => Message::RoleReply(RoleRequest {
                role: Role::Slave,
                generation_id: u64::from(s.u32()),
            }),
            3 => Message::BundleControl(BundleControl::new(
                s.u32(),
                if s.byte().unwrap_or(0) % 2 == 0 {
                    BundleCtrlType::CommitReply
                } else {
                    BundleCtrlType::OpenReply
                },
                0,
            )),
            4 => Message::Error(ErrorMsg {
                kind: ErrorKind::from_wire(s.u16(), s.u16(), s.u32()),
                data: s.take(16).to_vec(),
            }),
            _ => Message::FeaturesReply(SwitchFeatures {
                datapath_id: u64::from(s.u32()),
                n_buffers: 0,
                n_tables: 254,
                auxiliary_id: 0,
                capabilities: 0,
                reserved: 0,
            }),
        };
        self.feed(msg, xid);
    }

    fn multipart(&mut self, s: &mut Script<'_>) {
        let xid = self.xid(s);
        let more = s.byte().unwrap_or(0) % 2 == 0;
        let k = usize::from(s.byte().unwrap_or(0) % 64);
        let body = match s.byte().unwrap_or(0) % 3 {
            0 => {
                let base = u32::from(s.u16());
                MultipartReplyBody::PortDesc((0..k as u32).map(|i| port(base + i)).collect())
            }
            1 => MultipartReplyBody::Flow(vec![
                FlowStats {
                    flow: Flow::new(0, s.u16(), Match::new()),
                    duration_sec: 0,
                    duration_nsec: 0,
                    packet_count: 0,
                    byte_count: 0,
                };
                k
            ]),
            _ => MultipartReplyBody::GroupDesc(Vec::new()),
        };
        let mut m = MultipartReply::new(body);
        if more {
            m.flags = 1;
        }
        self.feed(Message::MultipartReply(m), xid);
    }

    fn port_flood(&mut self, s: &mut Script<'_>) {
        let n = s.u16() % 300;
        let base = s.u32();
        let reason = s.byte().unwrap_or(0) % 3;
        for i in 0..u32::from(n) {
            self.feed(
                Message::PortStatus(PortStatus {
                    reason,
                    desc: port(base.wrapping_add(i % 97)),
                }),
                0,
            );
        }
    }

    /// Raw bytes from the switch, framed and decoded as the session task does (a reply
    /// that does not decode fails the request waiting for its xid).
    fn raw(&mut self, s: &mut Script<'_>) {
        let n = usize::from(s.u16() % 4096);
        let mut framer = Framer::new();
        framer.push(s.take(n));
        loop {
            match framer.next_message() {
                Ok(Some((h, Ok(msg)))) => {
                    let mut out = Vec::new();
                    self.fsm.on_message(&h, msg, self.now, &mut out);
                    self.apply(out);
                }
                Ok(Some((h, Err(e)))) => {
                    if self.fsm.awaits(h.xid) && h.msg_type != ofproto::message::msg_type::ERROR {
                        let fake = MessageHeader {
                            msg_type: ofproto::message::msg_type::ERROR,
                            ..h
                        };
                        let err = ErrorMsg {
                            kind: ErrorKind::from_wire(1, 6, 0),
                            data: e.to_string().into_bytes(),
                        };
                        let mut out = Vec::new();
                        self.fsm.on_message(&fake, Message::Error(err), self.now, &mut out);
                        self.apply(out);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }

    fn handshake(&mut self, with_role: bool, ports: u8) {
        self.feed(Message::Hello(Hello::of13()), 1);
        let features_xid = self.sent.last().copied().unwrap_or(0);
        self.feed(
            Message::FeaturesReply(SwitchFeatures {
                datapath_id: 42,
                n_buffers: 0,
                n_tables: 254,
                auxiliary_id: 0,
                capabilities: 0,
                reserved: 0,
            }),
            features_xid,
        );
        // SET_CONFIG, PORT_DESC and maybe the role request were sent, in that order.
        let n = self.sent.len();
        let (pd, role) = if with_role {
            (self.sent.get(n.wrapping_sub(2)).copied(), self.sent.last().copied())
        } else {
            (self.sent.last().copied(), None)
        };
        let ports = (0..u32::from(ports)).map(port).collect();
        self.feed(
            Message::MultipartReply(MultipartReply::new(MultipartReplyBody::PortDesc(ports))),
            pd.unwrap_or(0),
        );
        if let Some(x) = role {
            self.feed(
                Message::RoleReply(RoleRequest {
                    role: Role::Master,
                    generation_id: 1,
                }),
                x,
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut s = Script(data);
    let flags = s.byte().unwrap_or(0);
    let with_role = flags & 2 != 0;
    let cfg = FsmConfig {
        role: with_role.then_some(RoleRequest {
            role: Role::Master,
            generation_id: 1,
        }),
        max_ports: MAX_PORTS,
        max_multipart_bytes: MAX_MULTIPART_BYTES,
        ..FsmConfig::default()
    };
    let now = Instant::now();
    let mut h = Harness {
        fsm: SessionFsm::new(cfg, now),
        now,
        open: BTreeMap::new(),
        completed: BTreeSet::new(),
        next_id: 0,
        sent: Vec::new(),
        closed: false,
    };
    let mut out = Vec::new();
    h.fsm.start(&mut out);
    h.apply(out);
    if flags & 1 == 0 {
        h.handshake(with_role, flags >> 2);
    }
    let mut steps = 0;
    while let Some(op) = s.byte() {
        steps += 1;
        if steps > 512 {
            break;
        }
        match op % 8 {
            0 => h.raw(&mut s),
            1 => h.port_flood(&mut s),
            2 => h.multipart(&mut s),
            3 => h.request(&mut s),
            4 => h.reply(&mut s),
            5 => {
                h.now += Duration::from_millis(u64::from(s.u16()) * 10);
                let mut out = Vec::new();
                h.fsm.tick(h.now, &mut out);
                h.apply(out);
            }
            6 => {
                let mut out = Vec::new();
                h.fsm.close(ofproto::session::DisconnectCause::LocalClose, &mut out);
                h.apply(out);
            }
            _ => {
                let _ = h.fsm.next_deadline();
                let _ = h.fsm.bundle_gate_closed();
                let _ = h.fsm.bundles_supported();
            }
        }
    }
    let mut out = Vec::new();
    h.fsm.close(ofproto::session::DisconnectCause::LocalClose, &mut out);
    h.closed = true;
    h.apply(out);
});
