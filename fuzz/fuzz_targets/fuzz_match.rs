//! Match::decode on arbitrary bytes: never panics; whatever decodes re-encodes to the same
//! bytes (padding aside), decodes again to the same value, and formats.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ofproto::wire::Reader;
use ofproto::Match;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    if let Ok(m) = Match::decode(&mut r) {
        let used = r.position();
        let mut again = Vec::new();
        m.encode(&mut again);
        assert_eq!(again.len(), used);
        let len = usize::from(u16::from_be_bytes([data[2], data[3]]));
        assert_eq!(&again[..len], &data[..len]);
        assert_eq!(Match::decode(&mut Reader::new(&again)).as_ref(), Ok(&m));
        let _ = m.to_string();
    }
});
