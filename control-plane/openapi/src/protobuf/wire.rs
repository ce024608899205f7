//! Protocol buffers wire encoding of proto3 messages, the few types gnostic's schema needs.
//!
//! Scalars equal to their default are omitted, as proto3 does; values inside a `oneof` are
//! written even when default, so that the choice is recorded.

/// Wire type of varints (bool, int64).
const VARINT: u8 = 0;
/// Wire type of 64-bit fixed values (double).
const FIXED64: u8 = 1;
/// Wire type of length-delimited values (string, bytes, messages).
const LEN: u8 = 2;

/// A message being encoded.
#[derive(Debug, Default)]
pub(crate) struct Message {
    buf: Vec<u8>,
}

impl Message {
    /// An empty message.
    pub(crate) fn new() -> Message {
        Message::default()
    }

    /// The encoded bytes.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v & 0x7f) as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    /// A length-delimited field, written even when empty.
    pub(crate) fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LEN);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    /// A string field, omitted when empty.
    pub(crate) fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    /// One element of a repeated string field (written even when empty).
    pub(crate) fn repeated_string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    /// A bool field, omitted when false.
    pub(crate) fn bool(&mut self, field: u32, v: bool) {
        if v {
            self.oneof_bool(field, v);
        }
    }

    /// A bool inside a `oneof`, always written.
    pub(crate) fn oneof_bool(&mut self, field: u32, v: bool) {
        self.key(field, VARINT);
        self.varint(u64::from(v));
    }

    /// An int64 field, omitted when zero.
    pub(crate) fn int64(&mut self, field: u32, v: i64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v as u64);
        }
    }

    /// A double field, omitted when zero.
    pub(crate) fn double(&mut self, field: u32, v: f64) {
        if v != 0.0 {
            self.key(field, FIXED64);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// A sub-message field, always written.
    pub(crate) fn message(&mut self, field: u32, m: Message) {
        self.bytes(field, &m.buf);
    }
}

/// A decoder for tests: splits a message into its fields.
#[cfg(test)]
pub(crate) mod decode {
    /// One decoded field value.
    #[derive(Debug, PartialEq)]
    pub(crate) enum Field<'a> {
        Varint(u64),
        Fixed64(u64),
        Len(&'a [u8]),
    }

    fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *buf.get(*pos)?;
            *pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// All (field number, value) pairs of a message; `None` when malformed or truncated.
    pub(crate) fn fields(buf: &[u8]) -> Option<Vec<(u32, Field<'_>)>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < buf.len() {
            let key = varint(buf, &mut pos)?;
            let field = u32::try_from(key >> 3).ok()?;
            let value = match key & 7 {
                0 => Field::Varint(varint(buf, &mut pos)?),
                1 => {
                    let bytes: [u8; 8] = buf.get(pos..pos + 8)?.try_into().ok()?;
                    pos += 8;
                    Field::Fixed64(u64::from_le_bytes(bytes))
                }
                2 => {
                    let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                    let bytes = buf.get(pos..pos.checked_add(len)?)?;
                    pos += len;
                    Field::Len(bytes)
                }
                _ => return None,
            };
            out.push((field, value));
        }
        Some(out)
    }

    /// The values of `field`.
    pub(crate) fn all<'a>(fields: &'a [(u32, Field<'a>)], field: u32) -> Vec<&'a Field<'a>> {
        fields
            .iter()
            .filter(|(f, _)| *f == field)
            .map(|(_, v)| v)
            .collect()
    }

    /// The single length-delimited value of `field`.
    pub(crate) fn len<'a>(fields: &[(u32, Field<'a>)], field: u32) -> Option<&'a [u8]> {
        fields.iter().find_map(|(f, v)| match v {
            Field::Len(b) if *f == field => Some(*b),
            _ => None,
        })
    }

    /// The single string value of `field`.
    pub(crate) fn string<'a>(fields: &[(u32, Field<'a>)], field: u32) -> Option<&'a str> {
        std::str::from_utf8(len(fields, field)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::decode::{fields, Field};
    use super::*;

    #[test]
    fn encodes_known_bytes() {
        let mut m = Message::new();
        m.string(1, "hi");
        m.int64(2, 300);
        m.bool(3, true);
        m.bool(4, false);
        m.string(5, "");
        assert_eq!(
            m.into_bytes(),
            [0x0a, 2, b'h', b'i', 0x10, 0xac, 0x02, 0x18, 1]
        );
    }

    #[test]
    fn round_trips_through_the_decoder() {
        let mut inner = Message::new();
        inner.oneof_bool(2, false);
        let mut m = Message::new();
        m.double(7, 1.5);
        m.message(9, inner);
        m.repeated_string(3, "");
        let bytes = m.into_bytes();
        let got = fields(&bytes).unwrap_or_default();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (7, Field::Fixed64(1.5f64.to_bits())));
        assert_eq!(got[1], (9, Field::Len(&[0x10, 0])));
        assert_eq!(got[2], (3, Field::Len(&[])));
        assert!(fields(&[0x0a, 5, b'x']).is_none());
    }
}
