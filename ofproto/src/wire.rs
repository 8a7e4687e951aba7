//! Bounds-checked big-endian reading and writing of OpenFlow wire data.
//!
//! Every decoder reads through a [`Reader`], which never indexes out of bounds and names what it
//! was reading when the bytes run out.

use crate::error::DecodeError;

/// A cursor over wire bytes.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, positioned at its start.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True once every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Offset of the next byte from the start of the buffer.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The unread bytes, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The next `n` bytes, without consuming them.
    pub fn peek(&self, n: usize, context: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                context,
                need: n,
                have: self.remaining(),
            });
        }
        Ok(&self.buf[self.pos..self.pos + n])
    }

    /// Consume and return `n` bytes.
    pub fn bytes(&mut self, n: usize, context: &'static str) -> Result<&'a [u8], DecodeError> {
        let b = self.peek(n, context)?;
        self.pos += n;
        Ok(b)
    }

    /// Consume `n` bytes and return a reader over them.
    pub fn sub(&mut self, n: usize, context: &'static str) -> Result<Reader<'a>, DecodeError> {
        Ok(Reader::new(self.bytes(n, context)?))
    }

    /// Skip `n` bytes.
    pub fn skip(&mut self, n: usize, context: &'static str) -> Result<(), DecodeError> {
        self.bytes(n, context).map(|_| ())
    }

    /// Read a fixed-size array.
    pub fn array<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(N, context)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    /// Read a u8.
    pub fn u8(&mut self, context: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(context)?[0])
    }

    /// Read a big-endian u16.
    pub fn u16(&mut self, context: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(context)?))
    }

    /// Read a big-endian u32.
    pub fn u32(&mut self, context: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(context)?))
    }

    /// Read a big-endian u64.
    pub fn u64(&mut self, context: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(context)?))
    }
}

/// Big-endian writes onto a byte vector.
pub trait Writer {
    /// Append a u8.
    fn put_u8(&mut self, v: u8);
    /// Append a big-endian u16.
    fn put_u16(&mut self, v: u16);
    /// Append a big-endian u32.
    fn put_u32(&mut self, v: u32);
    /// Append a big-endian u64.
    fn put_u64(&mut self, v: u64);
    /// Append bytes.
    fn put_slice(&mut self, b: &[u8]);
    /// Append `n` zero bytes.
    fn put_zeros(&mut self, n: usize);
    /// Overwrite a big-endian u16 at `offset` (used to patch lengths after encoding a body).
    fn patch_u16(&mut self, offset: usize, v: u16);
    /// Pad with zeros so that the length since `start` is a multiple of 8.
    fn pad_to_8(&mut self, start: usize);
}

impl Writer for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_slice(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn patch_u16(&mut self, offset: usize, v: u16) {
        if let Some(dst) = self.get_mut(offset..offset + 2) {
            dst.copy_from_slice(&v.to_be_bytes());
        }
    }
    fn pad_to_8(&mut self, start: usize) {
        let len = self.len().saturating_sub(start);
        self.put_zeros((8 - len % 8) % 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_never_reads_past_the_end() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16("x").ok(), Some(0x0102));
        assert!(matches!(
            r.u16("y"),
            Err(DecodeError::Truncated {
                context: "y",
                need: 2,
                have: 1
            })
        ));
        assert_eq!(r.u8("z").ok(), Some(3));
        assert!(r.is_empty());
    }

    #[test]
    fn pad_to_8_pads_from_start() {
        let mut w = vec![0xaa; 3];
        w.put_u16(1);
        w.pad_to_8(1);
        assert_eq!(w.len(), 9);
    }
}
