//! Turning a FlowDiff into the ordered batch one bundle carries: groups that flows will
//! reference first, then flow deletes, adds and modifies, then the groups nothing references
//! any more.

use crate::link::SwitchChange;
use ofproto::{FlowMod, GroupMod, GroupModCommand};
use topology::FlowDiff;

/// The batch for a diff. Modifies are sent as OFPFC_ADD of the whole flow: in OpenFlow 1.3 a
/// MODIFY does not change the cookie, and the cookie is part of what flowmesh wants installed.
pub fn plan(diff: &FlowDiff) -> Vec<SwitchChange> {
    let mut out = Vec::with_capacity(diff.len());
    for g in &diff.group_adds {
        out.push(SwitchChange::Group(GroupMod {
            command: GroupModCommand::Add,
            group: g.clone(),
        }));
    }
    for g in &diff.group_modifies {
        out.push(SwitchChange::Group(GroupMod {
            command: GroupModCommand::Modify,
            group: g.clone(),
        }));
    }
    for f in &diff.deletes {
        out.push(SwitchChange::Flow(FlowMod::delete_strict(f.clone())));
    }
    for f in diff.adds.iter().chain(&diff.modifies) {
        out.push(SwitchChange::Flow(FlowMod::add(f.clone())));
    }
    for g in &diff.group_deletes {
        // OpenFlow 1.3.5 (and OVS) refuse a DELETE that carries buckets: send only the id.
        out.push(SwitchChange::Group(GroupMod {
            command: GroupModCommand::Delete,
            group: ofproto::Group {
                buckets: Vec::new(),
                ..g.clone()
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
            buckets: vec![ofproto::Bucket::new(vec![ofproto::Action::output(3)])],
        };
        let f = Flow::new(0, 100, Match::new().in_port(3));
        let d = FlowDiff {
            adds: vec![f.clone()],
            deletes: vec![f.clone()],
            group_adds: vec![g.clone()],
            group_deletes: vec![g.clone()],
            ..Default::default()
        };
        let p = plan(&d);
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
                group,
            }) if group.group_id == 7 && group.buckets.is_empty()
        ));
    }
}
