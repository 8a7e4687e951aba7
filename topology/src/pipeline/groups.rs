//! OpenFlow group ids: one id space, split by purpose so that the features owning groups
//! (egress IPs, multicast) never collide. A NETID is 24 bits; the top byte names the purpose.
//!
//! | group_id            | purpose                                                    |
//! |---------------------|------------------------------------------------------------|
//! | `NETID`             | egress IPs: select group, one bucket per usable egress node (as OpenShift SDN) |
//! | `0x01000000 + NETID`| multicast: local delivery to the NETID's pods on this node (`all`) |
//! | `0x02000000 + NETID`| multicast: VXLAN head-end replication to the other nodes with pods of the NETID (`all`) |

/// The NETID mask (24 bits).
const NETID_MASK: u32 = 0x00ff_ffff;

/// What a group id is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupPurpose {
    /// Egress-IP select group of a NETID.
    EgressIp,
    /// Multicast local delivery of a NETID.
    MulticastLocal,
    /// Multicast VXLAN replication of a NETID.
    MulticastRemote,
}

impl GroupPurpose {
    fn tag(self) -> u32 {
        match self {
            GroupPurpose::EgressIp => 0,
            GroupPurpose::MulticastLocal => 1,
            GroupPurpose::MulticastRemote => 2,
        }
    }
}

/// The group id for a purpose and NETID.
pub fn group_id(purpose: GroupPurpose, netid: u32) -> u32 {
    (purpose.tag() << 24) | (netid & NETID_MASK)
}

/// The purpose and NETID a group id stands for, if it is one of ours.
pub fn parse_group_id(id: u32) -> Option<(GroupPurpose, u32)> {
    let purpose = match id >> 24 {
        0 => GroupPurpose::EgressIp,
        1 => GroupPurpose::MulticastLocal,
        2 => GroupPurpose::MulticastRemote,
        _ => return None,
    };
    Some((purpose, id & NETID_MASK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_never_collide() {
        let all = [
            GroupPurpose::EgressIp,
            GroupPurpose::MulticastLocal,
            GroupPurpose::MulticastRemote,
        ];
        let mut seen = std::collections::BTreeSet::new();
        for p in all {
            for netid in [0, 1, 0x1234, NETID_MASK] {
                let id = group_id(p, netid);
                assert!(seen.insert(id), "{id:#x} twice");
                assert_eq!(parse_group_id(id), Some((p, netid)));
            }
        }
        assert_eq!(parse_group_id(0x0300_0000), None);
        assert_eq!(group_id(GroupPurpose::EgressIp, 42), 42);
    }
}
