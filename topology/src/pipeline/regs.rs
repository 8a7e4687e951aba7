//! Register layout and fixed ports: the one place that says which register carries what.
//!
//! | register | meaning | written in |
//! |---|---|---|
//! | reg0 | source NETID | t0 (from tun_id, VXLAN in), t20/t25 (pod's NETID); 0 for host traffic |
//! | reg1 | destination NETID | t70 |
//! | reg2 | destination ofport | t70, read by t80 `output:reg2` |
//! | tun_id | NETID on the wire (low 32 bits copied from/to reg0) | t50/t90 |
//! | tun_dst | remote node IP | t50/t90 |

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
/// The actions that send a packet to a remote node over VXLAN with tun_id = reg0.
pub fn to_tunnel(node_ip: Ipv4Addr) -> Vec<Action> {
    vec![
        src_netid_to_tun_id(),
        set_tun_dst(node_ip),
        Action::output(OFPORT_VXLAN),
    ]
}
