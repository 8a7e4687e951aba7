//! The overlay flow mix the benchmarks and session tests push: per pod `i`, one of
//!
//! * table 0: `in_port + dl_src -> set reg0, goto_table:10` (pod classifier);
//! * table 10: `ip,nw_dst -> set tun_id, set tun_dst, output:1` (remote pod via VXLAN);
//! * table 20: `ip,reg1,nw_dst -> move tun_id->reg2, set eth_src, dec_ttl, output` (local
//!   delivery).
//!
//! The same shapes as the lab's gen-flows.py, as [`Flow`] values; [`Flow`]'s `Display` gives
//! the `ovs-ofctl` text of the same flows.

use std::net::Ipv4Addr;

use ofproto::oxm::eth_type;
use ofproto::{Action, Field, FieldSlice, Flow, Match};

/// Pod IP of flow `i`: 10.(244 + a/250).(a%250).(b+2) with (a, b) = divmod(i, 250).
fn pod_ip(i: u32) -> Ipv4Addr {
    let (a, b) = (i / 250, i % 250);
    Ipv4Addr::new(
        10,
        u8::try_from(244 + a / 250).unwrap_or(u8::MAX),
        u8::try_from(a % 250).unwrap_or(u8::MAX),
        u8::try_from(b + 2).unwrap_or(u8::MAX),
    )
}

/// Flow `i` of the mix.
pub fn overlay_flow(i: u32) -> Flow {
    let ip = pod_ip(i);
    let vni = 100 + u64::from(i % 7);
    let byte = |shift: u32| u8::try_from((i >> shift) & 0xff).unwrap_or(0);
    match i % 3 {
        0 => Flow::new(
            0,
            100,
            Match::new().in_port(2 + i % 60).eth_src([
                0x0a,
                0x58,
                byte(16),
                byte(8),
                byte(0),
                0x02,
            ]),
        )
        .apply(vec![Action::set_field_u64(
            Field::Reg(0),
            u64::from(i & 0xffff),
        )])
        .goto(10),
        1 => Flow::new(
            10,
            100,
            Match::new().eth_type(eth_type::IPV4).ipv4_dst(ip, 32),
        )
        .apply(vec![
            Action::set_field_u64(Field::TunnelId, vni),
            Action::set_field(
                Field::TunIpv4Dst,
                &Ipv4Addr::new(172, 31, byte(8), byte(0)).octets(),
            ),
            Action::output(1),
        ]),
        _ => Flow::new(
            20,
            100,
            Match::new()
                .eth_type(eth_type::IPV4)
                .reg(1, u32::try_from(vni).unwrap_or(0))
                .ipv4_dst(ip, 32),
        )
        .apply(vec![
            Action::move_(
                FieldSlice::range(Field::TunnelId, 0, 32),
                FieldSlice::whole(Field::Reg(2)),
            ),
            Action::set_field(Field::EthSrc, &[0x0a, 0x58, 0, 0, 0, 1]),
            Action::DecNwTtl,
            Action::output(2 + i % 60),
        ]),
    }
}

/// The first `n` flows of the mix.
pub fn overlay_flows(n: u32) -> Vec<Flow> {
    (0..n).map(overlay_flow).collect()
}

/// The flows as `ovs-ofctl add-flows` text, one per line.
pub fn ofctl_text(flows: &[Flow]) -> String {
    let mut s = String::with_capacity(flows.len() * 160);
    for f in flows {
        s.push_str(&f.to_string());
        s.push('\n');
    }
    s
}

/// A flow normalized for comparison with what a switch returns: match fields in canonical
/// order.
pub fn normalized(f: &Flow) -> Flow {
    Flow {
        matches: f.matches.normalized(),
        ..f.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_are_distinct_and_print_like_gen_flows() {
        let flows = overlay_flows(3000);
        let set: std::collections::BTreeSet<_> = flows.iter().map(normalized).collect();
        assert_eq!(set.len(), 3000);
        let text = ofctl_text(&flows[..3]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("in_port=2") && lines[0].contains("goto_table:10"));
        assert!(lines[1].contains("table=10") && lines[1].contains("nw_dst=10.244.0.3"));
        assert!(lines[2].contains("table=20") && lines[2].contains("dec_ttl"));
    }
}
