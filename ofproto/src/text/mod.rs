//! Open vSwitch's text syntax for matches, actions, instructions and flows, exactly as
//! `ovs-ofctl` 3.1 prints them (checked by the oracle tests in `tests/oracle_flow.rs`).
//!
//! Only formatting lives here; the wire codecs are in [`crate::oxm`], [`crate::action`] and
//! [`crate::instruction`].

pub mod actions;
pub mod fields;
pub mod flow;
pub mod instructions;
pub mod matches;

use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

/// `ds_put_hex`: big-endian bytes as `0x` + hex without leading zeros, `0` for all zeros.
pub fn put_hex(s: &mut String, bytes: &[u8]) {
    let mut printed = false;
    for &b in bytes {
        if printed {
            let _ = write!(s, "{b:02x}");
        } else if b != 0 {
            let _ = write!(s, "0x{b:x}");
            printed = true;
        }
    }
    if !printed {
        s.push('0');
    }
}

/// `%#x` of an integer: `0x..`, but plain `0` for zero (C's printf rule).
pub fn hash_x(v: u128) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

/// Bytes as dot-separated hex pairs (`format_hex_arg`: `01.02.0a`).
pub fn hex_dotted(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// An Ethernet address `xx:xx:xx:xx:xx:xx` from 6 bytes (shorter input is zero-padded).
pub fn eth(bytes: &[u8]) -> String {
    let mut b = [0u8; 6];
    for (d, s) in b.iter_mut().zip(bytes) {
        *d = *s;
    }
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5]
    )
}

/// `eth_format_masked`: `MAC` or `MAC/MASK` unless the mask is all ones.
pub fn eth_masked(value: &[u8], mask: &[u8]) -> String {
    if mask.iter().all(|&m| m == 0xff) {
        eth(value)
    } else {
        format!("{}/{}", eth(value), eth(mask))
    }
}

/// `ip_format_masked`: `A.B.C.D`, `A.B.C.D/N` for a CIDR mask, else `A.B.C.D/M.M.M.M`.
pub fn ipv4_masked(value: u32, mask: u32) -> String {
    let a = Ipv4Addr::from(value);
    if mask == u32::MAX {
        a.to_string()
    } else if mask.leading_ones() + mask.trailing_zeros() == 32 {
        format!("{a}/{}", mask.leading_ones())
    } else {
        format!("{a}/{}", Ipv4Addr::from(mask))
    }
}

/// An IPv6 address as glibc's `inet_ntop` writes it (RFC 5952, plus the embedded-IPv4 form for
/// IPv4-compatible and IPv4-mapped addresses).
pub fn ipv6(a: Ipv6Addr) -> String {
    let seg = a.segments();
    let o = a.octets();
    if seg[..5] == [0; 5] && (seg[5] == 0xffff || (seg[5] == 0 && seg[6] != 0)) {
        let prefix = if seg[5] == 0xffff { "::ffff:" } else { "::" };
        return format!("{prefix}{}.{}.{}.{}", o[12], o[13], o[14], o[15]);
    }
    a.to_string()
}

/// `ipv6_format_masked`: address, `/N` for a CIDR mask, else `/MASK`.
pub fn ipv6_masked(value: u128, mask: u128) -> String {
    let a = ipv6(Ipv6Addr::from(value));
    if mask == u128::MAX {
        a
    } else if mask.leading_ones() + mask.trailing_zeros() == 128 {
        format!("{a}/{}", mask.leading_ones())
    } else {
        format!("{a}/{}", ipv6(Ipv6Addr::from(mask)))
    }
}

/// `ofputil_format_port` for a 16-bit OpenFlow 1.0-style port number.
pub fn port16(port: u16) -> String {
    match port {
        0xfff7 => "UNSET".into(),
        0xfff8 => "IN_PORT".into(),
        0xfff9 => "TABLE".into(),
        0xfffa => "NORMAL".into(),
        0xfffb => "FLOOD".into(),
        0xfffc => "ALL".into(),
        0xfffd => "CONTROLLER".into(),
        0xfffe => "LOCAL".into(),
        0xffff => "ANY".into(),
        p => p.to_string(),
    }
}

/// An OpenFlow 1.1+ 32-bit port as OVS prints it: mapped onto the 16-bit space (reserved ports
/// by name); a number OVS cannot map is printed in decimal.
pub fn port32(port: u32) -> String {
    if port < 0xff00 {
        port.to_string()
    } else if port >= 0xffff_ff00 {
        port16((port - 0xffff_0000) as u16)
    } else {
        port.to_string()
    }
}

/// Big-endian bytes as an integer (up to 16 bytes).
pub fn be_u128(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |acc, &x| (acc << 8) | x as u128)
}

/// `format_flags`: set bits by name joined by `del`, unnamed bits as one `0x..`, `0` if none.
pub fn flags(names: fn(u32) -> Option<&'static str>, value: u32, del: char) -> String {
    if value == 0 {
        return "0".into();
    }
    let mut s = String::new();
    let mut bad = 0u32;
    let mut v = value;
    while v != 0 {
        let bit = v & v.wrapping_neg();
        match names(bit) {
            Some(n) => {
                s.push_str(n);
                s.push(del);
            }
            None => bad |= bit,
        }
        v &= !bit;
    }
    if bad != 0 {
        let _ = write!(s, "{bad:#x}{del}");
    }
    s.pop();
    s
}

/// `format_flags_masked`: `+a-b` for the masked bits (plain flags when the mask is `max`).
pub fn flags_masked(
    names: fn(u32) -> Option<&'static str>,
    value: u32,
    mask: u32,
    max: u32,
) -> String {
    if mask == max {
        return flags(names, value, '|');
    }
    if mask == 0 {
        return "0/0".into();
    }
    let mut s = String::new();
    let mut m = mask;
    while m != 0 {
        let bit = m & m.wrapping_neg();
        s.push(if value & bit != 0 { '+' } else { '-' });
        s.push_str(names(bit).unwrap_or("[Unknown]"));
        m &= !bit;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_helpers_follow_c_printf() {
        let mut s = String::new();
        put_hex(&mut s, &[0, 0, 1, 2]);
        assert_eq!(s, "0x102");
        let mut z = String::new();
        put_hex(&mut z, &[0, 0]);
        assert_eq!(z, "0");
        assert_eq!(hash_x(0), "0");
        assert_eq!(hash_x(0x64), "0x64");
    }

    #[test]
    fn ip_masks() {
        assert_eq!(ipv4_masked(0x0a000000, 0xff000000), "10.0.0.0/8");
        assert_eq!(ipv4_masked(0x0a000001, u32::MAX), "10.0.0.1");
        assert_eq!(ipv4_masked(0x0a000001, 0xff00ff00), "10.0.0.1/255.0.255.0");
        assert_eq!(ipv6(Ipv6Addr::from(0x0102_0304u128)), "::1.2.3.4");
        assert_eq!(ipv6(Ipv6Addr::from(1u128)), "::1");
    }
}
