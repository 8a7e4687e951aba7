//! Packet simulator: traces a packet through the computed FlowSets of the nodes — priority
//! lookup per table with masked matching, apply-actions, goto, resubmit, set_field / load /
//! move, output / output_reg, groups — and across VXLAN into the destination node. It sees
//! only flows (and which port names sit on which ofport, to name a verdict), never the model.

use crate::model::ClusterModel;
use crate::pipeline::FlowSet;
use ofproto::{Action, Field, FieldSlice, Flow, Group, GroupType, Instruction, MatchField};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

/// Layer 3 of a simulated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    /// ARP.
    Arp {
        /// 1 request, 2 reply.
        op: u16,
        /// Sender IP.
        spa: Ipv4Addr,
        /// Target IP.
        tpa: Ipv4Addr,
        /// Sender MAC.
        sha: [u8; 6],
        /// Target MAC.
        tha: [u8; 6],
    },
    /// IPv4 with optional L4 ports (0 when not TCP/UDP/SCTP).
    Ipv4 {
        /// Source.
        src: Ipv4Addr,
        /// Destination.
        dst: Ipv4Addr,
        /// IP protocol.
        proto: u8,
        /// L4 source port.
        src_port: u16,
        /// L4 destination port.
        dst_port: u16,
    },
}

/// A packet and its pipeline metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Ingress ofport.
    pub in_port: u32,
    /// Ethernet source.
    pub eth_src: [u8; 6],
    /// Ethernet destination.
    pub eth_dst: [u8; 6],
    /// ARP or IPv4.
    pub l3: L3,
    /// Tunnel id (VXLAN VNI), for packets from vxlan0.
    pub tun_id: u64,
    /// Tunnel source (sender node IP).
    pub tun_src: Ipv4Addr,
    /// Tunnel destination.
    pub tun_dst: Ipv4Addr,
    /// reg0..reg15.
    pub regs: [u32; 16],
    /// pkt_mark.
    pub pkt_mark: u32,
    /// ct_state (0 until a `ct` action tracked the packet on this switch).
    pub ct_state: u32,
    /// ct_zone of the last `ct` lookup (0 while untracked).
    pub ct_zone: u16,
    /// ct_mark of the connection the last `ct` lookup found (0 while untracked).
    pub ct_mark: u32,
    /// conj_id (set by a completed conjunctive match for the re-lookup).
    pub conj_id: u32,
}

impl Packet {
    /// An IPv4 packet entering at `in_port`.
    pub fn ipv4(in_port: u32, eth_src: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        Self::l3(
            in_port,
            eth_src,
            [0x0a, 0x58, 0, 0, 0, 1],
            L3::Ipv4 {
                src,
                dst,
                proto: 1,
                src_port: 0,
                dst_port: 0,
            },
        )
    }

    /// A TCP or UDP packet entering at `in_port`.
    pub fn l4(
        in_port: u32,
        eth_src: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        dst_port: u16,
    ) -> Self {
        Self::l3(
            in_port,
            eth_src,
            [0x0a, 0x58, 0, 0, 0, 1],
            L3::Ipv4 {
                src,
                dst,
                proto,
                src_port: 40000,
                dst_port,
            },
        )
    }

    /// A broadcast ARP request from (`sha`, `spa`) for `tpa`.
    pub fn arp_request(in_port: u32, sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Self {
        Self::l3(
            in_port,
            sha,
            [0xff; 6],
            L3::Arp {
                op: 1,
                spa,
                tpa,
                sha,
                tha: [0; 6],
            },
        )
    }

    /// A packet from its layer 3 part.
    pub fn l3(in_port: u32, eth_src: [u8; 6], eth_dst: [u8; 6], l3: L3) -> Self {
        Packet {
            in_port,
            eth_src,
            eth_dst,
            l3,
            tun_id: 0,
            tun_src: Ipv4Addr::UNSPECIFIED,
            tun_dst: Ipv4Addr::UNSPECIFIED,
            regs: [0; 16],
            pkt_mark: 0,
            ct_state: 0,
            ct_zone: 0,
            ct_mark: 0,
            conj_id: 0,
        }
    }

    fn get(&self, f: Field) -> Option<u64> {
        let mac = |m: [u8; 6]| m.iter().fold(0u64, |a, b| (a << 8) | *b as u64);
        let ip4 = |a: Ipv4Addr| u32::from(a) as u64;
        Some(match (f, &self.l3) {
            (Field::InPort, _) => self.in_port as u64,
            (Field::EthSrc, _) => mac(self.eth_src),
            (Field::EthDst, _) => mac(self.eth_dst),
            (Field::EthType, L3::Arp { .. }) => 0x0806,
            (Field::EthType, L3::Ipv4 { .. }) => 0x0800,
            (Field::TunnelId, _) => self.tun_id,
            (Field::TunIpv4Src, _) => ip4(self.tun_src),
            (Field::TunIpv4Dst, _) => ip4(self.tun_dst),
            (Field::Reg(n), _) => *self.regs.get(n as usize)? as u64,
            (Field::PktMark, _) => self.pkt_mark as u64,
            (Field::CtState, _) => self.ct_state as u64,
            (Field::CtZone, _) => self.ct_zone as u64,
            (Field::CtMark, _) => self.ct_mark as u64,
            (Field::ConjId, _) => self.conj_id as u64,
            (Field::ArpOp, L3::Arp { op, .. }) => *op as u64,
            (Field::ArpSpa, L3::Arp { spa, .. }) => ip4(*spa),
            (Field::ArpTpa, L3::Arp { tpa, .. }) => ip4(*tpa),
            (Field::ArpSha, L3::Arp { sha, .. }) => mac(*sha),
            (Field::ArpTha, L3::Arp { tha, .. }) => mac(*tha),
            (Field::Ipv4Src, L3::Ipv4 { src, .. }) => ip4(*src),
            (Field::Ipv4Dst, L3::Ipv4 { dst, .. }) => ip4(*dst),
            (Field::IpProto, L3::Ipv4 { proto, .. }) => *proto as u64,
            (
                Field::TcpSrc,
                L3::Ipv4 {
                    proto: 6, src_port, ..
                },
            )
            | (
                Field::UdpSrc,
                L3::Ipv4 {
                    proto: 17,
                    src_port,
                    ..
                },
            )
            | (
                Field::SctpSrc,
                L3::Ipv4 {
                    proto: 132,
                    src_port,
                    ..
                },
            ) => *src_port as u64,
            (
                Field::TcpDst,
                L3::Ipv4 {
                    proto: 6, dst_port, ..
                },
            )
            | (
                Field::UdpDst,
                L3::Ipv4 {
                    proto: 17,
                    dst_port,
                    ..
                },
            )
            | (
                Field::SctpDst,
                L3::Ipv4 {
                    proto: 132,
                    dst_port,
                    ..
                },
            ) => *dst_port as u64,
            _ => return None,
        })
    }

    fn set(&mut self, f: Field, v: u64) -> bool {
        let mac = |v: u64| {
            let b = v.to_be_bytes();
            [b[2], b[3], b[4], b[5], b[6], b[7]]
        };
        let ip4 = |v: u64| Ipv4Addr::from(v as u32);
        match (f, &mut self.l3) {
            (Field::EthSrc, _) => self.eth_src = mac(v),
            (Field::EthDst, _) => self.eth_dst = mac(v),
            (Field::TunnelId, _) => self.tun_id = v,
            (Field::TunIpv4Src, _) => self.tun_src = ip4(v),
            (Field::TunIpv4Dst, _) => self.tun_dst = ip4(v),
            (Field::Reg(n), _) => match self.regs.get_mut(n as usize) {
                Some(r) => *r = v as u32,
                None => return false,
            },
            (Field::PktMark, _) => self.pkt_mark = v as u32,
            (Field::Ipv4Src, L3::Ipv4 { src, .. }) => *src = ip4(v),
            (Field::Ipv4Dst, L3::Ipv4 { dst, .. }) => *dst = ip4(v),
            (Field::ArpSpa, L3::Arp { spa, .. }) => *spa = ip4(v),
            (Field::ArpTpa, L3::Arp { tpa, .. }) => *tpa = ip4(v),
            _ => return false,
        }
        true
    }

    /// The connection tuple (src, dst, proto, sport, dport) of an IPv4 packet.
    fn tuple(&self) -> Option<ConnTuple> {
        match self.l3 {
            L3::Ipv4 {
                src,
                dst,
                proto,
                src_port,
                dst_port,
            } => Some((src, dst, proto, src_port, dst_port)),
            L3::Arp { .. } => None,
        }
    }

    fn read_slice(&self, s: &FieldSlice) -> Option<u64> {
        let v = self.get(Field::from_header(s.header)?)?;
        Some((v >> s.ofs) & bits(s.n_bits))
    }

    fn write_slice(&mut self, s: &FieldSlice, value: u64) -> bool {
        let Some(f) = Field::from_header(s.header) else {
            return false;
        };
        let old = self.get(f).unwrap_or(0);
        let m = bits(s.n_bits) << s.ofs;
        self.set(f, (old & !m) | ((value << s.ofs) & m))
    }
}

/// (source, destination, protocol, source port, destination port).
type ConnTuple = (Ipv4Addr, Ipv4Addr, u8, u16, u16);

fn reversed(t: ConnTuple) -> ConnTuple {
    (t.1, t.0, t.2, t.4, t.3)
}

fn is_conjunctive(f: &Flow) -> bool {
    f.instructions.iter().any(|i| match i {
        Instruction::ApplyActions(a) => a.iter().any(|a| matches!(a, Action::Conjunction { .. })),
        _ => false,
    })
}

fn bits(n: u16) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

fn matches(p: &Packet, mf: &MatchField) -> bool {
    let Some(f) = mf.field() else {
        return false;
    };
    let Some(v) = p.get(f) else {
        return false;
    };
    let m = mf.mask_u64();
    v & m == mf.value_u64() & m
}

/// One flow (or table miss) a packet went through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Node name.
    pub node: String,
    /// Table.
    pub table: u8,
    /// Priority of the matched flow (None: table miss).
    pub priority: Option<u16>,
    /// Cookie of the matched flow.
    pub cookie: u64,
}

/// Where a copy of the packet ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Output to a pod's port.
    Delivered {
        /// Node.
        node: String,
        /// ofport.
        ofport: u32,
        /// Port name.
        port: String,
    },
    /// Output to tun0 (the node's host).
    Host {
        /// Node.
        node: String,
    },
    /// The pipeline ended without output; the last step decided.
    Dropped {
        /// Node.
        node: String,
        /// The deciding step.
        by: Step,
    },
    /// Output to vxlan0 with a tun_dst that is no node.
    TunnelToUnknown {
        /// Sending node.
        node: String,
        /// The tun_dst.
        tun_dst: Ipv4Addr,
    },
    /// Output to a port with nothing attached.
    UnknownPort {
        /// Node.
        node: String,
        /// ofport.
        ofport: u32,
    },
    /// Too many tables, resubmits or tunnel hops.
    Loop {
        /// Node.
        node: String,
    },
}

/// The result of a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Every flow matched, in order, across nodes.
    pub steps: Vec<Step>,
    /// Every end the packet (and its copies) reached.
    pub outcomes: Vec<Outcome>,
    /// Every VXLAN hop, in order: what left which node over vxlan0.
    pub tunnels: Vec<TunnelHop>,
    /// Every `ct(table=..)` recirculation, in order: the state conntrack gave.
    pub conntrack: Vec<CtLookup>,
    /// Every `controller(...)` action executed (the audit logging flows' copies to the node
    /// shim), in order.
    pub packet_ins: Vec<PacketInCopy>,
}

/// A copy of the packet a `controller(...)` action sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketInCopy {
    /// Node.
    pub node: String,
    /// Table of the flow that sent it.
    pub table: u8,
    /// Cookie of the flow that sent it.
    pub cookie: u64,
    /// The action's controller id.
    pub controller_id: u16,
    /// The action's userdata.
    pub userdata: Vec<u8>,
    /// The action's meter (None: unmetered).
    pub meter_id: Option<u32>,
}

/// What one `ct(table=..)` recirculation gave a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtLookup {
    /// Node.
    pub node: String,
    /// Zone looked up.
    pub zone: u16,
    /// ct_state the packet continued with.
    pub state: u32,
    /// ct_mark the packet continued with.
    pub mark: u32,
}

/// A packet sent out of vxlan0: the tunnel metadata the sender set and the packet as the
/// receiving node's vxlan0 hands it to its pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelHop {
    /// Sending node.
    pub from: String,
    /// `tun_id` as the sender's flows set it (all 64 bits; VXLAN carries the low 24).
    pub tun_id: u64,
    /// `tun_dst` as the sender's flows set it.
    pub tun_dst: Ipv4Addr,
    /// The node owning `tun_dst` (None: no such node).
    pub to: Option<String>,
    /// The packet as received: in_port = vxlan0, tun_id = the VNI, tun_src = the sender's
    /// IP, tun_dst, registers cleared.
    pub received: Packet,
}

impl Trace {
    /// `(node, port name)` of every pod port the packet reached.
    pub fn delivered(&self) -> Vec<(&str, &str)> {
        self.outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Delivered { node, port, .. } => Some((node.as_str(), port.as_str())),
                _ => None,
            })
            .collect()
    }
    /// The nodes whose host (tun0) received the packet.
    pub fn to_host(&self) -> Vec<&str> {
        self.outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Host { node } => Some(node.as_str()),
                _ => None,
            })
            .collect()
    }
    /// Whether every copy was dropped.
    pub fn dropped(&self) -> bool {
        self.outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Dropped { .. }))
    }
}

/// A node as the simulator sees it.
#[derive(Clone, Debug)]
pub struct SimNode {
    /// Name.
    pub name: String,
    /// Underlay IP.
    pub ip: Ipv4Addr,
    /// The flows and groups of its br0.
    pub flows: FlowSet,
    /// ofport → port name of attached pods (vxlan0 = 1 and tun0 = 2 are implicit).
    pub ports: BTreeMap<u32, String>,
}

struct Indexed {
    node: SimNode,
    tables: HashMap<u8, Vec<Flow>>,
    groups: HashMap<u32, Group>,
}

/// Which bucket a select group takes.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceOptions {
    /// Index of the bucket a select group uses (modulo the bucket count).
    pub select_bucket: usize,
}

const MAX_STEPS: usize = 256;
/// ct_state of a packet whose `ct(table=..)` recirculated a copy: this one stops.
const RECIRCULATED: u32 = u32::MAX;
const MAX_HOPS: usize = 4;

/// The cluster's switches, ready to trace packets.
pub struct Simulator {
    /// Connections committed on each switch (`ct(commit)`): (zone, original-direction tuple)
    /// → ct_mark.
    conntrack: std::cell::RefCell<Vec<HashMap<(u16, ConnTuple), u32>>>,
    nodes: Vec<Indexed>,
    by_name: HashMap<String, usize>,
    by_ip: HashMap<Ipv4Addr, usize>,
    opts: TraceOptions,
}

impl Simulator {
    /// A simulator over these nodes.
    pub fn new(nodes: Vec<SimNode>) -> Self {
        let mut s = Simulator {
            conntrack: Default::default(),
            nodes: Vec::new(),
            by_name: HashMap::new(),
            by_ip: HashMap::new(),
            opts: TraceOptions::default(),
        };
        for n in nodes {
            let mut tables: HashMap<u8, Vec<Flow>> = HashMap::new();
            for f in n.flows.iter() {
                tables.entry(f.table).or_default().push(f.clone());
            }
            for v in tables.values_mut() {
                // Highest priority first; ties keep FlowSet order (deterministic).
                v.sort_by_key(|f| std::cmp::Reverse(f.priority));
            }
            let groups = n
                .flows
                .groups()
                .iter()
                .map(|g| (g.group_id, g.clone()))
                .collect();
            s.by_name.insert(n.name.clone(), s.nodes.len());
            s.by_ip.insert(n.ip, s.nodes.len());
            s.nodes.push(Indexed {
                node: n,
                tables,
                groups,
            });
        }
        s.conntrack = std::cell::RefCell::new(vec![Default::default(); s.nodes.len()]);
        s
    }

    /// A simulator over every node of `model` with the given FlowSets (port names from the
    /// model's pods; forwarding only from the flows).
    pub fn from_model(model: &ClusterModel, flowsets: &BTreeMap<String, FlowSet>) -> Self {
        let nodes = model
            .nodes()
            .map(|n| SimNode {
                name: n.name.clone(),
                ip: n.ip,
                flows: flowsets.get(&n.name).cloned().unwrap_or_default(),
                ports: model
                    .pods_on_node(&n.name)
                    .map(|p| (p.ofport, p.port_name.clone()))
                    .collect(),
            })
            .collect();
        Self::new(nodes)
    }

    /// Forget every connection committed by earlier traces (conntrack starts empty).
    pub fn flush_conntrack(&self) {
        for t in self.conntrack.borrow_mut().iter_mut() {
            t.clear();
        }
    }

    /// The connection state and mark conntrack gives `p` on switch `n` in `zone`.
    fn ct_lookup(&self, n: usize, zone: u16, p: &Packet) -> (u32, u32) {
        use ofproto::oxm::ct_state::{EST, NEW, RPL, TRK};
        let Some(t) = p.tuple() else {
            return (0, 0);
        };
        let ct = self.conntrack.borrow();
        let Some(table) = ct.get(n) else {
            return (TRK | NEW, 0);
        };
        if let Some(mark) = table.get(&(zone, t)) {
            (TRK | EST, *mark)
        } else if let Some(mark) = table.get(&(zone, reversed(t))) {
            (TRK | EST | RPL, *mark)
        } else {
            (TRK | NEW, 0)
        }
    }

    /// `ct(commit,zone=..)`: records the connection of `p` (unless it is a reply of one
    /// already there); `mark` (from `exec(set_field:..->ct_mark)`) is stored on it.
    fn ct_commit(&self, n: usize, zone: u16, p: &Packet, mark: Option<u32>) {
        let Some(t) = p.tuple() else {
            return;
        };
        let mut ct = self.conntrack.borrow_mut();
        if let Some(table) = ct.get_mut(n) {
            let key = if table.contains_key(&(zone, reversed(t))) {
                (zone, reversed(t))
            } else {
                (zone, t)
            };
            let m = table.entry(key).or_insert(0);
            if let Some(v) = mark {
                *m = v;
            }
        }
    }

    /// The flow a packet hits in `table` (OVS classifier semantics with conjunctive matches:
    /// at each priority, an ordinary flow wins; else a completed conjunction sets conj_id and
    /// the table is searched again; else lower priorities).
    fn lookup<'a>(&self, flows: &'a [Flow], p: &mut Packet) -> Option<&'a Flow> {
        let hit = |f: &&Flow| f.matches.fields.iter().all(|m| matches(p, m));
        let mut i = 0;
        while i < flows.len() {
            let prio = flows[i].priority;
            let end = flows[i..]
                .iter()
                .position(|f| f.priority != prio)
                .map_or(flows.len(), |k| i + k);
            let level = &flows[i..end];
            if let Some(f) = level.iter().filter(hit).find(|f| !is_conjunctive(f)) {
                return Some(f);
            }
            // Clauses matched per conjunction id: (bitmask of clauses, n_clauses).
            let mut seen: BTreeMap<u32, (u64, u8)> = BTreeMap::new();
            for f in level.iter().filter(hit) {
                for ins in &f.instructions {
                    if let Instruction::ApplyActions(acts) = ins {
                        for a in acts {
                            if let Action::Conjunction {
                                id,
                                clause,
                                n_clauses,
                            } = a
                            {
                                let e = seen.entry(*id).or_insert((0, *n_clauses));
                                e.0 |= 1u64 << (*clause).min(63);
                            }
                        }
                    }
                }
            }
            let done = seen
                .iter()
                .find(|(_, (mask, n))| (0..*n).all(|k| mask & (1u64 << k) != 0));
            if let Some((&id, _)) = done {
                p.conj_id = id;
                let again = flows
                    .iter()
                    .filter(|f| !is_conjunctive(f))
                    .find(|f| f.matches.fields.iter().all(|m| matches(p, m)));
                p.conj_id = 0;
                return again;
            }
            i = end;
        }
        None
    }

    /// Use these options for following traces.
    pub fn with_options(mut self, opts: TraceOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Trace `packet` entering `node` at `packet.in_port`, starting in table 0.
    pub fn trace(&self, node: &str, packet: Packet) -> Trace {
        let mut t = Trace::default();
        match self.by_name.get(node) {
            Some(&i) => self.run_node(i, packet, 0, &mut t),
            None => t.outcomes.push(Outcome::UnknownPort {
                node: node.to_string(),
                ofport: packet.in_port,
            }),
        }
        t
    }

    fn run_node(&self, n: usize, mut p: Packet, hops: usize, t: &mut Trace) {
        let before = t.outcomes.len();
        let mut budget = MAX_STEPS;
        let mut last: Option<Step> = None;
        self.run_table(n, 0, &mut p, hops, t, &mut budget, &mut last);
        if t.outcomes.len() == before {
            let node = self.nodes[n].node.name.clone();
            let by = last.unwrap_or(Step {
                node: node.clone(),
                table: 0,
                priority: None,
                cookie: 0,
            });
            t.outcomes.push(Outcome::Dropped { node, by });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_table(
        &self,
        n: usize,
        table: u8,
        p: &mut Packet,
        hops: usize,
        t: &mut Trace,
        budget: &mut usize,
        last: &mut Option<Step>,
    ) {
        let mut table = table;
        loop {
            if *budget == 0 {
                t.outcomes.push(Outcome::Loop {
                    node: self.nodes[n].node.name.clone(),
                });
                return;
            }
            *budget -= 1;
            let node = &self.nodes[n];
            let flow = node.tables.get(&table).and_then(|v| self.lookup(v, p));
            let step = Step {
                node: node.node.name.clone(),
                table,
                priority: flow.map(|f| f.priority),
                cookie: flow.map_or(0, |f| f.cookie),
            };
            t.steps.push(step.clone());
            *last = Some(step);
            let Some(flow) = flow else {
                return; // table miss: drop (OpenFlow 1.3 default)
            };
            let mut next = None;
            for ins in &flow.instructions {
                match ins {
                    Instruction::ApplyActions(acts) => {
                        for a in acts {
                            self.act(n, a, p, hops, t, budget, last);
                            if p.ct_state == RECIRCULATED {
                                return;
                            }
                        }
                    }
                    Instruction::GotoTable(g) => next = Some(*g),
                    _ => {}
                }
            }
            match next {
                Some(g) => table = g,
                None => return,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn act(
        &self,
        n: usize,
        a: &Action,
        p: &mut Packet,
        hops: usize,
        t: &mut Trace,
        budget: &mut usize,
        last: &mut Option<Step>,
    ) {
        match a {
            Action::Output { port, .. } => self.output(n, *port, p, hops, t),
            Action::OutputReg { src, .. } => {
                if let Some(port) = p.read_slice(src) {
                    self.output(n, port as u32, p, hops, t);
                }
            }
            Action::SetField(mf) => {
                if let Some(f) = mf.field() {
                    p.set(f, mf.value_u64());
                }
            }
            Action::Load { dst, value } => {
                p.write_slice(dst, *value);
            }
            Action::Move { src, dst } => {
                if let Some(v) = p.read_slice(src) {
                    p.write_slice(dst, v);
                }
            }
            Action::Resubmit { table, .. } => {
                let mut copy_last = last.clone();
                self.run_table(n, table.unwrap_or(0), p, hops, t, budget, &mut copy_last);
                *last = copy_last;
            }
            Action::Group(id) => {
                let Some(g) = self.nodes[n].groups.get(id) else {
                    return;
                };
                let buckets: Vec<_> = match g.group_type {
                    GroupType::All => g.buckets.iter().collect(),
                    _ => g
                        .buckets
                        .get(self.opts.select_bucket % g.buckets.len().max(1))
                        .into_iter()
                        .collect(),
                };
                for b in buckets {
                    let mut q = p.clone();
                    for a in &b.actions {
                        self.act(n, a, &mut q, hops, t, budget, last);
                    }
                }
            }
            Action::Ct(c) => {
                // Zones from a field are not used by the pipeline: such a `ct` uses zone 0.
                let zone = if c.zone_src.is_some() { 0 } else { c.zone_imm };
                if c.flags & ofproto::action::ct_flags::COMMIT != 0 {
                    let mark = c.actions.iter().find_map(|a| match a {
                        Action::SetField(mf) if mf.field() == Some(Field::CtMark) => {
                            Some(mf.value_u64() as u32)
                        }
                        _ => None,
                    });
                    self.ct_commit(n, zone, p, mark);
                }
                if let Some(tbl) = c.recirc_table {
                    // Recirculation: the packet comes back tracked and starts over in `tbl`.
                    let mut q = p.clone();
                    (q.ct_state, q.ct_mark) = self.ct_lookup(n, zone, p);
                    q.ct_zone = zone;
                    t.conntrack.push(CtLookup {
                        node: self.nodes[n].node.name.clone(),
                        zone,
                        state: q.ct_state,
                        mark: q.ct_mark,
                    });
                    let mut copy_last = last.clone();
                    self.run_table(n, tbl, &mut q, hops, t, budget, &mut copy_last);
                    *last = copy_last;
                    p.ct_state = RECIRCULATED; // the original copy does not go on
                } else {
                    // As Open vSwitch: after `ct` without `table=` the packet goes on
                    // untracked, its conntrack fields cleared.
                    p.ct_state = 0;
                    p.ct_zone = 0;
                    p.ct_mark = 0;
                }
            }
            Action::Controller {
                controller_id,
                userdata,
                meter_id,
                ..
            } => {
                // A copy to the controller; the packet itself goes on.
                let (table, cookie) = last.as_ref().map_or((0, 0), |s| (s.table, s.cookie));
                t.packet_ins.push(PacketInCopy {
                    node: self.nodes[n].node.name.clone(),
                    table,
                    cookie,
                    controller_id: *controller_id,
                    userdata: userdata.clone(),
                    meter_id: *meter_id,
                });
            }
            _ => {} // note, dec_ttl, ...: no effect on where the packet goes
        }
    }

    fn output(&self, n: usize, port: u32, p: &Packet, hops: usize, t: &mut Trace) {
        let node = &self.nodes[n].node;
        if port == p.in_port {
            return; // OVS never outputs to the ingress port unless told IN_PORT
        }
        match port {
            crate::pipeline::regs::OFPORT_VXLAN => {
                let mut q = Packet::l3(
                    crate::pipeline::regs::OFPORT_VXLAN,
                    p.eth_src,
                    p.eth_dst,
                    p.l3,
                );
                q.tun_id = p.tun_id & 0xff_ffff; // the VNI is 24 bits
                q.tun_src = node.ip;
                q.tun_dst = p.tun_dst;
                let dst = self.by_ip.get(&p.tun_dst).copied();
                t.tunnels.push(TunnelHop {
                    from: node.name.clone(),
                    tun_id: p.tun_id,
                    tun_dst: p.tun_dst,
                    to: dst.map(|d| self.nodes[d].node.name.clone()),
                    received: q.clone(),
                });
                let Some(dst) = dst else {
                    t.outcomes.push(Outcome::TunnelToUnknown {
                        node: node.name.clone(),
                        tun_dst: p.tun_dst,
                    });
                    return;
                };
                if hops >= MAX_HOPS {
                    t.outcomes.push(Outcome::Loop {
                        node: node.name.clone(),
                    });
                    return;
                }
                self.run_node(dst, q, hops + 1, t);
            }
            crate::pipeline::regs::OFPORT_TUN0 => t.outcomes.push(Outcome::Host {
                node: node.name.clone(),
            }),
            _ => match node.ports.get(&port) {
                Some(name) => t.outcomes.push(Outcome::Delivered {
                    node: node.name.clone(),
                    ofport: port,
                    port: name.clone(),
                }),
                None => t.outcomes.push(Outcome::UnknownPort {
                    node: node.name.clone(),
                    ofport: port,
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterNetworkConfig, Mode};
    use crate::model::PodAttach;
    use crate::pipeline::compute_node;

    fn two_nodes() -> (ClusterModel, BTreeMap<String, FlowSet>) {
        let config = ClusterNetworkConfig::new(
            "10.128.0.0/14".parse().expect("cidr"),
            23,
            "172.30.0.0/16".parse().expect("cidr"),
            Mode::Multitenant,
        );
        let mut m = ClusterModel::new(config).expect("model");
        m.add_node("n1", Ipv4Addr::new(192, 168, 0, 1), 1)
            .expect("n1");
        m.add_node("n2", Ipv4Addr::new(192, 168, 0, 2), 2)
            .expect("n2");
        m.add_namespace("a").expect("ns");
        for (name, node) in [("p1", "n1"), ("p2", "n2")] {
            m.add_pod(PodAttach {
                namespace: "a",
                name,
                node,
                port_name: name,
                ofport: 3,
            })
            .expect("pod");
        }
        let sets = ["n1", "n2"]
            .into_iter()
            .map(|n| (n.to_string(), compute_node(&m, n).expect("flows")))
            .collect();
        (m, sets)
    }

    #[test]
    fn a_vxlan_hop_is_recorded_with_the_packet_the_receiver_sees() {
        let (m, sets) = two_nodes();
        let (p1, p2) = (
            m.pod("a", "p1").cloned().expect("p1"),
            m.pod("a", "p2").cloned().expect("p2"),
        );
        let netid = u64::from(m.effective_netid("a"));
        let t =
            Simulator::from_model(&m, &sets).trace("n1", Packet::ipv4(3, p1.mac(), p1.ip, p2.ip));
        assert_eq!(t.delivered(), vec![("n2", "p2")]);
        let [hop] = t.tunnels.as_slice() else {
            panic!("one hop expected: {:?}", t.tunnels);
        };
        assert_eq!(
            (
                hop.from.as_str(),
                hop.to.as_deref(),
                hop.tun_id,
                hop.tun_dst
            ),
            ("n1", Some("n2"), netid, Ipv4Addr::new(192, 168, 0, 2))
        );
        let r = &hop.received;
        assert_eq!((r.in_port, r.tun_id, r.regs), (1, netid, [0; 16]));
        assert_eq!(
            (r.tun_src, r.tun_dst),
            (Ipv4Addr::new(192, 168, 0, 1), hop.tun_dst)
        );
    }

    /// A three-clause conjunction (pod, peer, port) decides: the allowed port is delivered,
    /// another port of the same peer is dropped by the isolation flow of table 80.
    #[test]
    fn a_conjunctive_match_allows_exactly_its_ports() {
        let m = crate::pipeline::netpol::tests::one_node_policy();
        let sets: BTreeMap<String, FlowSet> =
            [("n1".to_string(), compute_node(&m, "n1").expect("flows"))].into();
        let sim = Simulator::from_model(&m, &sets);
        let (a, b) = (
            m.pod("ns", "a").cloned().expect("a"),
            m.pod("ns", "b").cloned().expect("b"),
        );
        for (port, delivered) in [(80, true), (443, true), (81, false)] {
            sim.flush_conntrack();
            let t = sim.trace("n1", Packet::l4(3, a.mac(), a.ip, b.ip, 6, port));
            if delivered {
                assert_eq!(t.delivered(), vec![("n1", "b")], "port {port}: {t:?}");
            } else {
                assert!(
                    matches!(t.outcomes.as_slice(), [Outcome::Dropped { by, .. }] if by.table == 80),
                    "port {port}: {t:?}"
                );
            }
        }
    }

    #[test]
    fn a_hop_to_an_unknown_node_is_recorded_too() {
        let (m, mut sets) = two_nodes();
        // n1 still holds n2's mesh flows, but n2 is gone from the simulator.
        sets.remove("n2");
        let n1 = sets.get("n1").cloned().expect("n1 flows");
        let p1 = m.pod("a", "p1").cloned().expect("p1");
        let p2_ip = m.pod("a", "p2").map(|p| p.ip).expect("p2");
        let sim = Simulator::new(vec![SimNode {
            name: "n1".into(),
            ip: Ipv4Addr::new(192, 168, 0, 1),
            flows: n1,
            ports: BTreeMap::from([(3, "p1".to_string())]),
        }]);
        let t = sim.trace("n1", Packet::ipv4(3, p1.mac(), p1.ip, p2_ip));
        assert_eq!(t.tunnels.len(), 1);
        assert_eq!(t.tunnels[0].to, None);
        assert!(matches!(
            t.outcomes.as_slice(),
            [Outcome::TunnelToUnknown { node, .. }] if node == "n1"
        ));
    }
}
