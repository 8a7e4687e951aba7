//! Turning a FlowDiff into the ordered batch one bundle carries: groups that flows will
//! reference first, then flow deletes, adds and modifies, then the groups nothing references
//! any more.

use crate::switches::link::SwitchChange;
use ofproto::{FlowMod, GroupMod, GroupModCommand};
use topology::FlowDiff;

/// The batch for a diff. Modifies are sent as OFPFC_ADD of the whole flow: in OpenFlow 1.3 a
/// MODIFY does not change the cookie, and the cookie is part of what flowmesh wants installed.
pub fn plan(diff: FlowDiff) -> Vec<SwitchChange> {
    // The diff is consumed: its flows and groups move into the batch (no second copy of a
    // whole table while a switch is being programmed).
    let FlowDiff {
        adds,
        modifies,
        deletes,
        group_adds,
        group_modifies,
        group_deletes,
    } = diff;
    let mut out = Vec::with_capacity(
        adds.len()
            + modifies.len()
            + deletes.len()
            + group_adds.len()
            + group_modifies.len()
            + group_deletes.len(),
    );
    for group in group_adds {
        out.push(SwitchChange::Group(GroupMod {
            command: GroupModCommand::Add,
            group,
        }));
    }
    for group in group_modifies {
        out.push(SwitchChange::Group(GroupMod {
            command: GroupModCommand::Modify,
            group,
        }));
    }
    for f in deletes {
        out.push(SwitchChange::Flow(FlowMod::delete_strict(f)));
    }
    for f in adds.into_iter().chain(modifies) {
        out.push(SwitchChange::Flow(FlowMod::add(f)));
    }
    for g in group_deletes {
        // A delete names the group only, as `ovs-ofctl del-groups` sends it: Open vSwitch
        // refuses a GROUP_MOD delete that carries buckets (OFPGMFC_INVALID_GROUP).
        out.push(SwitchChange::Group(GroupMod {
            command: GroupModCommand::Delete,
            group: ofproto::Group {
                group_id: g.group_id,
                group_type: ofproto::GroupType::All,
                buckets: Vec::new(),
            },
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofproto::{Flow, FlowModCommand, Group, GroupType, Match};

    #[test]
    fn groups_before_flows_and_group_deletes_last() {
        let g = Group {
            group_id: 7,
            group_type: GroupType::Select,
            buckets: vec![ofproto::Bucket::new(vec![ofproto::Action::output(2)])],
        };
        let f = Flow::new(0, 100, Match::new().in_port(3));
        let d = FlowDiff {
            adds: vec![f.clone()],
            deletes: vec![f.clone()],
            group_adds: vec![g.clone()],
            group_deletes: vec![g.clone()],
            ..Default::default()
        };
        let p = plan(d.clone());
        assert!(matches!(
            &p[0],
            SwitchChange::Group(GroupMod {
                command: GroupModCommand::Add,
                ..
            })
        ));
        assert!(
            matches!(&p[1], SwitchChange::Flow(fm) if fm.command == FlowModCommand::DeleteStrict)
        );
        assert!(matches!(&p[2], SwitchChange::Flow(fm) if fm.command == FlowModCommand::Add));
        assert!(matches!(
            &p[3],
            SwitchChange::Group(GroupMod {
                command: GroupModCommand::Delete,
                group: Group { group_id: 7, group_type: GroupType::All, buckets },
            }) if buckets.is_empty()
        ));
    }
}
