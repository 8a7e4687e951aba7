//! A flow as one line of `ovs-ofctl -O OpenFlow13 dump-flows --no-stats`
//! (`ofputil_flow_stats_format` with statistics off).
//!
//! The canonical form, as Open vSwitch 3.1 prints it:
//! ```text
//! [cookie=0x<hex>, ][table=<n>, ][idle_timeout=<n>, ][hard_timeout=<n>, ][<flag> ...]
//! [priority=<n>,]<match> actions=<instructions>
//! ```
//! * `cookie=` only when the cookie is not 0; `table=` only when the table is not 0;
//!   `idle_timeout=`/`hard_timeout=` only when not 0 (permanent).
//! * Flags are space-separated words, each followed by a space: `send_flow_rem`,
//!   `check_overlap`, `reset_counts`, `no_packet_counts`, `no_byte_counts`.
//! * `priority=` is printed (first inside the match) only when not 32768 (the default); the
//!   match follows with no separator other than `,`, and a space separates it from `actions=`
//!   unless both priority and match are empty.
//! * `ovs-ofctl` indents every line by one space; that indent is not part of this text.

use super::matches::format_match;
use crate::flow::Flow;
use std::fmt::Write;

/// Flow-mod flag names in OVS's print order (`ofputil_flow_mod_flags_format`).
const FLAG_NAMES: [(u16, &str); 5] = [
    (1 << 0, "send_flow_rem"),
    (1 << 1, "check_overlap"),
    (1 << 2, "reset_counts"),
    (1 << 3, "no_packet_counts"),
    (1 << 4, "no_byte_counts"),
];

/// The dump-flows line of a flow (see the module doc for the exact form).
pub fn format_flow(f: &Flow) -> String {
    let mut s = String::new();
    if f.cookie != 0 {
        let _ = write!(s, "cookie={:#x}, ", f.cookie);
    }
    if f.table != 0 {
        let _ = write!(s, "table={}, ", f.table);
    }
    if f.idle_timeout != 0 {
        let _ = write!(s, "idle_timeout={}, ", f.idle_timeout);
    }
    if f.hard_timeout != 0 {
        let _ = write!(s, "hard_timeout={}, ", f.hard_timeout);
    }
    let mut rest = f.flags;
    for (bit, name) in FLAG_NAMES {
        if f.flags & bit != 0 {
            s.push_str(name);
            s.push(' ');
            rest &= !bit;
        }
    }
    if rest != 0 {
        let _ = write!(s, "{rest:#x} ");
    }
    let m = format_match(&f.matches, Some(f.priority));
    if !m.is_empty() {
        s.push_str(&m);
        s.push(' ');
    }
    s.push_str("actions=");
    s.push_str(&super::instructions::format_instructions(&f.instructions));
    s
}

impl std::fmt::Display for Flow {
    /// The flow as one line of `ovs-ofctl -O OpenFlow13 dump-flows --no-stats`, without the
    /// leading space ovs-ofctl indents it by: `cookie=0x5, table=20, priority=100,ip,nw_src=...
    /// actions=...`. `cookie=`, `table=`, the timeouts and `priority=` are left out at their
    /// defaults (0, 0, 0 and 32768) exactly as Open vSwitch 3.1 does (see the module doc).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_flow(self))
    }
}
