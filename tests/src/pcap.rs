//! Minimal reader for the classic pcap files OVS dummy ports write (`options:tx_pcap=FILE`).

use crate::error::{HarnessError, Result};

/// Splits a classic pcap file into its frames. A partially written last record is ignored
/// (OVS may be writing while we read).
pub fn pcap_frames(bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
    let bad = |detail: String| HarnessError::Parse {
        what: "pcap".into(),
        detail,
    };
    let magic = bytes
        .get(..4)
        .ok_or_else(|| bad("shorter than a header".into()))?;
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        other => return Err(bad(format!("bad magic {other:02x?}"))),
    };
    let u32_at = |off: usize| -> Option<u32> {
        let b: [u8; 4] = bytes.get(off..off + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let mut frames = Vec::new();
    let mut off = 24usize;
    while off + 16 <= bytes.len() {
        let Some(incl) = u32_at(off + 8).and_then(|n| usize::try_from(n).ok()) else {
            break;
        };
        let start = off + 16;
        let Some(frame) = start
            .checked_add(incl)
            .and_then(|end| bytes.get(start..end))
        else {
            break;
        };
        frames.push(frame.to_vec());
        off = start + incl;
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_frames_and_ignores_truncated_tail() {
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        f.extend([0u8; 16]);
        for payload in [&[1u8, 2, 3][..], &[9u8][..]] {
            f.extend([0u8; 8]);
            f.extend((payload.len() as u32).to_le_bytes());
            f.extend((payload.len() as u32).to_le_bytes());
            f.extend(payload);
        }
        f.extend([0u8; 8]);
        f.extend(100u32.to_le_bytes());
        f.extend(100u32.to_le_bytes());
        f.extend([7u8; 10]);
        let frames = pcap_frames(&f).expect("pcap");
        assert_eq!(frames, vec![vec![1, 2, 3], vec![9]]);
        assert!(pcap_frames(&[1, 2]).is_err());
        assert!(pcap_frames(&[0u8; 24]).is_err());
    }
}
