//! A scripted in-memory switch for tests of the session layer and of its users (feature
//! `testing`): it completes the handshake, answers echoes, barriers and multipart requests (an
//! empty port description), counts FLOW_MODs, and can be told to refuse bundles, to read
//! slowly, or to leave flow statistics requests unanswered.

use crate::message::{
    msg_type, BadRequestCode, ErrorKind, ErrorMsg, Framer, Hello, Message, MultipartReply,
    MultipartReplyBody, SwitchFeatures,
};
use crate::session::{run_session, SessionConfig, SessionEvent, SwitchHandle};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::task::JoinHandle;

/// How the fake switch behaves.
#[derive(Clone, Copy, Debug)]
pub struct FakeSwitch {
    /// Its datapath id.
    pub dpid: u64,
    /// Answer ONF bundle messages with OFPBRC_BAD_EXPERIMENTER.
    pub refuse_bundles: bool,
    /// Never answer a flow statistics (OFPMP_FLOW) request: a hung or hostile peer.
    pub silent_on_flow_stats: bool,
    /// Pause this long after each read (a slow switch).
    pub read_delay: Duration,
    /// Bytes per read.
    pub read_chunk: usize,
    /// The flow table it reports to a flow statistics request: this many flows (table 10,
    /// priority 100, reg1 = 0, 1, ...), in reply parts of `flows_per_part` (at least 1),
    /// all written at once.
    pub flows: u32,
    /// Flows per reply part of a flow statistics reply.
    pub flows_per_part: u32,
}

impl Default for FakeSwitch {
    fn default() -> Self {
        FakeSwitch {
            dpid: 7,
            refuse_bundles: false,
            silent_on_flow_stats: false,
            read_delay: Duration::ZERO,
            read_chunk: 64 * 1024,
            flows: 0,
            flows_per_part: 100,
        }
    }
}

impl FakeSwitch {
    /// Runs the switch on its end of the pipe until the pipe closes; returns how many
    /// FLOW_MODs it saw.
    pub async fn run(self, mut io: DuplexStream) -> usize {
        let mut framer = Framer::new();
        let mut buf = vec![0u8; self.read_chunk];
        let mut flow_mods = 0;
        let _ = io.write_all(&Message::Hello(Hello::of13()).encode(1)).await;
        loop {
            let n = match io.read(&mut buf).await {
                Ok(0) | Err(_) => return flow_mods,
                Ok(n) => n,
            };
            framer.push(buf.get(..n).unwrap_or_default());
            let mut out = Vec::new();
            while let Ok(Some(frame)) = framer.next_frame() {
                let t = frame.get(1).copied().unwrap_or_default();
                let xid = frame
                    .get(4..8)
                    .map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]));
                // OFPMP_FLOW is multipart type 1.
                let flow_stats =
                    t == msg_type::MULTIPART_REQUEST && frame.get(8..10) == Some(&[0, 1]);
                // OFPMP_METER, _CONFIG, _FEATURES (9, 10, 11): a switch without meters.
                let meters = t == msg_type::MULTIPART_REQUEST
                    && matches!(frame.get(8..10), Some([0, 9..=11]));
                let reply = match t {
                    msg_type::FEATURES_REQUEST => Some(Message::FeaturesReply(SwitchFeatures {
                        datapath_id: self.dpid,
                        n_buffers: 0,
                        n_tables: 254,
                        auxiliary_id: 0,
                        capabilities: 0,
                        reserved: 0,
                    })),
                    msg_type::MULTIPART_REQUEST if flow_stats && self.silent_on_flow_stats => None,
                    msg_type::MULTIPART_REQUEST if flow_stats => {
                        self.flow_table(xid, &mut out);
                        None
                    }
                    msg_type::MULTIPART_REQUEST if meters => Some(Message::Error(ErrorMsg {
                        kind: ErrorKind::BadRequest(BadRequestCode::BadMultipart),
                        data: frame
                            .get(..frame.len().min(64))
                            .unwrap_or_default()
                            .to_vec(),
                    })),
                    msg_type::MULTIPART_REQUEST => Some(Message::MultipartReply(
                        MultipartReply::new(MultipartReplyBody::PortDesc(Vec::new())),
                    )),
                    msg_type::BARRIER_REQUEST => Some(Message::BarrierReply),
                    msg_type::ECHO_REQUEST => Some(Message::EchoReply(Vec::new())),
                    msg_type::FLOW_MOD => {
                        flow_mods += 1;
                        None
                    }
                    msg_type::EXPERIMENTER if self.refuse_bundles => {
                        Some(Message::Error(ErrorMsg {
                            kind: ErrorKind::BadRequest(BadRequestCode::BadExperimenter),
                            data: frame
                                .get(..frame.len().min(64))
                                .unwrap_or_default()
                                .to_vec(),
                        }))
                    }
                    _ => None,
                };
                if let Some(r) = reply {
                    r.encode_into(xid, &mut out);
                }
            }
            if !out.is_empty() && io.write_all(&out).await.is_err() {
                return flow_mods;
            }
            if !self.read_delay.is_zero() {
                tokio::time::sleep(self.read_delay).await;
            }
        }
    }

    /// Its flow table as flow statistics reply parts (the last without OFPMPF_REPLY_MORE).
    fn flow_table(&self, xid: u32, out: &mut Vec<u8>) {
        let per = self.flows_per_part.max(1);
        let mut next: u32 = 0;
        loop {
            let end = next.saturating_add(per).min(self.flows);
            let part = (next..end)
                .map(|i| crate::message::FlowStats {
                    flow: crate::Flow::new(10, 100, crate::Match::new().reg(1, i)),
                    duration_sec: 0,
                    duration_nsec: 0,
                    packet_count: 0,
                    byte_count: 0,
                })
                .collect();
            let mut reply = MultipartReply::new(MultipartReplyBody::Flow(part));
            if end < self.flows {
                reply.flags = 1; // OFPMPF_REPLY_MORE
            }
            Message::MultipartReply(reply).encode_into(xid, out);
            if end >= self.flows {
                return;
            }
            next = end;
        }
    }

    /// Starts a session (`cfg`, a pipe of `pipe` bytes) to this switch and waits until it is
    /// ready: the session's handle, its remaining events and the switch task (its FLOW_MOD
    /// count). Panics if the handshake fails (a test helper).
    pub async fn connect(
        self,
        cfg: SessionConfig,
        pipe: usize,
    ) -> (
        SwitchHandle,
        UnboundedReceiver<SessionEvent>,
        JoinHandle<usize>,
    ) {
        let (ours, theirs) = tokio::io::duplex(pipe);
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(run_session(ours, 1, "fake".into(), cfg, tx));
        let switch = tokio::spawn(self.run(theirs));
        loop {
            match rx.recv().await {
                Some(SessionEvent::Ready { handle, info, .. }) => {
                    assert_eq!(info.dpid, self.dpid, "the handshake's datapath id");
                    return (handle, rx, switch);
                }
                Some(SessionEvent::Disconnected { cause, .. }) => panic!("disconnected: {cause}"),
                Some(_) => {}
                None => panic!("session ended"),
            }
        }
    }
}
