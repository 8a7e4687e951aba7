//! Turning a FlowDiff into the ordered batch one bundle carries: meters and groups that flows
//! will reference first, then flow deletes, adds and modifies, then the groups and meters
//! nothing references any more.

use crate::switches::link::SwitchChange;
use ofproto::{FlowMod, GroupMod, GroupModCommand, MeterMod};
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
        meter_adds,
        meter_modifies,
        meter_deletes,
    } = diff;
    let mut out = Vec::with_capacity(
        adds.len()
            + modifies.len()
            + deletes.len()
            + group_adds.len()
            + group_modifies.len()
            + group_deletes.len()
            + meter_adds.len()
            + meter_modifies.len()
            + meter_deletes.len(),
    );
    out.extend(
        meter_adds
            .into_iter()
            .map(|m| SwitchChange::Meter(MeterMod::add(m))),
    );
    out.extend(
        meter_modifies
            .into_iter()
            .map(|m| SwitchChange::Meter(MeterMod::modify(m))),
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
    // A delete names the meter only, as `ovs-ofctl del-meter` sends it.
    out.extend(
        meter_deletes
            .into_iter()
            .map(|m| SwitchChange::Meter(MeterMod::delete(m.meter_id))),
    );
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

    #[test]
    fn meters_come_first_and_their_deletes_last() {
        use ofproto::{Meter, MeterBand, MeterModCommand};
        let m = |id| Meter {
            meter_id: id,
            flags: 6,
            bands: vec![MeterBand::drop(20, 20)],
        };
        let f = Flow::new(80, 181, Match::new().in_port(3));
        let d = FlowDiff {
            adds: vec![f],
            meter_adds: vec![m(1)],
            meter_modifies: vec![m(2)],
            meter_deletes: vec![m(3)],
            ..Default::default()
        };
        let p = plan(d);
        let kinds: Vec<String> = p
            .iter()
            .map(|c| match c {
                SwitchChange::Meter(mm) => format!("{:?}{}", mm.command, mm.meter.meter_id),
                SwitchChange::Flow(_) => "flow".into(),
                SwitchChange::Group(_) => "group".into(),
            })
            .collect();
        assert_eq!(kinds, ["Add1", "Modify2", "flow", "Delete3"]);
        assert!(matches!(&p[3], SwitchChange::Meter(mm)
            if mm.command == MeterModCommand::Delete && mm.meter.bands.is_empty()));
    }
}
