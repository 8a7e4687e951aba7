//! Bounded fuzz pass over `decode_message` in the normal test suite: 120,000 inputs made by
//! mutating the captured Open vSwitch messages (bit flips, byte changes, truncations, length
//! field corruption, splices) plus purely random ones. Nothing may panic, and every input that
//! decodes must re-encode to bytes that decode to the same value (and encode identically).

#[path = "oracle_msg_common.rs"]
mod common;

use ofproto::{decode_frame, Message};

/// Deterministic xorshift64* generator (reproducible failures, no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for name in common::capture_names() {
        for m in common::capture(&name) {
            // Keep large messages to their first 2 KiB so each iteration stays cheap; the
            // length field is fixed up by some mutations and left wrong by others.
            let mut m = m;
            m.truncate(2048);
            let n = m.len() as u16;
            m[2..4].copy_from_slice(&n.to_be_bytes());
            seeds.push(m);
        }
    }
    seeds.extend(action_flow_seeds());
    // Hand-built messages for types OVS never sent us.
    use ofproto::message::*;
    for m in [
        Message::BundleAdd(BundleAdd::new(1, 3, Message::BarrierRequest)),
        Message::BundleControl(BundleControl::new(1, BundleCtrlType::OpenRequest, 3)),
        Message::SetAsync(AsyncConfig {
            packet_in_mask: [1, 2],
            port_status_mask: [3, 4],
            flow_removed_mask: [5, 6],
        }),
        Message::TableMod(TableMod {
            table_id: 1,
            config: 2,
        }),
        Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Group(2))),
        Message::Hello(Hello::of13()),
    ] {
        seeds.push(m.encode(9));
    }
    // Flow- and group-bearing messages built by flowmesh (FLOW_MOD, GROUP_MOD of each type,
    // bundle add and error embedding them).
    use ofproto::action::{Action, FieldSlice};
    use ofproto::oxm::{Field, Match};
    use ofproto::{Bucket, Flow, FlowMod, Group, GroupMod, GroupModCommand, GroupType};
    let flow = Flow::new(
        20,
        100,
        Match::new()
            .in_port(3)
            .eth_type(0x0800)
            .reg(1, 0x64)
            .ipv4_dst(std::net::Ipv4Addr::new(10, 244, 0, 2), 32),
    )
    .cookie(0x3000)
    .apply(vec![
        Action::move_(
            FieldSlice::range(Field::TunnelId, 0, 32),
            FieldSlice::whole(Field::Reg(2)),
        ),
        Action::set_field(Field::EthSrc, &[0x0a, 0x58, 0, 0, 0, 1]),
        Action::DecTtl,
        Action::output(2),
    ])
    .goto(30);
    let flow_mod = Message::FlowMod(FlowMod::add(flow));
    let group_mod = |group_type, watch_port, weight| {
        Message::GroupMod(GroupMod {
            command: GroupModCommand::Add,
            group: Group {
                group_id: 7,
                group_type,
                buckets: vec![Bucket {
                    weight,
                    watch_port,
                    ..Bucket::new(vec![
                        Action::set_field_u64(Field::TunnelId, 5),
                        Action::output(1),
                    ])
                }],
            },
        })
    };
    let any = ofproto::action::port::ANY;
    for m in [
        flow_mod.clone(),
        group_mod(GroupType::All, any, 0),
        group_mod(GroupType::Select, any, 10),
        group_mod(GroupType::Indirect, any, 0),
        group_mod(GroupType::FastFailover, 3, 0),
        Message::BundleAdd(BundleAdd::new(2, 1, flow_mod.clone())),
        Message::BundleAdd(BundleAdd::new(2, 1, group_mod(GroupType::Select, any, 3))),
        Message::Error(ErrorMsg {
            kind: ErrorKind::FlowModFailed(FlowModFailedCode::Overlap),
            data: flow_mod.encode(9),
        }),
    ] {
        seeds.push(m.encode(9));
    }
    seeds
}

/// FLOW_MODs that Open vSwitch encoded from `data/fuzz/action_flows.in` (one per action class
/// flowmesh decodes since issue 19: nat with IPv6, controller2, dec_ttl(ids), output_reg,
/// sample, clone, multipath, bundle, check_pkt_larger, ...), see `data/fuzz/README.md`.
fn action_flow_seeds() -> Vec<Vec<u8>> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/action_flows.hex");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| ofproto::parse_hex(l).expect("seed hex"))
        .collect()
}

/// The action list of a seed FLOW_MOD (the body of its apply_actions instruction).
fn apply_actions_of(flow_mod: &[u8]) -> Vec<u8> {
    let match_len = u16::from_be_bytes([flow_mod[50], flow_mod[51]]) as usize;
    let mut at = 48 + match_len.div_ceil(8) * 8;
    let mut out = Vec::new();
    while at + 8 <= flow_mod.len() {
        let ty = u16::from_be_bytes([flow_mod[at], flow_mod[at + 1]]);
        let len = u16::from_be_bytes([flow_mod[at + 2], flow_mod[at + 3]]) as usize;
        if len < 8 || at + len > flow_mod.len() {
            break;
        }
        if ty == 4 {
            out.extend_from_slice(&flow_mod[at + 8..at + len]);
        }
        at += len;
    }
    out
}

/// Every seed decodes without `unknown_action`, and 200,000 mutations of the seeds' action
/// lists (the action decoder alone, where a mutation is most likely to reach the new
/// decoders) never panic; whatever decodes re-encodes to exactly its input and prints.
#[test]
fn mutated_action_lists_of_every_decoded_class_never_panic() {
    use ofproto::action::{decode_actions, encode_actions};
    use ofproto::text::actions::format_actions;
    use ofproto::wire::Reader;
    let lists: Vec<Vec<u8>> = action_flow_seeds()
        .iter()
        .map(|m| apply_actions_of(m))
        .collect();
    assert!(lists.len() >= 30, "{} seeds", lists.len());
    for l in &lists {
        let a = decode_actions(&mut Reader::new(l)).expect("seed decodes");
        let text = format_actions(&a);
        assert!(!text.contains("unknown_action"), "{text}");
    }
    let mut rng = Rng(0x5eed_0019);
    let (mut decoded, total) = (0usize, 200_000usize);
    for _ in 0..total {
        let mut m = lists[rng.below(lists.len())].clone();
        for _ in 0..=rng.below(3) {
            match rng.below(5) {
                0 if !m.is_empty() => {
                    let i = rng.below(m.len());
                    m[i] ^= 1 << rng.below(8);
                }
                1 if !m.is_empty() => {
                    let i = rng.below(m.len());
                    m[i] = rng.next() as u8;
                }
                2 if m.len() > 4 => {
                    // an inner 16-bit field: lengths, counts, property lengths, subtypes
                    let i = rng.below(m.len() - 1);
                    let v = rng.below(80) as u16;
                    m[i..i + 2].copy_from_slice(&v.to_be_bytes());
                }
                3 => {
                    let n = rng.below(m.len() + 1);
                    m.truncate(n);
                }
                _ => {
                    let other = &lists[rng.below(lists.len())];
                    let at = rng.below(m.len() / 8 + 1) * 8;
                    m.splice(at..at, other.iter().copied());
                }
            }
        }
        if let Ok(a) = decode_actions(&mut Reader::new(&m)) {
            decoded += 1;
            let mut again = Vec::new();
            encode_actions(&a, &mut again);
            assert_eq!(again, m, "re-encoding of {}", common::hex(&m));
            let _ = format_actions(&a);
        }
    }
    assert!(decoded > total / 20, "only {decoded} decoded");
    eprintln!("{total} mutated action lists, {decoded} decoded and round-tripped");
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut m = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(3) {
        match rng.below(8) {
            0 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] ^= 1 << rng.below(8);
            }
            1 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] = rng.next() as u8;
            }
            2 => {
                let n = rng.below(m.len() + 1);
                m.truncate(n);
            }
            3 if m.len() >= 4 => {
                // corrupt the header length
                let v = match rng.below(3) {
                    0 => rng.next() as u16,
                    1 => m.len() as u16,
                    _ => (m.len() as u16)
                        .wrapping_add(rng.below(16) as u16)
                        .wrapping_sub(8),
                };
                m[2..4].copy_from_slice(&v.to_be_bytes());
            }
            4 if m.len() > 16 => {
                // corrupt an inner 16-bit length-like field
                let i = 8 + rng.below(m.len() - 9);
                let v = rng.below(96) as u16;
                m[i..i + 2].copy_from_slice(&v.to_be_bytes());
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let at = rng.below(m.len() + 1);
                let from = rng.below(other.len() + 1);
                m.splice(at..at, other[from..].iter().take(64).copied());
            }
            6 if m.len() >= 2 => {
                m[1] = rng.below(32) as u8; // another message type
            }
            _ => {
                let n = m.len() as u16;
                if m.len() >= 4 {
                    m[2..4].copy_from_slice(&n.to_be_bytes());
                }
            }
        }
    }
    m
}

fn check(input: &[u8]) -> bool {
    let Ok((header, msg, used)) = decode_frame(input) else {
        return false;
    };
    assert!(used <= input.len());
    let bytes = msg.encode(header.xid);
    let (h2, again, used2) = decode_frame(&bytes)
        .unwrap_or_else(|e| panic!("re-encoding of {} does not decode: {e}", common::hex(input)));
    assert_eq!(used2, bytes.len());
    assert_eq!(h2.xid, header.xid);
    assert_eq!(again, msg, "value changed for input {}", common::hex(input));
    assert_eq!(again.encode(header.xid), bytes);
    // Text rendering must not panic either.
    let _ = again.display(header.xid).to_string();
    true
}

#[test]
fn mutated_and_random_inputs_never_panic_and_round_trip() {
    let seeds = corpus();
    let mut rng = Rng(0x5eed_f10e_u64);
    let mut decoded = 0usize;
    const MUTATED: usize = 100_000;
    const RANDOM: usize = 20_000;
    for _ in 0..MUTATED {
        let input = mutate(&mut rng, &seeds);
        decoded += check(&input) as usize;
    }
    for _ in 0..RANDOM {
        let len = rng.below(96);
        let mut input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if input.len() >= 4 {
            input[0] = 4;
            let n = input.len() as u16;
            input[2..4].copy_from_slice(&n.to_be_bytes());
        }
        decoded += check(&input) as usize;
    }
    // Some of the inputs must still be valid messages, or the pass tests nothing.
    assert!(decoded > MUTATED / 20, "only {decoded} inputs decoded");
    eprintln!(
        "{} inputs, {decoded} decoded and round-tripped",
        MUTATED + RANDOM
    );
}

#[test]
fn every_prefix_of_every_capture_is_handled() {
    for seed in corpus() {
        for n in 0..seed.len().min(300) {
            let _ = check(&seed[..n]);
        }
        let _: Option<Message> = decode_frame(&seed).ok().map(|(_, m, _)| m);
    }
}
