//! Parser for `ovs-appctl ofproto/trace` output (Open vSwitch 3.1 text format).
//!
//! The verdict is taken at the OpenFlow level (what the pipeline did: outputs, with the tunnel
//! id/destination set before each output) and at the datapath level (the `Datapath actions:`
//! line). Datapath port numbers differ from OpenFlow port numbers, so tests compare the
//! OpenFlow-level outputs; the datapath line is kept as text.
//!
//! Limits: `clone(...)` and group buckets restore the packet's metadata in OVS, but this parser
//! tracks tunnel fields linearly through the trace; a `move:` into the tunnel id is only seen via
//! the `-> NXM_NX_TUN_ID[] is now ...` / `-> NXM_NX_TUN_ID[0..31] is now ...` note OVS prints
//! (for a slice, bits outside it count as 0 unless this trace set them: OVS's `Flow:` line does
//! not show the input tun_id).

use std::net::Ipv4Addr;

use crate::error::{HarnessError, Result};

/// Where an OpenFlow `output` action sent the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputPort {
    /// A numbered port.
    Port(u32),
    /// A port given by name (flows written with port names).
    Named(String),
    /// `IN_PORT`.
    InPort,
    /// `LOCAL` (the bridge's internal port).
    Local,
    /// `NORMAL` (L2 learning switch).
    Normal,
    /// `FLOOD`.
    Flood,
    /// `ALL`.
    All,
    /// `CONTROLLER` (packet-in).
    Controller,
}

/// Tunnel metadata in effect when an output happened (set earlier in the same trace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TunnelSet {
    /// `tun_id` (VNI), if set.
    pub tun_id: Option<u64>,
    /// `tun_dst` (remote VTEP), if set.
    pub tun_dst: Option<Ipv4Addr>,
}

/// One output the OpenFlow pipeline performed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceOutput {
    /// Bridge whose pipeline performed it.
    pub bridge: String,
    /// The port.
    pub port: OutputPort,
    /// Tunnel fields set before this output (None if the trace set none).
    pub tunnel: Option<TunnelSet>,
    /// OVS skipped it (`>> skipping output to input port`).
    pub skipped: bool,
    /// The `->`/`>>` notes OVS printed right after it.
    pub notes: Vec<String>,
}

/// One table visit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// Bridge.
    pub bridge: String,
    /// Table id.
    pub table: u8,
    /// The matched rule as OVS printed it (`match, priority N`), or None for `No match.`.
    pub rule: Option<String>,
    /// The actions executed in this step, one per line as printed.
    pub actions: Vec<String>,
}

/// A parsed `ofproto/trace` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The full text OVS printed.
    pub raw: String,
    /// The traced bridge (first `bridge("...")` section).
    pub bridge: String,
    /// Table visits in order (all passes, all bridges).
    pub steps: Vec<TraceStep>,
    /// Outputs in order (all passes, all bridges; see [`Trace::outputs_on`]).
    pub outputs: Vec<TraceOutput>,
    /// Every `>>` line (errors and exceptions OVS reported), trimmed.
    pub errors: Vec<String>,
    /// The `Datapath actions:` text of every pass (recirculation adds passes).
    pub datapath_actions: Vec<String>,
}

impl Trace {
    /// Parses the text printed by `ovs-appctl ofproto/trace`.
    pub fn parse(text: &str) -> Result<Trace> {
        Parser::default().run(text)
    }

    /// The final `Datapath actions:` text.
    pub fn final_datapath_actions(&self) -> &str {
        self.datapath_actions
            .last()
            .map(String::as_str)
            .unwrap_or("")
    }

    /// True if every pass ended in `Datapath actions: drop`.
    pub fn datapath_drop(&self) -> bool {
        self.datapath_actions.iter().all(|a| a == "drop")
    }

    /// Outputs performed (not skipped) by the pipeline of `bridge`.
    pub fn outputs_on<'a>(&'a self, bridge: &'a str) -> impl Iterator<Item = &'a TraceOutput> + 'a {
        self.outputs
            .iter()
            .filter(move |o| o.bridge == bridge && !o.skipped)
    }

    /// Numbered output ports of the traced bridge, in order.
    pub fn output_ports(&self) -> Vec<u32> {
        self.outputs_on(&self.bridge)
            .filter_map(|o| match o.port {
                OutputPort::Port(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// True if the traced bridge's pipeline output the packet nowhere (an OpenFlow-level drop).
    pub fn dropped(&self) -> bool {
        self.outputs_on(&self.bridge).next().is_none()
    }

    /// Tunnel fields of each output to `port` on the traced bridge (e.g. the vxlan port 1).
    pub fn tunnel_outputs(&self, port: u32) -> Vec<TunnelSet> {
        self.outputs_on(&self.bridge)
            .filter(|o| o.port == OutputPort::Port(port))
            .map(|o| o.tunnel.clone().unwrap_or_default())
            .collect()
    }

    /// True if the traced bridge sent the packet to the controller.
    pub fn to_controller(&self) -> bool {
        self.outputs_on(&self.bridge)
            .any(|o| o.port == OutputPort::Controller)
    }
}

#[derive(Default)]
struct Parser {
    trace: Option<Trace>,
    bridge: String,
    first_bridge: Option<String>,
    tunnel: Option<TunnelSet>,
    /// Index of the output the following notes belong to.
    last_output: Option<usize>,
    /// An `output:NXM_...` waiting for its `-> output port is N` note.
    pending_reg_output: bool,
}

impl Parser {
    fn run(mut self, text: &str) -> Result<Trace> {
        let mut t = Trace {
            raw: text.to_owned(),
            bridge: String::new(),
            steps: Vec::new(),
            outputs: Vec::new(),
            errors: Vec::new(),
            datapath_actions: Vec::new(),
        };
        for line in text.lines() {
            self.line(&mut t, line);
        }
        t.bridge = self.first_bridge.take().unwrap_or_default();
        if t.datapath_actions.is_empty() || t.bridge.is_empty() {
            return Err(HarnessError::Parse {
                what: "ofproto/trace".into(),
                detail: format!("no bridge section or no `Datapath actions:` line in:\n{text}"),
            });
        }
        self.trace = None;
        Ok(t)
    }

    fn line(&mut self, t: &mut Trace, line: &str) {
        let s = line.trim();
        if s.is_empty() || s.starts_with("---") || s.starts_with("===") {
            return;
        }
        if let Some(rest) = s.strip_prefix("Datapath actions: ") {
            t.datapath_actions.push(rest.trim().to_owned());
            return;
        }
        if s.starts_with("Flow: ") {
            // A new pass (the first one, or a recirculation).
            self.tunnel = None;
            self.last_output = None;
            return;
        }
        if s.starts_with("Final flow:") || s.starts_with("Megaflow:") {
            self.last_output = None;
            return;
        }
        if let Some(name) = s
            .strip_prefix("bridge(\"")
            .and_then(|r| r.strip_suffix("\")"))
        {
            self.bridge = name.to_owned();
            if self.first_bridge.is_none() {
                self.first_bridge = Some(name.to_owned());
            }
            self.last_output = None;
            return;
        }
        if let Some(note) = s.strip_prefix(">>") {
            let note = note.trim().to_owned();
            t.errors.push(note.clone());
            self.note(t, &note, true);
            return;
        }
        if let Some(note) = s.strip_prefix("->") {
            let note = note.trim();
            self.note(t, note, false);
            return;
        }
        if let Some((table, rule)) = table_line(s) {
            t.steps.push(TraceStep {
                bridge: self.bridge.clone(),
                table,
                rule,
                actions: Vec::new(),
            });
            self.last_output = None;
            return;
        }
        if s == "thaw" || s.starts_with("Resuming from table") || s.starts_with("bucket ") {
            return;
        }
        self.action(t, s);
    }

    fn note(&mut self, t: &mut Trace, note: &str, error: bool) {
        if let Some(v) = note
            .strip_prefix("NXM_NX_TUN_ID[] is now ")
            .or_else(|| note.strip_prefix("tun_id is now "))
        {
            if let Some(id) = parse_u64(v) {
                self.tunnel.get_or_insert_with(TunnelSet::default).tun_id = Some(id);
            }
        } else if let Some((ofs, n_bits, v)) = slice_note(note, "NXM_NX_TUN_ID") {
            // `move:...->NXM_NX_TUN_ID[0..31]` prints the slice's new value only; bits outside
            // it keep what this trace set before (0 if nothing: the input tun_id is not known).
            let tunnel = self.tunnel.get_or_insert_with(TunnelSet::default);
            let mask = if n_bits >= 64 {
                u64::MAX
            } else {
                ((1u64 << n_bits) - 1) << ofs
            };
            let old = tunnel.tun_id.unwrap_or(0);
            tunnel.tun_id = Some((old & !mask) | (v.checked_shl(ofs).unwrap_or(0) & mask));
        }
        if let Some(v) = note
            .strip_prefix("NXM_NX_TUN_IPV4_DST[] is now ")
            .or_else(|| note.strip_prefix("tun_dst is now "))
        {
            if let Some(ip) = parse_ipv4(v) {
                self.tunnel.get_or_insert_with(TunnelSet::default).tun_dst = Some(ip);
            }
        }
        if self.pending_reg_output {
            if let Some(p) = note.strip_prefix("output port is ") {
                self.pending_reg_output = false;
                self.push_output(t, port_of(p.trim()));
                return;
            }
        }
        if let Some(i) = self.last_output {
            if let Some(o) = t.outputs.get_mut(i) {
                if error && note.starts_with("skipping output to input port") {
                    o.skipped = true;
                }
                o.notes.push(note.to_owned());
            }
        }
    }

    fn action(&mut self, t: &mut Trace, s: &str) {
        if let Some(step) = t.steps.last_mut() {
            step.actions.push(s.to_owned());
        }
        self.last_output = None;
        self.pending_reg_output = false;
        if let Some(rest) = s.strip_prefix("output:") {
            if rest.starts_with("NXM_") || rest.starts_with("reg") || rest.contains('[') {
                self.pending_reg_output = true;
            } else {
                self.push_output(t, port_of(rest));
            }
            return;
        }
        if let Some(rest) = s.strip_prefix("output(port=") {
            let p = rest.split([',', ')']).next().unwrap_or(rest);
            self.push_output(t, port_of(p));
            return;
        }
        let special = match s {
            "IN_PORT" | "in_port" => Some(OutputPort::InPort),
            "LOCAL" | "local" => Some(OutputPort::Local),
            "NORMAL" | "normal" => Some(OutputPort::Normal),
            "FLOOD" | "flood" => Some(OutputPort::Flood),
            "ALL" | "all" => Some(OutputPort::All),
            _ if s.starts_with("CONTROLLER") || s.starts_with("controller") => {
                Some(OutputPort::Controller)
            }
            _ => None,
        };
        if let Some(p) = special {
            self.push_output(t, p);
            return;
        }
        self.tunnel_action(s);
    }

    fn tunnel_action(&mut self, s: &str) {
        let (value, field) = if let Some(rest) = s.strip_prefix("set_field:") {
            match rest.rsplit_once("->") {
                Some((v, f)) => (v, f),
                None => return,
            }
        } else if let Some(rest) = s.strip_prefix("load:") {
            match rest.rsplit_once("->") {
                Some((v, f)) => (v, f),
                None => return,
            }
        } else if let Some(v) = s
            .strip_prefix("set_tunnel:")
            .or_else(|| s.strip_prefix("set_tunnel64:"))
        {
            (v, "tun_id")
        } else {
            return;
        };
        let value = value.split('/').next().unwrap_or(value);
        match field {
            "tun_id" | "tunnel_id" | "NXM_NX_TUN_ID[]" => {
                if let Some(id) = parse_u64(value) {
                    self.tunnel.get_or_insert_with(TunnelSet::default).tun_id = Some(id);
                }
            }
            "tun_dst" | "NXM_NX_TUN_IPV4_DST[]" => {
                if let Some(ip) = parse_ipv4(value) {
                    self.tunnel.get_or_insert_with(TunnelSet::default).tun_dst = Some(ip);
                }
            }
            _ => {}
        }
    }

    fn push_output(&mut self, t: &mut Trace, port: OutputPort) {
        t.outputs.push(TraceOutput {
            bridge: self.bridge.clone(),
            port,
            tunnel: self.tunnel.clone(),
            skipped: false,
            notes: Vec::new(),
        });
        self.last_output = Some(t.outputs.len() - 1);
    }
}

/// `" 0. in_port=2, priority 100"` -> (0, Some("in_port=2, priority 100")); `"10. No match."`
/// -> (10, None).
fn table_line(s: &str) -> Option<(u8, Option<String>)> {
    let (num, rest) = s.split_once(". ")?;
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let table = num.parse().ok()?;
    let rest = rest.trim();
    if rest.starts_with("No match") {
        Some((table, None))
    } else {
        Some((table, Some(rest.to_owned())))
    }
}

/// `"NXM_NX_TUN_ID[0..31] is now 0xa"` (field `NXM_NX_TUN_ID`) -> (0, 32, 0xa); a single bit
/// `[5]` -> (5, 1, v). Whole fields (`[]`) are not slices.
fn slice_note(note: &str, field: &str) -> Option<(u32, u32, u64)> {
    let rest = note.strip_prefix(field)?.strip_prefix('[')?;
    let (range, value) = rest.split_once("] is now ")?;
    let (lo, hi) = match range.split_once("..") {
        Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
        None => {
            let bit = range.parse::<u32>().ok()?;
            (bit, bit)
        }
    };
    if hi < lo || hi >= 64 {
        return None;
    }
    Some((lo, hi - lo + 1, parse_u64(value)?))
}

fn port_of(s: &str) -> OutputPort {
    let s = s.trim();
    match s.parse::<u32>() {
        Ok(n) => OutputPort::Port(n),
        Err(_) => match s {
            "IN_PORT" => OutputPort::InPort,
            "LOCAL" => OutputPort::Local,
            "NORMAL" => OutputPort::Normal,
            "FLOOD" => OutputPort::Flood,
            "ALL" => OutputPort::All,
            "CONTROLLER" => OutputPort::Controller,
            _ => OutputPort::Named(s.to_owned()),
        },
    }
}

fn parse_u64(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

fn parse_ipv4(v: &str) -> Option<Ipv4Addr> {
    let v = v.trim();
    v.parse()
        .ok()
        .or_else(|| parse_u64(v).and_then(|n| u32::try_from(n).ok().map(Ipv4Addr::from)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Trace {
        Trace::parse(text).expect("captured trace parses")
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().expect("ip")
    }

    #[test]
    fn local_output_with_mac_rewrite() {
        let t = parse(include_str!("fixtures/trace_local_output.txt"));
        assert_eq!(t.bridge, "br0");
        assert_eq!(t.output_ports(), vec![3]);
        assert!(!t.dropped());
        assert_eq!(
            t.final_datapath_actions(),
            "set(eth(dst=0a:58:0a:f4:00:03)),2"
        );
        assert_eq!(t.steps.len(), 2);
        assert_eq!(t.steps[1].table, 10);
        assert_eq!(
            t.steps[1].rule.as_deref(),
            Some("ip,nw_dst=10.244.0.3, priority 100")
        );
        assert_eq!(t.outputs[0].tunnel, None);
    }

    #[test]
    fn tunnel_output_without_underlay_route() {
        let t = parse(include_str!("fixtures/trace_tunnel_no_route.txt"));
        assert_eq!(t.output_ports(), vec![1]);
        assert_eq!(
            t.tunnel_outputs(1),
            vec![TunnelSet {
                tun_id: Some(100),
                tun_dst: Some(ip("172.31.0.2"))
            }]
        );
        assert!(t.datapath_drop());
        assert_eq!(t.errors, vec!["native tunnel routing failed".to_owned()]);
        assert!(t.outputs[0]
            .notes
            .contains(&"native tunnel routing failed".to_owned()));
    }

    #[test]
    fn two_tunnel_outputs_keep_their_own_fields() {
        let t = parse(include_str!("fixtures/trace_two_tunnels.txt"));
        assert_eq!(
            t.tunnel_outputs(1),
            vec![
                TunnelSet {
                    tun_id: Some(7),
                    tun_dst: Some(ip("172.31.0.7"))
                },
                TunnelSet {
                    tun_id: Some(8),
                    tun_dst: Some(ip("172.31.0.8"))
                }
            ]
        );
    }

    #[test]
    fn drops() {
        let t = parse(include_str!("fixtures/trace_no_match_drop.txt"));
        assert!(t.dropped());
        assert!(t.datapath_drop());
        assert_eq!(
            t.steps.last().map(|s| (s.table, s.rule.clone())),
            Some((10, None))
        );
        let t = parse(include_str!("fixtures/trace_explicit_drop.txt"));
        assert!(t.dropped());
        assert_eq!(t.steps[0].actions, vec!["drop".to_owned()]);
    }

    #[test]
    fn group_bucket_output_and_skipped_in_port() {
        let t = parse(include_str!("fixtures/trace_group_and_skip.txt"));
        // output:3, output:2 (skipped: it is the in_port), group:5 bucket output:3
        assert_eq!(t.outputs.len(), 3);
        assert!(t.outputs[1].skipped);
        assert_eq!(t.output_ports(), vec![3, 3]);
        assert_eq!(t.final_datapath_actions(), "2,2");
    }

    #[test]
    fn decap_move_into_register_is_not_a_tunnel_output() {
        let t = parse(include_str!("fixtures/trace_decap_move.txt"));
        assert_eq!(t.output_ports(), vec![2]);
        assert_eq!(t.outputs[0].tunnel, None);
        assert_eq!(
            t.steps[1].actions,
            vec!["dec_ttl".to_owned(), "output:2".to_owned()]
        );
    }

    #[test]
    fn controller_and_special_ports() {
        let t = parse(include_str!("fixtures/trace_controller.txt"));
        assert!(t.to_controller());
        assert!(t.output_ports().is_empty());
        let t = parse(include_str!("fixtures/trace_special_ports.txt"));
        let ports: Vec<_> = t.outputs.iter().map(|o| o.port.clone()).collect();
        assert_eq!(
            ports,
            vec![OutputPort::InPort, OutputPort::Local, OutputPort::Normal]
        );
    }

    #[test]
    fn register_output_and_load_tunnel() {
        let t = parse(include_str!("fixtures/trace_output_reg.txt"));
        assert_eq!(t.output_ports(), vec![3]);
        let t = parse(include_str!("fixtures/trace_load_tunnel.txt"));
        assert_eq!(
            t.tunnel_outputs(1),
            vec![TunnelSet {
                tun_id: Some(0x99),
                tun_dst: Some(ip("172.31.0.9"))
            }]
        );
    }

    #[test]
    fn recirculation_adds_a_pass() {
        let t = parse(include_str!("fixtures/trace_ct_recirc.txt"));
        assert_eq!(t.datapath_actions.len(), 2);
        assert_eq!(t.final_datapath_actions(), "3");
        assert_eq!(t.output_ports(), vec![3]);
        assert_eq!(t.steps.last().map(|s| s.table), Some(5));
    }

    #[test]
    fn tunnel_push_through_underlay_bridge() {
        let t = parse(include_str!("fixtures/trace_tnl_push.txt"));
        assert_eq!(t.bridge, "br1");
        assert_eq!(t.output_ports(), vec![1]);
        assert_eq!(
            t.tunnel_outputs(1),
            vec![TunnelSet {
                tun_id: Some(6),
                tun_dst: Some(ip("172.31.0.2"))
            }]
        );
        // The underlay bridge's NORMAL is recorded against br-phy, not the traced bridge.
        assert_eq!(t.outputs_on("br-phy").count(), 1);
        assert!(t.final_datapath_actions().starts_with("tnl_push("));
        assert!(t.final_datapath_actions().contains("vni=0x6"));
    }

    #[test]
    fn move_into_a_tunnel_id_slice() {
        let t = parse(include_str!("fixtures/trace_move_tun_id_slice.txt"));
        assert_eq!(
            t.tunnel_outputs(1),
            vec![TunnelSet {
                tun_id: Some(0xa),
                tun_dst: Some(ip("192.168.50.13"))
            }]
        );
        assert_eq!(
            slice_note("NXM_NX_TUN_ID[8..15] is now 0x3", "NXM_NX_TUN_ID"),
            Some((8, 8, 3))
        );
        assert_eq!(
            slice_note("NXM_NX_TUN_ID[] is now 0x3", "NXM_NX_TUN_ID"),
            None
        );
        assert_eq!(
            slice_note("NXM_NX_TUN_ID[9..3] is now 0x3", "NXM_NX_TUN_ID"),
            None
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Trace::parse("").is_err());
        assert!(Trace::parse("Bad openflow flow syntax: x").is_err());
        assert!(Trace::parse("bridge(\"\nDatapath actions: ").is_err());
        let t = Trace::parse(
            "bridge(\"b\")\n 999999. x\noutput:\nset_field:->tun_id\nDatapath actions: drop",
        );
        assert!(t.is_ok());
    }
}
