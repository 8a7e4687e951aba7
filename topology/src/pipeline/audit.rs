//! Audit logging of NetworkPolicy verdicts (namespaces with `k8s.ovn.org/acl-logging`): the
//! node's logging flows send the first packet of every new connection a policy of such a
//! namespace allows or denies to the node's own shim, through one OpenFlow meter per bridge.
//!
//! * A logging flow is its verdict flow with `ct_state=+new+trk` added, one priority above it,
//!   and a `controller(id=AUDIT_CONTROLLER_ID,userdata=..,meter_id=AUDIT_METER_ID)` action
//!   before the verdict's own actions: packets of established connections and replies never
//!   match it, an invalid packet (`+inv`) falls through to the verdict flow unlogged, and the
//!   verdict is the same either way. Only the shim's second OpenFlow connection has the
//!   controller id, so the central controller never receives audit packets.
//! * The meter (packets per second, a drop band at `rateLimit` with a burst of `rateLimit`)
//!   sits inside the controller action: it limits the copies to the shim, never the traffic.
//! * The userdata says everything the shim writes that the packet does not: see
//!   [`AuditTag`].

use crate::model::audit::Severity;
use ofproto::meter::meter_flags;
use ofproto::{Action, Meter, MeterBand};

/// The meter of the logging flows on every bridge.
pub const AUDIT_METER_ID: u32 = 1;
/// The OpenFlow controller id of the node shim's audit connection.
pub const AUDIT_CONTROLLER_ID: u16 = 0xa0d1;
/// Bytes of each logged packet sent to the shim: the headers (Ethernet, IPv4 with options,
/// the first 8 bytes of TCP/UDP/ICMP).
pub const AUDIT_MAX_LEN: u16 = 128;
/// First word of the userdata, naming its format.
pub const USERDATA_MAGIC: &str = "flowmesh-audit/1";

/// What was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// A policy allowed the connection.
    Allow,
    /// The connection was denied (the pod is isolated and no rule allowed it).
    Drop,
}

impl Verdict {
    /// `allow` / `drop` (OVN-Kubernetes' words).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Drop => "drop",
        }
    }
}

/// What a logging flow tells the shim, carried as its controller action's userdata: UTF-8
/// text `flowmesh-audit/1 VERDICT DIRECTION SEVERITY REFERENCE`, e.g.
/// `flowmesh-audit/1 allow ingress notice NP:shop:web`. The reference is `NP:NS:POLICY` for an
/// allow, `NP:NS:Ingress` / `NP:NS:Egress` for the default deny of an isolated pod (as
/// OVN-Kubernetes names them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AuditTag {
    /// The verdict.
    pub verdict: Verdict,
    /// `ingress` or `egress`.
    pub direction: &'static str,
    /// The namespace's severity for this verdict.
    pub severity: Severity,
    /// What decided.
    pub reference: String,
}

impl AuditTag {
    /// The userdata bytes.
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "{USERDATA_MAGIC} {} {} {} {}",
            self.verdict.as_str(),
            self.direction,
            self.severity.as_str(),
            self.reference
        )
        .into_bytes()
    }

    /// Read userdata back (None: not this format).
    pub fn decode(b: &[u8]) -> Option<AuditTag> {
        let s = std::str::from_utf8(b).ok()?;
        let mut it = s.splitn(5, ' ');
        if it.next()? != USERDATA_MAGIC {
            return None;
        }
        let verdict = match it.next()? {
            "allow" => Verdict::Allow,
            "drop" => Verdict::Drop,
            _ => return None,
        };
        let direction = match it.next()? {
            "ingress" => "ingress",
            "egress" => "egress",
            _ => return None,
        };
        let severity = Severity::parse(it.next()?)?;
        let reference = it.next()?.to_string();
        Some(AuditTag {
            verdict,
            direction,
            severity,
            reference,
        })
    }

    /// The logging action: a metered copy of the packet's headers to the shim.
    pub fn action(&self) -> Action {
        Action::Controller {
            max_len: AUDIT_MAX_LEN,
            controller_id: AUDIT_CONTROLLER_ID,
            reason: 1, // OFPR_ACTION
            userdata: self.encode(),
            pause: false,
            meter_id: Some(AUDIT_METER_ID),
            extended: false,
        }
    }
}

/// The bridge's audit meter: `rate` packets per second with a burst of `rate`, dropping the
/// rest (of the copies to the shim only).
pub fn audit_meter(rate: u32) -> Meter {
    Meter {
        meter_id: AUDIT_METER_ID,
        flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
        bands: vec![MeterBand::drop(rate, rate)],
    }
}

/// The cookie of a logging flow: its verdict flow's cookie with the Audit feature.
pub fn audit_cookie(verdict_cookie: u64) -> u64 {
    (verdict_cookie & !super::cookie::FEATURE_MASK) | ((super::cookie::Feature::Audit as u64) << 56)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userdata_round_trips_and_reads_as_text() {
        let t = AuditTag {
            verdict: Verdict::Allow,
            direction: "ingress",
            severity: Severity::Notice,
            reference: "NP:shop:web".into(),
        };
        assert_eq!(
            String::from_utf8(t.encode()).expect("text"),
            "flowmesh-audit/1 allow ingress notice NP:shop:web"
        );
        assert_eq!(AuditTag::decode(&t.encode()), Some(t));
        for bad in [
            &b"flowmesh-audit/2 allow ingress notice NP:a:b"[..],
            b"flowmesh-audit/1 permit ingress notice NP:a:b",
            b"flowmesh-audit/1 allow sideways notice NP:a:b",
            b"flowmesh-audit/1 allow ingress loud NP:a:b",
            b"flowmesh-audit/1 allow ingress notice",
            b"\xff\xfe",
        ] {
            assert_eq!(AuditTag::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cookie_keeps_the_object_and_names_the_feature() {
        let c = audit_cookie(0x0505_0000_1234_5678);
        assert_eq!(c, 0x0905_0000_1234_5678);
    }
}
