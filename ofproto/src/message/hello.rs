//! OFPT_HELLO and its elements (OpenFlow 1.3.5 §7.5.1).
//!
//! ```text
//! struct ofp_hello { struct ofp_header header; struct ofp_hello_elem_header elements[0]; };
//! struct ofp_hello_elem_header { uint16_t type; uint16_t length; };  /* padded to 8 */
//! struct ofp_hello_elem_versionbitmap { uint16_t type; uint16_t length; uint32_t bitmaps[0]; };
//! ```

use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

/// OFPHET_VERSIONBITMAP.
pub const HELLO_ELEM_VERSIONBITMAP: u16 = 1;

/// One element of a HELLO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelloElement {
    /// Supported versions: bit N of word N/32 set = version N supported.
    VersionBitmap(Vec<u32>),
    /// Any other element, kept (type and payload without padding).
    Unknown {
        /// Element type.
        elem_type: u16,
        /// Payload (after type and length, before padding).
        data: Vec<u8>,
    },
}

/// A HELLO message, with the version of its header (peers may send other versions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The header version the peer sent (its highest version).
    pub version: u8,
    /// The elements.
    pub elements: Vec<HelloElement>,
    /// Bytes after the last whole element that do not form one (kept for exact re-encoding;
    /// OpenFlow 1.0 peers may send arbitrary trailing data).
    pub trailing: Vec<u8>,
}

impl Hello {
    /// The HELLO flowmesh sends: version 1.3 with a bitmap naming only 1.3.
    pub fn of13() -> Self {
        Hello {
            version: super::OFP_VERSION,
            elements: vec![HelloElement::VersionBitmap(vec![1 << super::OFP_VERSION])],
            trailing: Vec::new(),
        }
    }

    /// The versions the peer supports: from its bitmap, or (without one) every version up to
    /// its header version.
    pub fn versions(&self) -> Vec<u8> {
        for e in &self.elements {
            if let HelloElement::VersionBitmap(words) = e {
                let mut out = Vec::new();
                for (i, w) in words.iter().enumerate() {
                    for bit in 0..32 {
                        if w & (1 << bit) != 0 {
                            if let Ok(v) = u8::try_from(i * 32 + bit) {
                                out.push(v);
                            }
                        }
                    }
                }
                return out;
            }
        }
        (1..=self.version).collect()
    }

    /// True if the peer can speak OpenFlow 1.3.
    pub fn supports_of13(&self) -> bool {
        self.versions().contains(&super::OFP_VERSION)
    }

    pub(crate) fn decode(version: u8, r: &mut Reader<'_>) -> Result<Hello, DecodeError> {
        let mut elements = Vec::new();
        while r.remaining() >= 4 {
            let head = r.peek(4, "hello element")?;
            let elem_type = u16::from_be_bytes([head[0], head[1]]);
            let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
            let padded = len.div_ceil(8) * 8;
            if len < 4 || padded > r.remaining() {
                break;
            }
            let mut probe = r.clone();
            let mut e = probe.sub(padded, "hello element")?;
            e.skip(4, "hello element header")?;
            let data = e.bytes(len - 4, "hello element body")?;
            if e.rest().iter().any(|&b| b != 0) {
                // Non-zero padding would not re-encode: keep this and the rest as trailing.
                break;
            }
            *r = probe;
            if elem_type == HELLO_ELEM_VERSIONBITMAP && data.len() % 4 == 0 {
                let words = data
                    .chunks_exact(4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                elements.push(HelloElement::VersionBitmap(words));
            } else {
                elements.push(HelloElement::Unknown {
                    elem_type,
                    data: data.to_vec(),
                });
            }
        }
        let trailing = r.rest().to_vec();
        Ok(Hello {
            version,
            elements,
            trailing,
        })
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        for e in &self.elements {
            let start = w.len();
            match e {
                HelloElement::VersionBitmap(words) => {
                    w.put_u16(HELLO_ELEM_VERSIONBITMAP);
                    w.put_u16((4 + 4 * words.len()) as u16);
                    for x in words {
                        w.put_u32(*x);
                    }
                }
                HelloElement::Unknown { elem_type, data } => {
                    w.put_u16(*elem_type);
                    w.put_u16((4 + data.len()) as u16);
                    w.put_slice(data);
                }
            }
            w.pad_to_8(start);
        }
        w.put_slice(&self.trailing);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode_message, Message};
    use super::*;

    #[test]
    fn ovs_hello_round_trips() {
        let raw = [4, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x10];
        let (m, _) = decode_message(&raw).expect("hello");
        assert_eq!(m, Message::Hello(Hello::of13()));
        assert_eq!(m.encode(1), raw);
    }

    #[test]
    fn unknown_elements_and_padding_are_kept() {
        // bitmap {1..4} (len 8), unknown type 2 with 5 data bytes (len 9, padded to 16)
        let raw = [
            4, 0, 0, 32, 0, 0, 0, 1, 0, 1, 0, 8, 0, 0, 0, 0x1e, 0, 2, 0, 9, 1, 2, 3, 4, 5, 0, 0, 0,
            0, 0, 0, 0,
        ];
        let (m, _) = decode_message(&raw).expect("hello");
        let Message::Hello(h) = &m else {
            panic!("not a hello")
        };
        assert_eq!(h.versions(), vec![1, 2, 3, 4]);
        assert!(
            matches!(&h.elements[1], HelloElement::Unknown { elem_type: 2, data } if data.len() == 5)
        );
        assert_eq!(m.encode(1), raw);
    }

    #[test]
    fn hello_without_bitmap_implies_versions_up_to_header() {
        let (m, _) = decode_message(&[5, 0, 0, 8, 0, 0, 0, 1]).expect("hello");
        let Message::Hello(h) = m else { panic!() };
        assert_eq!(h.versions(), vec![1, 2, 3, 4, 5]);
        assert!(h.supports_of13());
    }
}
