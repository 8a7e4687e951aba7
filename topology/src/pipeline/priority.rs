//! Named priority bands. Values follow OpenShift SDN so dumps read the same.

/// A priority band.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Band {
    /// The table's default (drop, goto or output).
    Default = 0,
    /// Multicast from local pods (t31).
    MulticastLocal = 25,
    /// Multicast arriving over VXLAN (t31).
    MulticastTunnel = 50,
    /// One flow per object: pod, remote node, NETID.
    PerObject = 100,
    /// Catch-all drop for a fixed port (t0 vxlan0 / tun0 leftovers).
    PortGuard = 150,
    /// General rules: VXLAN in, tun0 in, local subnet routing, global NETID, services.
    General = 200,
    /// Multicast from the host is dropped (t0).
    MulticastBlock = 250,
    /// Overrides: service return, gateway, host-to-pod, VXLAN injection drop.
    Override = 300,
    /// Traffic from the host's own gateway address (t0).
    HostSource = 400,
    /// Policy bypass (t27 in subnet and multitenant modes).
    Bypass = 500,
    /// Send untracked IP through conntrack (t0, networkpolicy mode).
    Conntrack = 1000,
    /// Connections the host's DNAT sent back through tun0: commit them in the service zone
    /// (t0).
    ServiceCommit = 1200,
    /// Packets to the local subnet: look them up in the service zone first (t0).
    ServiceConntrack = 1100,
    /// Networkpolicy: packets the service zone tracked in the original direction go on to
    /// the default zone's lookup; replies keep the service zone's state (t0).
    ServiceZoneHandoff = 1050,
    /// Replies of connections the host DNATed go back to the host (t31).
    ServiceReply = 270,
    /// Established and related connections pass (t27, t80, networkpolicy mode).
    Established = 260,
    /// Policy conjunctions: clause flows and `conj_id` flows (t27, t80).
    PolicyConjunction = 220,
    /// Policy rules with one dimension left: plain allow flows (t27, t80).
    PolicyDirect = 210,
    /// A pod a policy selects is isolated: drop what no rule allowed (t27, t80).
    PolicyIsolate = 180,
    /// Pods no policy isolates: allow (t27, t80, networkpolicy mode).
    PolicyOpen = 90,
    /// Audit logging: a `conj_id` verdict flow's logging twin for new connections (t27, t80).
    AuditConjunction = 221,
    /// Audit logging: a plain allow flow's logging twin for new connections (t27, t80).
    AuditDirect = 211,
    /// Audit logging: an isolated pod's drop, logged for new connections (t27, t80).
    AuditIsolate = 181,
    /// Audit logging: t100 an egress firewall rule flow's logging twin for new connections,
    /// at this value plus the prefix length (140..=172: above every rule flow).
    AuditFirewall = 140,
    /// Egress IPs: a packet tunnelled to a node that hosts none of its NETID's IPs is
    /// dropped, neither relayed nor sent out with the node's address (t101).
    EgressNoRelay = 190,
}

impl Band {
    /// The numeric priority.
    pub fn value(self) -> u16 {
        self as u16
    }
}
