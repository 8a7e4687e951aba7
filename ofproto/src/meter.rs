//! OpenFlow 1.3 meters (OpenFlow 1.3.5 §7.3.4.5, §7.3.5.12–14): the meter a switch holds,
//! METER_MOD, and the bodies of the meter multipart requests and replies.
//!
//! ```text
//! struct ofp_meter_mod { struct ofp_header header; uint16_t command; uint16_t flags;
//!     uint32_t meter_id; struct ofp_meter_band_header bands[0]; };            /* 16 */
//! struct ofp_meter_band_header { uint16_t type; uint16_t len; uint32_t rate;
//!     uint32_t burst_size; };                                                  /* 12 */
//! drop:         header + uint8_t pad[4]                                        /* 16 */
//! dscp_remark:  header + uint8_t prec_level; uint8_t pad[3]                    /* 16 */
//! experimenter: header + uint32_t experimenter                                 /* 16 */
//! struct ofp_meter_config { uint16_t length; uint16_t flags; uint32_t meter_id;
//!     struct ofp_meter_band_header bands[0]; };                                /* 8 */
//! struct ofp_meter_stats { uint32_t meter_id; uint16_t len; uint8_t pad[6];
//!     uint32_t flow_count; uint64_t packet_in_count; uint64_t byte_in_count;
//!     uint32_t duration_sec; uint32_t duration_nsec;
//!     struct ofp_meter_band_stats band_stats[0]; };   /* 40; band: 2 x uint64_t */
//! struct ofp_meter_features { uint32_t max_meter; uint32_t band_types;
//!     uint32_t capabilities; uint8_t max_bands; uint8_t max_color; uint8_t pad[2]; };
//! ```
//! A band of a type flowmesh does not know keeps the bytes after its header, so it is
//! re-encoded exactly.

use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

/// OFPMF_* meter flags.
pub mod meter_flags {
    /// Rate in kilobits per second.
    pub const KBPS: u16 = 1;
    /// Rate in packets per second.
    pub const PKTPS: u16 = 2;
    /// The bands' burst sizes apply.
    pub const BURST: u16 = 4;
    /// Keep statistics.
    pub const STATS: u16 = 8;
}

/// Reserved meter ids (`ofp_meter`).
pub mod meter_id {
    /// The last meter id a flow may use.
    pub const MAX: u32 = 0xffff_0000;
    /// The meter of the slow datapath.
    pub const SLOWPATH: u32 = 0xffff_fffd;
    /// The meter of packets to the controller.
    pub const CONTROLLER: u32 = 0xffff_fffe;
    /// Every meter (requests and deletes).
    pub const ALL: u32 = 0xffff_ffff;
}

/// OFPMBT_* band types.
pub mod band_type {
    /// Drop the packet.
    pub const DROP: u16 = 1;
    /// Remark the DSCP field.
    pub const DSCP_REMARK: u16 = 2;
    /// An experimenter band.
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Size of every band type OpenFlow 1.3 defines.
const BAND_LEN: usize = 16;
/// Size of `ofp_meter_band_header`.
const BAND_HEADER_LEN: usize = 12;

/// What a band does beyond its rate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BandKind {
    /// OFPMBT_DROP.
    Drop,
    /// OFPMBT_DSCP_REMARK with its drop precedence increase.
    DscpRemark {
        /// Number of precedence levels to add.
        prec_level: u8,
    },
    /// OFPMBT_EXPERIMENTER.
    Experimenter {
        /// Experimenter id.
        experimenter: u32,
    },
    /// A band type flowmesh does not model: the bytes after the header, kept.
    Unknown {
        /// OFPMBT_* value.
        band_type: u16,
        /// The bytes after `ofp_meter_band_header`.
        body: Vec<u8>,
    },
}

/// One band of a meter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MeterBand {
    /// What the band does.
    pub kind: BandKind,
    /// Rate (kb/s or packets/s, per the meter's flags) above which the band applies.
    pub rate: u32,
    /// Burst size (kilobits or packets), used with OFPMF_BURST.
    pub burst_size: u32,
}

impl MeterBand {
    /// A drop band.
    pub fn drop(rate: u32, burst_size: u32) -> Self {
        MeterBand {
            kind: BandKind::Drop,
            rate,
            burst_size,
        }
    }

    /// The OFPMBT_* value.
    pub fn band_type(&self) -> u16 {
        match &self.kind {
            BandKind::Drop => band_type::DROP,
            BandKind::DscpRemark { .. } => band_type::DSCP_REMARK,
            BandKind::Experimenter { .. } => band_type::EXPERIMENTER,
            BandKind::Unknown { band_type, .. } => *band_type,
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_meter_band";
        let t = r.u16(ctx)?;
        let len = usize::from(r.u16(ctx)?);
        if len < BAND_HEADER_LEN || len % 8 != 0 {
            return Err(DecodeError::BadLength {
                context: "ofp_meter_band_header.len",
                len,
            });
        }
        let mut b = r.sub(len - 4, ctx)?;
        let rate = b.u32(ctx)?;
        let burst_size = b.u32(ctx)?;
        // Every band type OpenFlow 1.3 defines is exactly 16 bytes.
        let known = || {
            if len == BAND_LEN {
                Ok(())
            } else {
                Err(DecodeError::BadLength {
                    context: "ofp_meter_band_header.len",
                    len,
                })
            }
        };
        let kind = match t {
            band_type::DROP => {
                known()?;
                BandKind::Drop
            }
            band_type::DSCP_REMARK => {
                known()?;
                BandKind::DscpRemark {
                    prec_level: b.u8(ctx)?,
                }
            }
            band_type::EXPERIMENTER => {
                known()?;
                BandKind::Experimenter {
                    experimenter: b.u32(ctx)?,
                }
            }
            other => BandKind::Unknown {
                band_type: other,
                body: b.rest().to_vec(),
            },
        };
        Ok(MeterBand {
            kind,
            rate,
            burst_size,
        })
    }

    fn encode(&self, w: &mut Vec<u8>) {
        w.put_u16(self.band_type());
        let body_len = match &self.kind {
            BandKind::Unknown { body, .. } => body.len(),
            _ => BAND_LEN - BAND_HEADER_LEN,
        };
        w.put_u16((BAND_HEADER_LEN + body_len).min(usize::from(u16::MAX)) as u16);
        w.put_u32(self.rate);
        w.put_u32(self.burst_size);
        match &self.kind {
            BandKind::Drop => w.put_zeros(4),
            BandKind::DscpRemark { prec_level } => {
                w.put_u8(*prec_level);
                w.put_zeros(3);
            }
            BandKind::Experimenter { experimenter } => w.put_u32(*experimenter),
            BandKind::Unknown { body, .. } => w.put_slice(body),
        }
    }
}

/// A meter: what the pipeline wants installed, and what a METER_CONFIG reply reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Meter {
    /// Meter id (1..=[`meter_id::MAX`]).
    pub meter_id: u32,
    /// OFPMF_* flags ([`meter_flags`]).
    pub flags: u16,
    /// Bands.
    pub bands: Vec<MeterBand>,
}

/// Decode bands until `r` is empty.
fn decode_bands(r: &mut Reader<'_>) -> Result<Vec<MeterBand>, DecodeError> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(MeterBand::decode(r)?);
    }
    Ok(v)
}

/// OFPMC_* meter-mod commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MeterModCommand {
    /// New meter.
    Add,
    /// Change a meter's flags and bands.
    Modify,
    /// Delete a meter (and the flows that use it).
    Delete,
    /// Unknown command value, kept.
    Unknown(u16),
}

impl MeterModCommand {
    /// From the wire value.
    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => MeterModCommand::Add,
            1 => MeterModCommand::Modify,
            2 => MeterModCommand::Delete,
            v => MeterModCommand::Unknown(v),
        }
    }
    /// The wire value.
    pub fn to_u16(self) -> u16 {
        match self {
            MeterModCommand::Add => 0,
            MeterModCommand::Modify => 1,
            MeterModCommand::Delete => 2,
            MeterModCommand::Unknown(v) => v,
        }
    }
}

/// The body of an OFPT_METER_MOD.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MeterMod {
    /// The command.
    pub command: MeterModCommand,
    /// The meter (a delete carries only its id, as `ovs-ofctl del-meter` sends it).
    pub meter: Meter,
}

impl MeterMod {
    /// Add `meter`.
    pub fn add(meter: Meter) -> Self {
        MeterMod {
            command: MeterModCommand::Add,
            meter,
        }
    }
    /// Replace the flags and bands of `meter.meter_id`.
    pub fn modify(meter: Meter) -> Self {
        MeterMod {
            command: MeterModCommand::Modify,
            meter,
        }
    }
    /// Delete meter `id`.
    pub fn delete(id: u32) -> Self {
        MeterMod {
            command: MeterModCommand::Delete,
            meter: Meter {
                meter_id: id,
                flags: 0,
                bands: Vec::new(),
            },
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ctx = "ofp_meter_mod";
        let command = MeterModCommand::from_u16(r.u16(ctx)?);
        let flags = r.u16(ctx)?;
        let meter_id = r.u32(ctx)?;
        let bands = decode_bands(r)?;
        Ok(MeterMod {
            command,
            meter: Meter {
                meter_id,
                flags,
                bands,
            },
        })
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u16(self.command.to_u16());
        w.put_u16(self.meter.flags);
        w.put_u32(self.meter.meter_id);
        self.meter.bands.iter().for_each(|b| b.encode(w));
    }
}

/// Decode the `ofp_meter_config` entries of an OFPMP_METER_CONFIG reply.
pub(crate) fn decode_meter_configs(r: &mut Reader<'_>) -> Result<Vec<Meter>, DecodeError> {
    let ctx = "ofp_meter_config";
    let mut v = Vec::new();
    while !r.is_empty() {
        let len = usize::from(r.u16(ctx)?);
        if len < 8 {
            return Err(DecodeError::BadLength {
                context: "ofp_meter_config.length",
                len,
            });
        }
        let mut e = r.sub(len - 2, ctx)?;
        let flags = e.u16(ctx)?;
        let meter_id = e.u32(ctx)?;
        let bands = decode_bands(&mut e)?;
        v.push(Meter {
            meter_id,
            flags,
            bands,
        });
    }
    Ok(v)
}

/// Encode meters as the entries of an OFPMP_METER_CONFIG reply.
pub(crate) fn encode_meter_configs(meters: &[Meter], w: &mut Vec<u8>) {
    for m in meters {
        let start = w.len();
        w.put_u16(0);
        w.put_u16(m.flags);
        w.put_u32(m.meter_id);
        m.bands.iter().for_each(|b| b.encode(w));
        let len = (w.len() - start).min(usize::from(u16::MAX)) as u16;
        w.patch_u16(start, len);
    }
}

/// One meter of an OFPMP_METER reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterStats {
    /// Meter id.
    pub meter_id: u32,
    /// Flows using the meter.
    pub flow_count: u32,
    /// Packets that entered the meter.
    pub packet_in_count: u64,
    /// Bytes that entered the meter.
    pub byte_in_count: u64,
    /// Time alive, seconds.
    pub duration_sec: u32,
    /// Time alive, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// Per band: (packets, bytes) the band applied to (a drop band: dropped).
    pub band_stats: Vec<(u64, u64)>,
}

/// Size of `ofp_meter_stats` before the band statistics.
const METER_STATS_LEN: usize = 40;

impl MeterStats {
    pub(crate) fn decode_all(r: &mut Reader<'_>) -> Result<Vec<Self>, DecodeError> {
        let c = "ofp_meter_stats";
        let mut v = Vec::new();
        while !r.is_empty() {
            let meter_id = r.u32(c)?;
            let len = usize::from(r.u16(c)?);
            if len < METER_STATS_LEN || !(len - METER_STATS_LEN).is_multiple_of(16) {
                return Err(DecodeError::BadLength {
                    context: "ofp_meter_stats.len",
                    len,
                });
            }
            let mut e = r.sub(len - 6, c)?;
            e.skip(6, c)?;
            let flow_count = e.u32(c)?;
            let packet_in_count = e.u64(c)?;
            let byte_in_count = e.u64(c)?;
            let duration_sec = e.u32(c)?;
            let duration_nsec = e.u32(c)?;
            let mut band_stats = Vec::new();
            while !e.is_empty() {
                band_stats.push((e.u64(c)?, e.u64(c)?));
            }
            v.push(MeterStats {
                meter_id,
                flow_count,
                packet_in_count,
                byte_in_count,
                duration_sec,
                duration_nsec,
                band_stats,
            });
        }
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.meter_id);
        let len = METER_STATS_LEN + 16 * self.band_stats.len();
        w.put_u16(len.min(usize::from(u16::MAX)) as u16);
        w.put_zeros(6);
        w.put_u32(self.flow_count);
        w.put_u64(self.packet_in_count);
        w.put_u64(self.byte_in_count);
        w.put_u32(self.duration_sec);
        w.put_u32(self.duration_nsec);
        for (p, b) in &self.band_stats {
            w.put_u64(*p);
            w.put_u64(*b);
        }
    }
}

/// OFPMP_METER_FEATURES reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeterFeatures {
    /// Most meters the switch holds (0: no meters).
    pub max_meter: u32,
    /// Bitmap of supported band types (bit `1 << OFPMBT_*`).
    pub band_types: u32,
    /// Bitmap of supported OFPMF_* flags.
    pub capabilities: u32,
    /// Most bands per meter.
    pub max_bands: u8,
    /// Most colour values.
    pub max_color: u8,
}

impl MeterFeatures {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let c = "ofp_meter_features";
        let f = MeterFeatures {
            max_meter: r.u32(c)?,
            band_types: r.u32(c)?,
            capabilities: r.u32(c)?,
            max_bands: r.u8(c)?,
            max_color: r.u8(c)?,
        };
        r.skip(2, c)?;
        Ok(f)
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        w.put_u32(self.max_meter);
        w.put_u32(self.band_types);
        w.put_u32(self.capabilities);
        w.put_u8(self.max_bands);
        w.put_u8(self.max_color);
        w.put_zeros(2);
    }

    /// Why a meter cannot be installed on a switch with these features (None: it can).
    pub fn refusal(&self, m: &Meter) -> Option<String> {
        if self.max_meter == 0 {
            return Some("the switch has no meters (meter features: max_meter=0)".into());
        }
        if m.meter_id > self.max_meter {
            return Some(format!(
                "meter {} is above the switch's max_meter {}",
                m.meter_id, self.max_meter
            ));
        }
        if m.bands.len() > usize::from(self.max_bands) {
            return Some(format!(
                "meter {} has {} bands; the switch allows {}",
                m.meter_id,
                m.bands.len(),
                self.max_bands
            ));
        }
        let missing = m.flags & !(self.capabilities as u16);
        if missing != 0 {
            return Some(format!(
                "meter {} needs flags {missing:#x} the switch does not have (capabilities {:#x})",
                m.meter_id, self.capabilities
            ));
        }
        for b in &m.bands {
            let bit = 1u32.checked_shl(u32::from(b.band_type())).unwrap_or(0);
            if self.band_types & bit == 0 {
                return Some(format!(
                    "meter {} uses band type {} the switch does not have (band types {:#x})",
                    m.meter_id,
                    b.band_type(),
                    self.band_types
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter() -> Meter {
        Meter {
            meter_id: 1,
            flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
            bands: vec![MeterBand::drop(20, 20)],
        }
    }

    #[test]
    fn meter_mod_round_trips_with_every_band_kind() {
        let mut m = meter();
        m.bands.push(MeterBand {
            kind: BandKind::DscpRemark { prec_level: 2 },
            rate: 5,
            burst_size: 6,
        });
        m.bands.push(MeterBand {
            kind: BandKind::Experimenter {
                experimenter: 0x2320,
            },
            rate: 7,
            burst_size: 8,
        });
        m.bands.push(MeterBand {
            kind: BandKind::Unknown {
                band_type: 9,
                body: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            },
            rate: 9,
            burst_size: 10,
        });
        let mm = MeterMod::add(m);
        let mut w = Vec::new();
        mm.encode(&mut w);
        assert_eq!(w.len(), 8 + 16 * 3 + 24);
        let back = MeterMod::decode(&mut Reader::new(&w)).expect("decode");
        assert_eq!(back, mm);
        let mut again = Vec::new();
        back.encode(&mut again);
        assert_eq!(again, w);
    }

    #[test]
    fn band_lengths_are_checked() {
        // A drop band claiming 24 bytes, a band shorter than its header, a length not a
        // multiple of 8, a band running past the message.
        for bad in [
            &[
                0u8, 1, 0, 24, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ][..],
            &[0, 1, 0, 8, 0, 0, 0, 1][..],
            &[0, 9, 0, 20, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0][..],
            &[0, 1, 0, 16, 0, 0, 0, 1][..],
        ] {
            let mut body = vec![0, 0, 0, 2, 0, 0, 0, 1];
            body.extend_from_slice(bad);
            assert!(
                MeterMod::decode(&mut Reader::new(&body)).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn meter_stats_and_configs_round_trip() {
        let s = MeterStats {
            meter_id: 1,
            flow_count: 3,
            packet_in_count: 100,
            byte_in_count: 6400,
            duration_sec: 5,
            duration_nsec: 7,
            band_stats: vec![(80, 5120)],
        };
        let mut w = Vec::new();
        s.encode(&mut w);
        assert_eq!(w.len(), 56);
        assert_eq!(
            MeterStats::decode_all(&mut Reader::new(&w)).expect("stats"),
            vec![s]
        );
        let mut w = Vec::new();
        encode_meter_configs(&[meter(), meter()], &mut w);
        assert_eq!(
            decode_meter_configs(&mut Reader::new(&w)).expect("configs"),
            vec![meter(), meter()]
        );
    }

    #[test]
    fn features_say_what_a_switch_cannot_hold() {
        let ovs = MeterFeatures {
            max_meter: 262_144,
            band_types: 1 << band_type::DROP,
            capabilities: 0xf,
            max_bands: 8,
            max_color: 0,
        };
        assert_eq!(ovs.refusal(&meter()), None);
        let none = MeterFeatures {
            max_meter: 0,
            ..ovs
        };
        assert!(none
            .refusal(&meter())
            .is_some_and(|e| e.contains("no meters")));
        let mut remark = meter();
        remark.bands[0].kind = BandKind::DscpRemark { prec_level: 1 };
        assert!(ovs
            .refusal(&remark)
            .is_some_and(|e| e.contains("band type 2")));
        let no_pktps = MeterFeatures {
            capabilities: u32::from(meter_flags::KBPS),
            ..ovs
        };
        assert!(no_pktps.refusal(&meter()).is_some());
    }
}
