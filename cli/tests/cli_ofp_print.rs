//! `flowmeshctl ofp-print` decodes like `ovs-ofctl ofp-print` and fails clearly on garbage.

use ofproto::message::Message;
use ofproto::{Action, Flow, FlowMod, Match};
use std::net::Ipv4Addr;
use std::process::Command;

fn ctl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flowmeshctl"))
        .args(args)
        .output()
        .expect("run flowmeshctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ovs(hex: &str) -> String {
    let out = Command::new("ovs-ofctl")
        .args(["ofp-print", hex])
        .output()
        .expect("ovs-ofctl must be installed (scripts/deps.sh)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn ofp_print_matches_ovs_for_a_flow_mod_and_a_barrier() {
    let flow = Flow::new(
        20,
        100,
        Match::new()
            .eth_type(0x0800)
            .reg(1, 0x64)
            .ipv4_dst(Ipv4Addr::new(10, 244, 0, 2), 32),
    )
    .cookie(0x3000)
    .apply(vec![Action::DecNwTtl, Action::output(2)]);
    for (msg, xid) in [
        (Message::FlowMod(FlowMod::add(flow)), 7u32),
        (Message::BarrierRequest, 9),
    ] {
        let h = hex(&msg.encode(xid));
        let (code, out, err) = ctl(&["ofp-print", &h]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim_end(), ovs(&h).trim_end());
    }
}

#[test]
fn ofp_print_of_garbage_is_a_clear_error() {
    let (code, out, err) = ctl(&["ofp-print", "04 0e 00 50 00"]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("cannot decode"), "{err}");
    let (code, _, err) = ctl(&["ofp-print", "xyz"]);
    assert_ne!(code, 0);
    assert!(err.contains("hex"), "{err}");
}
