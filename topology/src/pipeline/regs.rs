//! Register layout and fixed ports: the one place that says which register carries what.
//!
//! | register | meaning | written in |
//! |---|---|---|
//! | reg0 | source NETID | t0 (from tun_id, VXLAN in), t20/t25 (pod's NETID); 0 for host traffic |
//! | reg1 | destination NETID | t70 |
//! | reg2 | destination ofport | t70, read by t80 `output:reg2` |
//! | tun_id | NETID on the wire (low 32 bits copied from/to reg0) | t50/t90 |
//! | tun_dst | remote node IP | t50/t90 |
//!
//! Conntrack zones and marks:
//!
//! | zone | holds | committed in | looked up in |
//! |---|---|---|---|
//! | 0 (default) | networkpolicy connections | t30, t80 (networkpolicy) | t0 p1000 (networkpolicy) |
//! | [`CT_ZONE_SERVICE`] | connections the host's kube-proxy DNATed back into br0 (mark [`CT_MARK_HOST_DNAT`]); networkpolicy: pod → service IP (mark 0) | t0 p1200, t60 (networkpolicy) | t0 p1100 (packets to the local subnet) |

use ofproto::{Action, Field, FieldSlice};
use std::net::Ipv4Addr;

/// Register holding the source NETID.
pub const REG_SRC_NETID: u8 = 0;
/// Register holding the destination NETID.
pub const REG_DST_NETID: u8 = 1;
/// Register holding the destination ofport.
pub const REG_DST_PORT: u8 = 2;

/// ofport of `vxlan0`.
pub const OFPORT_VXLAN: u32 = 1;
/// ofport of `tun0`.
pub const OFPORT_TUN0: u32 = 2;

/// Conntrack zone of service connections: a connection the host's kube-proxy DNATed and
/// routed back into br0 through tun0 is committed here with [`CT_MARK_HOST_DNAT`], so that on
/// the node where it entered its replies are sent back to the host, which un-DNATs them.
/// Not the default zone: with the kernel datapath that zone is the host's own, where the
/// host's DNAT entry for the same connection lives.
pub const CT_ZONE_SERVICE: u16 = 1;
/// ct_mark of a connection that entered br0 from tun0 after the host's DNAT (zone
/// [`CT_ZONE_SERVICE`]).
pub const CT_MARK_HOST_DNAT: u32 = 0x1;

/// `set_field:V->reg0`.
pub fn set_src_netid(netid: u32) -> Action {
    Action::set_field_u64(Field::Reg(REG_SRC_NETID), netid as u64)
}
/// `set_field:V->reg1`.
pub fn set_dst_netid(netid: u32) -> Action {
    Action::set_field_u64(Field::Reg(REG_DST_NETID), netid as u64)
}
/// `set_field:P->reg2`.
pub fn set_dst_port(ofport: u32) -> Action {
    Action::set_field_u64(Field::Reg(REG_DST_PORT), ofport as u64)
}
/// `move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[]` (VXLAN in).
pub fn tun_id_to_src_netid() -> Action {
    Action::Move {
        src: FieldSlice::range(Field::TunnelId, 0, 32),
        dst: FieldSlice::whole(Field::Reg(REG_SRC_NETID)),
    }
}
/// `move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]` (VXLAN out).
pub fn src_netid_to_tun_id() -> Action {
    Action::Move {
        src: FieldSlice::whole(Field::Reg(REG_SRC_NETID)),
        dst: FieldSlice::range(Field::TunnelId, 0, 32),
    }
}
/// `set_field:IP->tun_dst`.
pub fn set_tun_dst(ip: Ipv4Addr) -> Action {
    Action::set_field(Field::TunIpv4Dst, &ip.octets())
}
/// `output:NXM_NX_REG2[]`.
pub fn output_dst_port() -> Action {
    Action::OutputReg {
        src: FieldSlice::whole(Field::Reg(REG_DST_PORT)),
        max_len: 0,
    }
}
/// `ct(commit)`: commit the connection in the default zone and go on with the next action.
pub fn ct_commit() -> Action {
    Action::Ct(ofproto::action::Ct {
        flags: ofproto::action::ct_flags::COMMIT,
        zone_src: None,
        zone_imm: 0,
        recirc_table: None,
        alg: 0,
        actions: Vec::new(),
    })
}
/// `ct(table=T)`: send the packet through conntrack and continue in table `t` with ct_state.
pub fn ct_recirc(t: u8) -> Action {
    Action::Ct(ofproto::action::Ct {
        flags: 0,
        zone_src: None,
        zone_imm: 0,
        recirc_table: Some(t),
        alg: 0,
        actions: Vec::new(),
    })
}
/// `ct(commit,zone=Z,exec(set_field:0x1->ct_mark),table=T)`: commit a connection that came
/// back from the host's DNAT in the service zone, marked, and continue tracked in table `t`.
pub fn ct_commit_host_dnat(t: u8) -> Action {
    Action::Ct(ofproto::action::Ct {
        flags: ofproto::action::ct_flags::COMMIT,
        zone_src: None,
        zone_imm: CT_ZONE_SERVICE,
        recirc_table: Some(t),
        alg: 0,
        actions: vec![Action::set_field_u64(
            Field::CtMark,
            u64::from(CT_MARK_HOST_DNAT),
        )],
    })
}
/// `ct(zone=Z,table=T)`: look the packet up in the service zone, continue in table `t`.
pub fn ct_service_lookup(t: u8) -> Action {
    Action::Ct(ofproto::action::Ct {
        flags: 0,
        zone_src: None,
        zone_imm: CT_ZONE_SERVICE,
        recirc_table: Some(t),
        alg: 0,
        actions: Vec::new(),
    })
}
/// `ct(commit,zone=Z)`: commit a pod → service IP connection in the service zone (unmarked)
/// and go on untracked.
pub fn ct_commit_service() -> Action {
    Action::Ct(ofproto::action::Ct {
        flags: ofproto::action::ct_flags::COMMIT,
        zone_src: None,
        zone_imm: CT_ZONE_SERVICE,
        recirc_table: None,
        alg: 0,
        actions: Vec::new(),
    })
}
/// The actions that send a packet to a remote node over VXLAN with tun_id = reg0.
pub fn to_tunnel(node_ip: Ipv4Addr) -> Vec<Action> {
    vec![
        src_netid_to_tun_id(),
        set_tun_dst(node_ip),
        Action::output(OFPORT_VXLAN),
    ]
}
